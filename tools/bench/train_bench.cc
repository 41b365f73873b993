// Training throughput of one dtrain worker: samples/s over a fixed number of minibatches of a
// job spec, after a warm-up. Used by tools/bench/train next to PyTorch measured in the same run.
//
//   train_bench JOB.yaml --threads T [--batch B] [--iterations N] [--warmup W] [--repeats R]
//               [--generated N]
// prints a line "isa <what oneDNN uses>", then one line per repeat: "samples_per_sec <value>".
// --batch: the worker's minibatch (default: the spec's batch_size); --generated N: N random
// examples of the model's input shape instead of the spec's data (ResNet-20 on CIFAR-10-sized
// images).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

#include "core/model/model.h"
#include "core/train/batch_split.h"
#include "core/train/training_data.h"
#include "core/train/worker.h"
#include "kernels/backend.h"
#include "kernels/cpu/onednn_context.h"
#include "tools/bench/generated_data.h"

namespace {

struct Options {
  std::string job_path;
  int threads = 1, batch = 0, iterations = 300, warmup = 20, repeats = 3;
  int64_t generated = 0;
};

void time_repeats(dtrain::core::Worker& worker, const Options& o) {
  int64_t iteration = 0, epoch = 0;
  worker.start_epoch(epoch);
  auto step = [&] {
    while (!worker.compute_step(iteration, iteration)) worker.start_epoch(++epoch);
    worker.apply_own_step();
    ++iteration;
    return worker.last_batch_size();
  };
  for (int i = 0; i < o.warmup; ++i) step();
  for (int r = 0; r < o.repeats; ++r) {
    int64_t samples = 0;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iterations; ++i) samples += step();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("samples_per_sec %.1f\n", samples / s);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain;
  CLI::App app{"dtrain training throughput benchmark (one worker)"};
  Options o;
  app.add_option("job", o.job_path, "job spec")->required();
  app.add_option("--threads", o.threads, "compute threads");
  app.add_option("--batch", o.batch, "minibatch size (default: the spec's)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--iterations", o.iterations, "timed minibatches per repeat");
  app.add_option("--warmup", o.warmup, "untimed minibatches first");
  app.add_option("--repeats", o.repeats, "timed repeats");
  app.add_option("--generated", o.generated, "N random examples instead of the spec's data")
      ->check(CLI::Range(int64_t(1), int64_t(10000000)));
  CLI11_PARSE(app, argc, argv);
  try {
    core::JobSpec job = bench::read_bench_spec(o.job_path, o.generated > 0);
    if (o.batch > 0) {
      job.training.batch_size = 0;
      job.training.batch_size_per_worker = o.batch;
    }
    kernels::backend().set_num_threads(o.threads);
    std::printf("isa %s\n", kernels::cpu::isa_name().c_str());
    core::TrainingData data;
    core::Dataset noise_data;
    std::unique_ptr<core::InMemorySource> noise;
    if (o.generated > 0) {
      noise_data = bench::generated_dataset(job, o.generated);
      noise = std::make_unique<core::InMemorySource>(noise_data);
    } else {
      data = core::load_training_data(job);
    }
    core::Model initial(job.model);
    initial.init(job.seed);
    const core::JobSpec one = core::per_worker_spec(job, 1);
    core::Worker worker(one, noise ? *noise : data.train_source(), initial, 0, 1);
    time_repeats(worker, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
