#pragma once
// Checkpoints (docs/architecture/core.md, "Checkpoints and resume"): every output.checkpoint_every
// minibatches the trainer writes the lead worker's replica, batch-norm statistics, updater state
// and position as `<model>.ckpt-<iteration>.dtm` beside the model file, durably (a crash leaves
// the previous ones whole), and keeps the newest output.keep_checkpoints of them. A run resumes
// from the newest one that reads back whole; a damaged one (cut short by a crash) is skipped.
#include <cstdint>
#include <string>
#include <vector>

#include "core/io/model_file.h"

namespace dtrain::core {

// "<dir>/<stem>.ckpt-<iteration>.dtm" for the model file "<dir>/<stem>.dtm".
std::string checkpoint_path(const std::string& model_path, int64_t iteration);

// Writes `model` (its iteration names the file), then removes all but the newest `keep`.
void write_checkpoint(const std::string& model_path, const ModelFile& model, int64_t keep);

// Removes every checkpoint of `model_path`: a fresh run writing that model starts a new series
// (an earlier run's checkpoints would otherwise pass for this run's, and outrank them).
void remove_checkpoints(const std::string& model_path);

struct Checkpoint {
  int64_t iteration = 0;
  std::string path;
};
// The checkpoints of `model_path` on disk, newest first.
std::vector<Checkpoint> list_checkpoints(const std::string& model_path);

// Where a run resumes: `from` is a checkpoint file, or a model file whose checkpoints are tried
// newest first. A checkpoint that does not read back whole is skipped, and the previous one of
// the same model used; `skipped` says which and why.
struct ResumePoint {
  std::string path;
  ModelFile model;
  std::vector<std::string> skipped;
};
// Throws UserError (with the fix) when nothing usable is found.
ResumePoint find_resume_point(const std::string& from);

// The newest checkpoint of `model_path` that reads back whole and has `epochs_done` epochs done
// (a cluster node resuming the job's consistent checkpoint). Throws UserError when there is none.
ResumePoint find_epoch_checkpoint(const std::string& model_path, int64_t epochs_done);

// The model file whose checkpoint `path` is ("" when it is not a checkpoint's name).
std::string model_of_checkpoint(const std::string& path);

}  // namespace dtrain::core
