#pragma once
// How many workers one node runs for a job: the one rule behind `--local` (core/train), the
// controller's placement (daemon/controller/placement.h) and the trainer's GPU placement.
#include <cstddef>

#include "core/spec/job_spec.h"

namespace dtrain::core {

// `cores`: the node's; `gpus`: the GPUs the job uses there (0: it trains on the CPU).
// parameter_averaging runs one worker per node (the parser refuses workers_per_node above 1
// for it); otherwise training.workers_per_node, or under `auto` one per GPU, or one per core
// up to 8 on the CPU.
int workers_per_node(const TrainingSpec& training, unsigned cores, size_t gpus);

}  // namespace dtrain::core
