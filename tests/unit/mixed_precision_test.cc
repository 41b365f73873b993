// Mixed precision (training.precision, docs/architecture/kernels.md "Mixed precision") without a
// GPU: the host rounding the emulated GPU uses, the fp16 loss scaler's state machine, products and
// gradients on an emulated GPU set to bf16/fp16 (with fp16's overflow), and the spec's checks.
// Training to accuracy in each precision is tests/e2e:gpu_worker_test.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/data/example_source.h"
#include "core/model/model.h"
#include "core/train/loss_scaler.h"
#include "core/train/worker.h"
#include "core/util/error.h"
#include "kernels/backend.h"
#include "kernels/gpu_devices.h"
#include "kernels/precision.h"
#include "tests/gpu_or_emulated.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

using kernels::Precision;

// The real GPU where there is one (a CUDA build), else an emulated one (a build without CUDA).
// DTRAIN_REQUIRE_GPU=1 (tools/test.sh's CUDA run, tools/gpu/checks.sh) skips the binary (exit
// 77) without a real GPU: the CPU build runs these cases on the emulated GPU.
bool g_real_gpu = false;
std::unique_ptr<kernels::Backend> gpu_backend() {
  testing::real_gpus_or_emulated(1);
  std::string why;
  auto backend = kernels::make_gpu_backend(0, &why);
  REQUIRE(backend);
  g_real_gpu = backend->name().rfind("cuda", 0) == 0;
  return backend;
}


}  // namespace

TEST_CASE("bf16 and fp16 rounding: nearest even, overflow to infinity, NaN kept") {
  using kernels::round_to_bf16;
  using kernels::round_to_fp16;
  CHECK(round_to_bf16(1.0f) == 1.0f);
  CHECK(round_to_bf16(1.0f + 0x1p-8f) == 1.0f);                   // a tie: to even
  CHECK(round_to_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);     // a tie: to even (up)
  CHECK(round_to_bf16(1.0f + 0x1p-8f + 0x1p-12f) == 1.0f + 0x1p-7f);  // past the tie: up
  CHECK(round_to_bf16(-2.5e-30f) == Approx(-2.5e-30f).epsilon(1e-2));  // fp32's range
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(round_to_fp16(65504.f) == 65504.f);
  CHECK(std::isinf(round_to_fp16(65520.f)));  // the tie past the largest finite: infinity
  CHECK(std::isinf(round_to_fp16(-1e6f)));
  CHECK(round_to_fp16(0x1p-24f) == 0x1p-24f);  // the smallest subnormal
  CHECK(round_to_fp16(0x1p-26f) == 0.f);       // below it: gone (why fp16 needs loss scaling)
  CHECK(round_to_fp16(1.0f + 0x1p-11f) == 1.0f);
  CHECK(kernels::round_to(Precision::kFp32, 1.0f + 0x1p-20f) == 1.0f + 0x1p-20f);
}

TEST_CASE("the loss scaler halves and skips on overflow, doubles after a run of good steps") {
  core::LossScaler s(1024.f, /*growth_interval=*/3);
  CHECK(s.scale() == 1024.f);
  CHECK_FALSE(s.step_finite(false));
  CHECK(s.scale() == 512.f);
  CHECK(s.skipped() == 1);
  CHECK(s.step_finite(true));
  CHECK(s.step_finite(true));
  CHECK_FALSE(s.step_finite(false));  // the run starts over
  CHECK(s.scale() == 256.f);
  for (int i = 0; i < 3; ++i) CHECK(s.step_finite(true));
  CHECK(s.scale() == 512.f);
  CHECK(s.skipped() == 2);
  core::LossScaler low(1.f, 3);
  CHECK_FALSE(low.step_finite(false));
  CHECK(low.scale() == core::LossScaler::kMinScale);  // never below 1
  core::LossScaler high(core::LossScaler::kMaxScale, 1);
  CHECK(high.step_finite(true));
  CHECK(high.scale() == core::LossScaler::kMaxScale);
}

TEST_CASE("what a backend converts: gemm operands as stored, convolution tensors") {
  // op(A) 3 x 4 with leading dimension 6: 2 full rows of 6 and the last row's 4 elements...
  CHECK(kernels::gemm_operand_elements(false, 3, 4, 6) == 16);
  // ...stored transposed, 4 rows of 3 (ld 5): 3 rows of 5 and 3.
  CHECK(kernels::gemm_operand_elements(true, 3, 4, 5) == 18);
  CHECK(kernels::gemm_operand_elements(false, 0, 4, 6) == 0);
  kernels::ConvGeometry g;
  g.batch = 2, g.in_channels = 3, g.in_h = 8, g.in_w = 8, g.out_channels = 5;
  g.window.kernel_h = g.window.kernel_w = 3;  // no padding: 6 x 6 out
  CHECK(g.src_elements() == 2 * 3 * 8 * 8);
  CHECK(g.dst_elements() == 2 * 5 * 6 * 6);
  CHECK(g.filter_elements() == 5 * 3 * 3 * 3);
}

