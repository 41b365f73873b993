// dtrain-submit --local job.yaml [--resume CHECKPOINT]: validate, train in this process (from the
// start, or from a checkpoint), evaluate, write the model.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "core/spec/cluster_rules.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/batch_split.h"
#include "core/train/checkpoints.h"
#include "core/train/device_placement.h"
#include "core/train/init_from.h"
#include "core/train/training_run.h"
#include "core/util/error.h"
#include "submit/commands.h"
#include "submit/exit_codes.h"
#include "submit/progress_printer.h"

namespace dtrain::submit {

namespace {

// --resume: the checkpoint to go on from (skipping damaged ones), and the job: job.yaml when
// given, else the spec the checkpoint holds. The checkpoint's parameters, batch-norm statistics
// and updater state come in through model.init_from; its position through `options`.
core::JobSpec resume_job(const LocalTrainArgs& args, const core::ResumePoint& point,
                         core::LocalTrainingOptions& options) {
  for (const std::string& s : point.skipped)
    std::fprintf(stderr, "warning: skipped a damaged checkpoint: %s\n", s.c_str());
  core::SpecParseOptions embedded = core::stored_spec_options();
  embedded.check_files = true;  // it trains on them here
  core::JobSpec job =
      args.job_path.empty()
          ? core::parse_job_spec_text(point.model.spec_yaml, point.path + " (embedded spec)",
                                      embedded)
          : core::parse_job_spec_file(args.job_path);
  job.model.init_from = point.path;
  job.model.init_from_updater = point.model.has_updater;
  options.resume = &point.model;
  // It goes on writing the same model and checkpoints.
  const std::string model = core::model_of_checkpoint(point.path);
  if (args.output.empty() && !model.empty()) options.output_path = model;
  std::printf("resuming from %s: epoch %lld, after minibatch %lld of the job\n",
              point.path.c_str(), (long long)point.model.epoch + 1,
              (long long)point.model.iteration);
  return job;
}

// The model's folder must exist now, not only when the first checkpoint is written an epoch
// later (the trainer's choice: --output, the resumed model, else output.model).
bool model_folder_writable(const std::string& output) {
  std::string folder = std::filesystem::path(output).parent_path().string();
  if (folder.empty()) folder = ".";
  if (output.empty() || ::access(folder.c_str(), W_OK) == 0) return true;
  std::fprintf(stderr, "error: cannot write the model to %s: the folder %s %s\n"
                       "fix: create it (mkdir -p %s), or name another file with --output\n",
               output.c_str(), folder.c_str(),
               errno == ENOENT ? "does not exist" : "is not writable", folder.c_str());
  return false;
}

// What gradient sharing and mixed precision did, after the evaluation.
void print_sharing_and_precision(const core::JobSpec& job, const core::TrainingResult& result) {
  if (result.mode == core::TrainingMode::kGradientSharing) {
    // What sending every step u densely would have cost.
    const double dense = 4.0 * result.params * double(result.messages);
    std::printf("gradient sharing (%s codec): %lld messages, %.1f MB (%.2f%% of dense)",
                result.codec_kernel.c_str(), (long long)result.messages,
                result.message_bytes / 1e6, dense > 0 ? 100.0 * result.message_bytes / dense : 0.0);
    std::printf("; %d replicas agree: relative difference %.1e, largest element %.1e\n",
                result.agreement.replicas, result.agreement.relative_diff,
                result.agreement.max_abs_diff);
    if (!result.gpu_sharing.empty())
      std::printf("between the GPUs: %s, %lld messages arrived GPU to GPU\n",
                  result.gpu_sharing.c_str(), (long long)result.messages_from_gpus);
  }
  if (job.training.precision != kernels::Precision::kFp32 && result.device == "cpu")
    std::printf("precision: fp32 (training.precision %s applies to GPU workers; these ran on "
                "the CPU)\n", kernels::precision_name(job.training.precision));
  else if (job.training.precision == kernels::Precision::kFp16)
    std::printf("precision: fp16 on %s, %lld steps skipped for overflow (loss scaling)\n",
                result.device.c_str(), (long long)result.overflow_skipped_steps);
  else if (job.training.precision == kernels::Precision::kBf16)
    std::printf("precision: bf16 on %s\n", result.device.c_str());
}

void print_result(const core::JobSpec& job, const core::TrainingResult& result) {
  if (!result.stopped_early.empty()) std::printf("\n%s\n", result.stopped_early.c_str());
  if (result.evaluated)
    std::printf("\nfinal evaluation on the test set\n%s", result.final_eval.report().c_str());
  std::printf("trained %lld iterations in %s (%.0f samples/s)\n", (long long)result.iterations,
              format_duration(result.train_seconds).c_str(),
              result.train_seconds > 0 ? result.samples / result.train_seconds : 0.0);
  print_sharing_and_precision(job, result);
  if (!result.model_path.empty()) std::printf("model written to %s\n", result.model_path.c_str());
}

// The spec (or the checkpoint's), checked, and where its workers run; false (said) when not.
bool prepare(const LocalTrainArgs& args, core::JobSpec& job, core::LocalTrainingOptions& options,
             core::ResumePoint& point, core::LocalPlacement& place) {
  try {
    if (!args.resume.empty()) point = core::find_resume_point(args.resume);
    job = args.resume.empty() ? core::parse_job_spec_file(args.job_path)
                              : resume_job(args, point, options);
    core::check_init_from(job);
    place = core::place_local(job);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return false;
  }
  if (!args.output.empty()) options.output_path = args.output;
  return model_folder_writable(options.output_path.empty() ? job.output.model
                                                           : options.output_path);
}

}  // namespace

int run_local_training(const LocalTrainArgs& args) {
  core::JobSpec job;
  core::LocalTrainingOptions options;
  core::ResumePoint point;
  core::LocalPlacement place;
  if (!prepare(args, job, options, point, place)) return kExitBadInput;
  job.training.workers_per_node = place.workers;
  const int workers = place.workers;
  std::printf("job %s: %s, %lld epochs, %s, %d worker%s in this process on %s\n",
              job.name.c_str(), core::mode_name(job.training.mode), (long long)job.training.epochs,
              core::describe_batch(job.training, workers).c_str(), workers,
              workers == 1 ? "" : "s", place.description.c_str());
  std::fflush(stdout);
  ProgressPrinter printer(stdout, !args.quiet && ::isatty(STDOUT_FILENO));
  core::TrainingListener silent;
  options.threads = args.threads;
  options.gpus = place.gpus;
  core::TrainingResult result;
  try {
    result = core::train_local(job, args.quiet ? silent : printer, options);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitJobFailed;
  }
  print_result(job, result);
  return kExitSuccess;
}

int run_validate(const std::string& job_path) {
  try {
    core::JobSpec job = core::parse_job_spec_file(job_path);
    std::printf("%s: valid job '%s' (%zu layers, mode %s)\n", job_path.c_str(), job.name.c_str(),
                job.model.layers.size(), core::mode_name(job.training.mode));
    try {
      core::check_cluster_rules(job);
    } catch (const core::UserError& e) {
      // The spec parses; said now so nobody learns it from a refused submit.
      std::fprintf(stderr, "warning: a cluster refuses it: %s\n  fix: %s\n",
                   e.what_happened().c_str(), e.fix().c_str());
    }
    return kExitSuccess;
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
}

}  // namespace dtrain::submit
