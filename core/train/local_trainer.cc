#include "core/train/local_trainer.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/eval/evaluate.h"
#include "core/io/model_file.h"
#include "core/train/training_data.h"
#include "core/train/worker.h"
#include "kernels/backend.h"

namespace dtrain::core {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

ModelFile snapshot(const JobSpec& job, Worker& worker, const Normalizer& normalizer,
                   int64_t iteration, int64_t epoch) {
  ModelFile f;
  Model& m = worker.model();
  f.spec_yaml = job.source_text;
  f.params.assign(m.params(), m.params() + m.num_params());
  f.state.assign(m.state(), m.state() + m.num_state());
  f.has_updater = true;
  f.updater_type = worker.updater().type();
  f.updater_state = worker.updater().state();
  f.normalizer = normalizer;
  f.iteration = iteration;
  f.epoch = epoch;
  return f;
}

}  // namespace

TrainingResult train_local(const JobSpec& job, TrainingListener& listener,
                           const LocalTrainingOptions& options) {
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1u, std::thread::hardware_concurrency());
  kernels::backend().set_num_threads(threads);

  TrainingData data = load_training_data(job);
  Model initial(job.model);
  initial.init(job.seed);
  Worker worker(job, data.train, initial, 0, 1);
  listener.on_data_loaded(data.train.size(), data.test.size(), initial.num_params());

  const std::string output = options.output_path.empty() ? job.output.model : options.output_path;
  TrainingResult result;
  const int64_t per_epoch = worker.batches_per_epoch();
  const int64_t total_iterations = per_epoch * job.training.epochs;
  int64_t iteration = 0;
  double elapsed_total = 0.0;
  bool stop = false;
  for (int64_t epoch = 0; epoch < job.training.epochs && !stop; ++epoch) {
    worker.start_epoch(epoch);
    const auto start = Clock::now();
    double loss_sum = 0.0;
    int64_t samples = 0, in_epoch = 0;
    while (worker.compute_step(iteration)) {
      worker.apply_own_step();
      loss_sum += worker.last_loss() * worker.last_batch_size();
      samples += worker.last_batch_size();
      StepProgress p;
      p.epoch = epoch;
      p.epochs = job.training.epochs;
      p.iteration = iteration;
      p.iteration_in_epoch = in_epoch++;
      p.iterations_per_epoch = per_epoch;
      p.loss = worker.last_loss();
      const double elapsed = seconds_since(start);
      p.samples_per_sec = elapsed > 0 ? samples / elapsed : 0.0;
      const double per_iteration = (elapsed_total + elapsed) / double(iteration + 1);
      p.eta_seconds = per_iteration * double(total_iterations - iteration - 1);
      listener.on_step(p);
      ++iteration;
      if (job.output.checkpoint_every > 0 && options.write_model &&
          iteration % job.output.checkpoint_every == 0) {
        write_model_file(output, snapshot(job, worker, data.normalizer, iteration, epoch));
        listener.on_checkpoint(output, iteration);
      }
      if (options.max_iterations >= 0 && iteration >= options.max_iterations) {
        stop = true;
        break;
      }
    }
    EpochSummary summary;
    summary.epoch = epoch;
    summary.seconds = seconds_since(start);
    summary.train_loss = samples ? loss_sum / samples : 0.0;
    summary.samples_per_sec = summary.seconds > 0 ? samples / summary.seconds : 0.0;
    elapsed_total += summary.seconds;
    result.samples += samples;
    const bool last = epoch + 1 == job.training.epochs || stop;
    if (data.test.size() > 0 && (options.evaluate_each_epoch || last)) {
      summary.evaluated = true;
      summary.eval = evaluate(worker.model(), data.test, job.evaluation.top_n);
      result.final_eval = summary.eval;
      result.evaluated = true;
    }
    listener.on_epoch(summary);
    result.epochs.push_back(summary);
  }
  result.iterations = iteration;
  result.train_seconds = elapsed_total;
  if (options.write_model) {
    write_model_file(output, snapshot(job, worker, data.normalizer, iteration,
                                      static_cast<int64_t>(result.epochs.size())));
    result.model_path = output;
  }
  return result;
}

}  // namespace dtrain::core