TEST_CASE("a product on a GPU set to bf16 is the fp32 product of the rounded inputs") {
  auto gpu = gpu_backend();
  const int64_t m = 7, n = 5, k = 33;
  core::Rng rng(3);
  std::vector<float> a(m * k), b(k * n), rounded_a(m * k), rounded_b(k * n);
  for (size_t i = 0; i < a.size(); ++i) rounded_a[i] = kernels::round_to_bf16(a[i] = rng.uniform(-1, 1));
  for (size_t i = 0; i < b.size(); ++i) rounded_b[i] = kernels::round_to_bf16(b[i] = rng.uniform(-1, 1));
  auto product = [&](kernels::Backend& be, const std::vector<float>& ha,
                     const std::vector<float>& hb) {
    float* da = be.allocate(m * k);
    float* db = be.allocate(k * n);
    float* dc = be.allocate(m * n);
    be.upload(da, ha.data(), m * k);
    be.upload(db, hb.data(), k * n);
    be.gemm(false, false, m, n, k, 1.f, da, k, db, n, 0.f, dc, n);
    std::vector<float> c(m * n);
    be.download(c.data(), dc, m * n);
    for (float* p : {da, db, dc}) be.release(p);
    return c;
  };
  const std::vector<float> fp32 = product(*gpu, a, b);
  REQUIRE(gpu->set_precision(Precision::kBf16));
  const std::vector<float> bf16 = product(*gpu, a, b);
  REQUIRE(gpu->set_precision(Precision::kFp32));
  const std::vector<float> of_rounded = product(*gpu, rounded_a, rounded_b);
  // The emulated GPU computes exactly that; a GPU's tensor cores add in another order.
  if (g_real_gpu)
    CHECK(testing::relative_l2(bf16, of_rounded) < 1e-5);
  else
    CHECK(bf16 == of_rounded);
  const double d = testing::relative_l2(bf16, fp32);
  CHECK(d > 1e-5);   // the rounding ran
  CHECK(d < 1e-2);   // bf16 keeps about 3 significant digits
  // The CPU backend has no mixed precision and says so.
  CHECK_FALSE(kernels::cpu_backend().set_precision(Precision::kBf16));
  CHECK(kernels::cpu_backend().set_precision(Precision::kFp32));
}

TEST_CASE("fp16 gradients with loss scaling match fp32's; too large a scale overflows") {
  auto gpu = gpu_backend();
  const std::string model_yaml =
      "  input: [1, 8, 8]\n"
      "  layers:\n"
      "    - convolution: {filters: 4, kernel: [3, 3], stride: [1, 1], activation: relu}\n"
      "    - dense: {units: 16, activation: tanh}\n"
      "    - output: {units: 5, activation: softmax, loss: mcxent}\n"
      "  updater: {type: sgd, learning_rate: 0.1}\n";
  const core::JobSpec job = testing::job_with_model(model_yaml);
  const int64_t batch = 16;
  core::Rng data_rng(11);
  core::Tensor x(core::with_batch(batch, job.model.input)), y({batch, 5});
  for (int64_t i = 0; i < x.size(); ++i) x[i] = data_rng.uniform(-1.f, 1.f);
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t c = 0; c < 5; ++c) y[r * 5 + c] = c == r % 5 ? 1.f : 0.f;
  core::Model host(job.model);
  host.init(5);
  // Gradients on the GPU in `p` with `scale`, downloaded.
  auto gradients = [&](Precision p, float scale) {
    gpu->set_precision(p);  // before the model: its convolution is made for it
    core::Model m(job.model, gpu.get());
    m.set_params(host.host_params());
    m.set_state(host.host_state());
    core::Rng rng(1);
    const double loss = m.compute_gradients(x, y, rng, scale);
    std::vector<float> g(size_t(m.num_params()));
    gpu->download(g.data(), m.grads(), m.num_params());
    return std::make_pair(loss, g);
  };
  const auto [loss32, g32] = gradients(Precision::kFp32, 1.f);
  const auto [loss16, g16] = gradients(Precision::kFp16, 1024.f);
  CHECK(loss16 == Approx(loss32).epsilon(1e-2));  // unscaled
  const double d = testing::relative_l2(g16, g32);
  CHECK(d > 1e-6);
  CHECK(d < 2e-2);
  // A scale that pushes the loss gradient past 65504 in fp16: infinities, which the worker's
  // finiteness check (a sum of squares) sees.
  const auto [loss_big, g_big] = gradients(Precision::kFp16, 1e30f);
  CHECK(std::isfinite(loss_big));
  double sum = 0;
  for (float v : g_big) sum += double(v) * v;
  CHECK_FALSE(std::isfinite(sum));
  gpu->set_precision(Precision::kFp32);
}

