// The CPU backend builds its oneDNN primitives (convolutions, pooling, layout reorders) once per
// shape: a training step of shapes seen before creates none (docs/architecture/kernels.md,
// "Implementations"). Counted on the example LeNet and ResNet-20, whose steps cover
// convolution, pooling, batch norm and the residual add.
#include <catch2/catch.hpp>

#include <string>

#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/util/rng.h"
#include "kernels/cpu/onednn_context.h"

namespace dtrain {
namespace {

// One step of gradients on `batch` random examples; returns the primitives it created.
int64_t primitives_of_a_step(core::Model& model, const core::JobSpec& job, int64_t batch) {
  core::Tensor x(core::with_batch(batch, job.model.input)), y({batch, 10});
  core::Rng rng(7);
  for (int64_t i = 0; i < x.size(); ++i) x[i] = rng.uniform(0.f, 1.f);
  y.zero();
  for (int64_t r = 0; r < batch; ++r) y[r * 10 + r % 10] = 1.f;
  const int64_t before = kernels::cpu::primitives_created();
  model.compute_gradients(x, y, rng);
  return kernels::cpu::primitives_created() - before;
}

}  // namespace

TEST_CASE("a second step of the same shapes creates no oneDNN primitive") {
  for (const std::string spec :
       {"configs/fashion-mnist-lenet.yaml", "configs/fashion-mnist-resnet20.yaml"}) {
    const core::JobSpec job = core::parse_job_spec_file(spec);
    core::Model model(job.model);
    model.init(job.seed);
    const int64_t first = primitives_of_a_step(model, job, 16);
    const int64_t second = primitives_of_a_step(model, job, 16);
    const int64_t other_batch = primitives_of_a_step(model, job, 8);
    const int64_t again = primitives_of_a_step(model, job, 16);
    INFO(spec << ": primitives created by the first step " << first << ", the second "
              << second << ", a step of batch 8 " << other_batch << ", batch 16 again "
              << again);
    CHECK(first >= 3);          // at least one convolution's three
    CHECK(second == 0);         // cached per shape
    CHECK(other_batch == first);  // a new batch size is a new shape: built once...
    CHECK(again == 0);          // ...and the first one's are still cached
  }
}

}  // namespace dtrain
