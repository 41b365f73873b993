#pragma once
// The .dtm model file (docs/architecture/core.md, "Spec, data and files"): versioned, checksummed,
// little-endian, written atomically (temp file + fsync + rename).
//
// Layout: "DTRAINM\0" | u32 version | u32 sections | u64 total bytes |
//         sections: (u32 tag, u32 0, u64 length, payload)... | u32 CRC-32 of all bytes before it.
// Unknown section tags are skipped, so newer writers stay readable where possible.
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/normalizer.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

constexpr uint32_t kModelFileVersion = 1;

struct ModelFile {
  std::string spec_yaml;             // the job spec the model was trained with
  std::vector<float> params;
  std::vector<float> state;          // batch norm running statistics
  bool has_updater = false;
  std::string updater_type;
  std::vector<float> updater_state;
  Normalizer normalizer;
  int64_t iteration = 0;             // training progress when written
  int64_t epoch = 0;
  // Gradient sharing's state of the lead worker, in checkpoints (a resumed run goes on exactly
  // where it stopped): its threshold, residual and step count.
  bool has_sharing = false;
  float tau = 0.f;
  std::vector<float> residual;
  int64_t encoder_steps = 0;
  // The other workers of the node (1..W-1), in checkpoints of a run with several: each one's
  // residual and step count (with has_sharing) and its own updater state, so that a resumed run
  // loses none of what they had accumulated.
  struct WorkerState {
    int64_t encoder_steps = 0;
    std::vector<float> residual, updater_state;
  };
  std::vector<WorkerState> other_workers;
  // Local steps (sync: {local: ...}), in checkpoints: the global parameters and the outer
  // optimizer's momentum (the pseudo-gradient's residual is the sharing state above).
  bool has_local_steps = false;
  std::vector<float> global_params, outer_momentum;
  // The classes' names (an image folder's subfolders), in output order; empty when the data
  // named none. `infer` prints them.
  std::vector<std::string> class_names;
};

// Throws UserError when the directory is not writable or the disk is full.
void write_model_file(const std::string& path, const ModelFile& model);
// Throws UserError for a missing, truncated, corrupt or newer-version file. roots: a cluster
// node's data_roots (null: none), checked against the file as it is opened.
ModelFile read_model_file(const std::string& path, const DataRoots* roots = nullptr);

}  // namespace dtrain::core