TEST_CASE("an fp16 worker skips a step that overflows, then trains; it gives up when hopeless") {
  auto gpu = gpu_backend();
  REQUIRE(gpu->set_precision(Precision::kFp16));
  core::JobSpec job = testing::job_with_model(
      "  input: [12]\n"
      "  layers:\n"
      "    - dense: {units: 16, activation: relu}\n"
      "    - output: {units: 3, activation: softmax, loss: mcxent}\n"
      "  updater: {type: adam, learning_rate: 0.01}\n",
      "training: {precision: fp16}\n");
  job.training.batch_size = 0;
  job.training.batch_size_per_worker = 8;
  auto make_data = [](float magnitude) {
    core::Dataset d;
    d.features = core::Tensor({64, 12});
    d.targets = core::Tensor({64, 3});
    d.targets.zero();  // tensors are not zeroed on allocation
    d.num_classes = 3;
    core::Rng rng(2);
    for (int64_t i = 0; i < d.features.size(); ++i) d.features[i] = magnitude * rng.uniform(-1, 1);
    for (int64_t r = 0; r < 64; ++r) {
      d.labels.push_back(int32_t(r % 3));
      d.targets[r * 3 + r % 3] = 1.f;
    }
    return d;
  };
  core::Model initial(job.model);
  initial.init(3);
  const int64_t n = initial.num_params();
  auto step_norm = [&](core::Worker& w) {
    std::vector<float> step(static_cast<size_t>(n), 0.f);
    gpu->download(step.data(), w.step(), n);
    double sum = 0;
    for (float v : step) sum += double(v) * v;
    return sum;
  };

  const core::Dataset data = make_data(1.f);
  core::InMemorySource source(data);
  core::Worker worker(job, source, initial, 0, 1, gpu.get());
  REQUIRE(worker.loss_scaler() != nullptr);
  worker.start_epoch(0);
  // A scale no fp16 gradient survives: the step is skipped, zero, and the scale halves.
  worker.set_loss_scaler(core::LossScaler(1e30f));
  REQUIRE(worker.compute_step(0, 0));
  CHECK(worker.loss_scaler()->skipped() == 1);
  CHECK(worker.loss_scaler()->scale() == 5e29f);
  CHECK(step_norm(worker) == 0.0);
  CHECK(std::isfinite(worker.last_loss()));
  // At a sane scale the next step is a real one.
  worker.set_loss_scaler(core::LossScaler(1024.f));
  REQUIRE(worker.compute_step(1, 1));
  CHECK(worker.loss_scaler()->skipped() == 0);
  CHECK(step_norm(worker) > 0.0);

  // Inputs past fp16's range overflow the forward pass whatever the scale: after a run of
  // skips at the smallest scale the worker stops, naming bf16.
  const core::Dataset huge = make_data(1e6f);
  core::InMemorySource huge_source(huge);
  core::Worker doomed(job, huge_source, initial, 0, 1, gpu.get());
  doomed.set_loss_scaler(core::LossScaler(1.f));
  doomed.start_epoch(0);
  int64_t it = 0, epoch = 0;
  auto run = [&] {
    for (; it < 200; ++it)
      while (!doomed.compute_step(it, it)) doomed.start_epoch(++epoch);
  };
  CHECK_THROWS_WITH(run(), Catch::Contains("fp16") && Catch::Contains("bf16"));
  CHECK(it == core::LossScaler::kGiveUpAfter - 1);
  // Whatever the overflowing steps' loss was, none of them reports an infinity (which the
  // trainer's divergence check would take for a diverged job).
  CHECK_FALSE(std::isinf(doomed.last_loss()));
  gpu->set_precision(Precision::kFp32);
}

TEST_CASE("training.precision: parsed, and refused on the CPU with the fix") {
  const std::string model =
      "  input: [4]\n  layers:\n    - output: {units: 2, activation: softmax, loss: mcxent}\n";
  CHECK(testing::job_with_model(model).training.precision == kernels::Precision::kFp32);
  CHECK(testing::job_with_model(model, "training: {precision: bf16}\n").training.precision ==
        kernels::Precision::kBf16);
  CHECK(testing::job_with_model(model, "training: {precision: fp16, device: gpu}\n")
            .training.precision == kernels::Precision::kFp16);
  CHECK_THROWS_WITH(testing::job_with_model(model, "training: {precision: fp8}\n"),
                    Catch::Contains("precision") && Catch::Contains("bf16"));
  CHECK_THROWS_WITH(testing::job_with_model(model, "training: {precision: bf16, device: cpu}\n"),
                    Catch::Contains("the job trains on the CPU (device: cpu") &&
                        Catch::Contains("device: gpu"));
}

}  // namespace dtrain
