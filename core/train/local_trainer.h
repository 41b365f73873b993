#pragma once
// Trains a job inside this process (dtrain-submit --local): loads the data, runs the epochs,
// evaluates the test set after each epoch, checkpoints and writes the model file.
#include <string>
#include <vector>

#include "core/eval/evaluation.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

struct StepProgress {
  int64_t epoch = 0, epochs = 0;  // epoch is 0-based
  int64_t iteration = 0;          // global, 0-based
  int64_t iteration_in_epoch = 0, iterations_per_epoch = 0;
  double loss = 0.0;              // mean loss of this step's minibatch
  double samples_per_sec = 0.0;   // over the epoch so far
  double eta_seconds = 0.0;       // to the end of training
};

struct EpochSummary {
  int64_t epoch = 0;
  double train_loss = 0.0;  // mean over the epoch
  double seconds = 0.0;     // training time, evaluation excluded
  double samples_per_sec = 0.0;
  bool evaluated = false;
  Evaluation eval;          // on the test set
};

struct TrainingResult {
  std::vector<EpochSummary> epochs;
  Evaluation final_eval;
  bool evaluated = false;
  std::string model_path;   // empty when not written
  int64_t iterations = 0;
  double train_seconds = 0.0;
  int64_t samples = 0;
};

class TrainingListener {
 public:
  virtual ~TrainingListener() = default;
  virtual void on_data_loaded(int64_t train_examples, int64_t test_examples, int64_t params) {}
  virtual void on_step(const StepProgress& progress) {}
  virtual void on_epoch(const EpochSummary& summary) {}
  virtual void on_checkpoint(const std::string& path, int64_t iteration) {}
};

struct LocalTrainingOptions {
  int threads = 0;              // kernel threads; 0 = all cores
  bool write_model = true;
  std::string output_path;      // overrides output.model when set
  int64_t max_iterations = -1;  // stop early (benchmarks); -1 = run all epochs
  bool evaluate_each_epoch = true;
};

TrainingResult train_local(const JobSpec& job, TrainingListener& listener,
                           const LocalTrainingOptions& options);

}  // namespace dtrain::core
