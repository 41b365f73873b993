// Training throughput of one dtrain worker: samples/s over a fixed number of minibatches of a
// job spec, after a warm-up. Used by tools/bench/train next to PyTorch measured in the same run.
//
//   train_bench JOB.yaml --threads T [--iterations N] [--warmup W] [--repeats R]
// prints one line per repeat: "samples_per_sec <value>".
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/batch_split.h"
#include "core/train/training_data.h"
#include "core/train/worker.h"
#include "kernels/backend.h"

int main(int argc, char** argv) {
  using namespace dtrain;
  CLI::App app{"dtrain training throughput benchmark (one worker)"};
  std::string job_path;
  int threads = 1, iterations = 300, warmup = 20, repeats = 3;
  app.add_option("job", job_path, "job spec")->required();
  app.add_option("--threads", threads, "compute threads");
  app.add_option("--iterations", iterations, "timed minibatches per repeat");
  app.add_option("--warmup", warmup, "untimed minibatches first");
  app.add_option("--repeats", repeats, "timed repeats");
  CLI11_PARSE(app, argc, argv);
  try {
    core::JobSpec job = core::parse_job_spec_file(job_path);
    kernels::backend().set_num_threads(threads);
    core::TrainingData data = core::load_training_data(job);
    core::Model initial(job.model);
    initial.init(job.seed);
    const core::JobSpec one = core::per_worker_spec(job, 1);
    core::Worker worker(one, data.train_source(), initial, 0, 1);
    int64_t iteration = 0, epoch = 0;
    worker.start_epoch(epoch);
    auto step = [&] {
      while (!worker.compute_step(iteration, iteration)) worker.start_epoch(++epoch);
      worker.apply_own_step();
      ++iteration;
      return worker.last_batch_size();
    };
    for (int i = 0; i < warmup; ++i) step();
    for (int r = 0; r < repeats; ++r) {
      int64_t samples = 0;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) samples += step();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("samples_per_sec %.1f\n", samples / s);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
