#pragma once
// Where the workers of this process run (docs/architecture/core.md, "The model"), for
// `dtrain-submit --local`; a cluster job gets the same decision from the controller
// (daemon/controller/placement). training.device: cpu | gpu | auto against the GPUs this machine
// offers.
#include <string>
#include <vector>

#include "core/spec/job_spec.h"

namespace dtrain::core {

struct LocalPlacement {
  int workers = 1;
  std::vector<int> gpus;    // CUDA ordinals worker w takes round-robin; empty: the CPU
  std::string description;  // "CPU" or "GPU 0 (NVIDIA H100 ...)"
};

// Throws UserError for device: gpu on a machine (or build) without a GPU, naming the fix.
LocalPlacement place_local(const JobSpec& job);

// "gpu 0, 1" or "cpu", for results and logs.
std::string device_label(const std::vector<int>& gpus);

}  // namespace dtrain::core
