// On a real GPU (docs/architecture/kernels.md, "Mixed precision"): the ResNet-20 config
// (configs/fashion-mnist-resnet20.yaml) trained for the same epochs on one GPU worker in fp32
// and in bf16 from the same three seeds; bf16's mean test accuracy must be at most 0.5 points
// below fp32's. Three seeds, not one: a single pair moved by 0.9 points between two runs of the
// same code on the same H200 (timed algorithm choices differ), as much as the margin.
// Built with --config=cuda by tools/test.sh; exits 77 (skipped) where no GPU is present. Needs
// Debian's Fashion-MNIST files (the config's paths). --epochs N: fewer or more than the
// config's 3 (run-to-run noise after one epoch is about the 0.5 points allowed).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/spec/job_spec_parser.h"
#include "core/train/training_run.h"
#include "kernels/gpu_devices.h"

int main(int argc, char** argv) {
  using namespace dtrain;
  std::string why;
  if (kernels::list_gpus(&why).empty()) {
    std::printf("SKIPPED: %s (mixed precision on a GPU needs one)\n", why.c_str());
    return 77;
  }
  int64_t epochs = 0;  // the config's
  if (argc == 3 && std::strcmp(argv[1], "--epochs") == 0) epochs = std::atoll(argv[2]);
  constexpr int kSeeds = 3;
  double accuracy[2] = {0, 0};  // means over the seeds
  const char* precisions[2] = {"fp32", "bf16"};
  for (int run = 0; run < 2 * kSeeds; ++run) {
    const int i = run / kSeeds;
    core::JobSpec job = core::parse_job_spec_file("configs/fashion-mnist-resnet20.yaml");
    if (epochs > 0) job.training.epochs = epochs;
    job.seed += uint64_t(run % kSeeds);
    job.training.workers_per_node = 1;
    job.training.precision = kernels::precision_of(precisions[i]);
    core::LocalTrainingOptions o;
    o.gpus = {0};
    o.write_model = false;
    core::TrainingListener quiet;
    const core::TrainingResult r = core::train_local(job, quiet, o);
    const double a = r.evaluated ? r.final_eval.accuracy() : 0.0;
    accuracy[i] += a / kSeeds;
    std::printf("ResNet-20, %s on GPU 0, seed %llu: %lld epochs, accuracy %.4f, %.0f samples/s\n",
                precisions[i], (unsigned long long)job.seed, (long long)r.epochs.size(), a,
                r.train_seconds > 0 ? r.samples / r.train_seconds : 0.0);
  }
  std::printf("mean accuracy over %d seeds: fp32 %.4f, bf16 %.4f\n", kSeeds, accuracy[0],
              accuracy[1]);
  if (accuracy[0] < 0.80 || accuracy[1] < accuracy[0] - 0.005) {
    std::printf("FAILED: fp32 %.4f, bf16 %.4f (need fp32 >= 0.80 and bf16 >= fp32 - 0.005)\n",
                accuracy[0], accuracy[1]);
    return 1;
  }
  std::printf("All tests passed (1 assertion in 1 test case)\n");
  return 0;
}
