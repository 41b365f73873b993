// One GPU worker's training throughput with gradient sharing (tools/bench/gpu): each step
// computes u on the GPU, encodes it against the residual there, copies the message to the host
// and applies it to the replica, as a worker of a job does. Prints, per repeat:
//   samples_per_sec S compute_ms C encode_ms E copy_ms Y apply_ms A
// (the split is per step, measured with the device drained at each boundary, so the parts add
// up to about the step; samples_per_sec is measured without those waits).
//
//   gpu_bench JOB.yaml --batch B [--iterations N] [--warmup W] [--repeats R] [--gpu G]
//             [--precision fp32|bf16|fp16] [--generated N]
//
// --generated N: N random examples of the model's input shape instead of the spec's data (the
// ResNet-20 benchmark's 50,000 32x32 images; nothing to download), without augmentation.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "core/codec/update_encoder.h"
#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/training_data.h"
#include "core/train/worker.h"
#include "kernels/backend.h"
#include "kernels/precision.h"
#include "tools/bench/generated_data.h"

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain;
  CLI::App app{"one GPU worker's training throughput with gradient sharing"};
  std::string job_path;
  int batch = 64, iterations = 200, warmup = 20, repeats = 3, gpu = 0;
  int64_t generated_examples = 0;
  std::string precision = "fp32";
  app.add_option("job", job_path, "job spec")->required();
  app.add_option("--batch", batch, "minibatch size");
  app.add_option("--iterations", iterations, "timed minibatches per repeat");
  app.add_option("--warmup", warmup, "untimed minibatches first");
  app.add_option("--repeats", repeats, "timed repeats");
  app.add_option("--gpu", gpu, "CUDA device");
  app.add_option("--precision", precision, "training.precision: fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--generated", generated_examples,
                 "N random examples instead of the spec's data (no augmentation)")
      ->check(CLI::Range(int64_t(1), int64_t(10000000)));
  CLI11_PARSE(app, argc, argv);
  try {
    core::JobSpec job = bench::read_bench_spec(job_path, generated_examples > 0);
    job.training.batch_size = 0;  // one worker, its own batch
    job.training.batch_size_per_worker = batch;
    job.training.precision = kernels::precision_of(precision);
    std::string why;
    std::unique_ptr<kernels::Backend> backend = kernels::make_gpu_backend(gpu, &why);
    if (!backend) {
      std::fprintf(stderr, "error: no GPU backend: %s\n", why.c_str());
      return 77;
    }
    if (!backend->set_precision(kernels::precision_of(precision))) {
      std::fprintf(stderr, "error: %s cannot compute in %s\n", backend->name().c_str(),
                   precision.c_str());
      return 2;
    }
    core::TrainingData data;
    std::unique_ptr<core::InMemorySource> noise;
    core::Dataset noise_data;
    if (generated_examples > 0) {
      noise_data = bench::generated_dataset(job, generated_examples);
      noise = std::make_unique<core::InMemorySource>(noise_data);
    } else {
      data = core::load_training_data(job);
    }
    const core::ExampleSource& train = noise ? *noise : data.train_source();
    core::Model initial(job.model);
    initial.init(job.seed);
    core::Worker worker(job, train, initial, 0, 1, backend.get());
    core::UpdateEncoder encoder(initial.num_params(), job.training, 0, core::CodecEngine::get(),
                                core::kMaxSegmentLength, backend.get());
    core::DeviceCodec& codec = *encoder.device_codec();
    int64_t iteration = 0, epoch = 0;
    worker.start_epoch(epoch);
    double compute_s = 0;
    auto step = [&](bool split) {
      const auto t0 = Clock::now();
      while (!worker.compute_step(iteration, iteration)) worker.start_epoch(++epoch);
      if (split) {
        backend->synchronize();
        compute_s += since(t0);
      }
      for (const core::EncodedMessage& m : encoder.encode(worker.step()))
        codec.apply(m, worker.model().params());
      ++iteration;
      return worker.last_batch_size();
    };
    for (int i = 0; i < warmup; ++i) step(false);
    backend->synchronize();
    for (int r = 0; r < repeats; ++r) {
      int64_t samples = 0;
      const auto start = Clock::now();
      for (int i = 0; i < iterations; ++i) samples += step(false);
      backend->synchronize();
      const double seconds = since(start);
      // The split: the same number of steps again, drained at every boundary.
      compute_s = 0;
      codec.set_profiling(true);
      const core::DeviceCodec::Profile before = codec.profile();
      for (int i = 0; i < iterations; ++i) step(true);
      codec.set_profiling(false);
      const core::DeviceCodec::Profile& after = codec.profile();
      const double per = 1000.0 / iterations;
      std::printf("samples_per_sec %.1f compute_ms %.3f encode_ms %.3f copy_ms %.3f apply_ms %.3f\n",
                  samples / seconds, compute_s * per, (after.encode_s - before.encode_s) * per,
                  (after.copy_s - before.copy_s) * per, (after.apply_s - before.apply_s) * per);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
