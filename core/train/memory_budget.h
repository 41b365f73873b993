#pragma once
// The parameter cap of a job (docs/architecture/core.md, "Checks"): what its workers'
// parameter-sized buffers need (parameters, gradients, the step, the residual and the updater's
// state, per worker, plus the initial model), checked against the memory the node has before
// anything is allocated. A job that does not fit is refused with how many parameters it asked for,
// how many fit, and the fix.
#include <cstdint>
#include <string>

namespace dtrain::core {

// Bytes of `workers` workers' parameter-sized buffers for a model of `params` parameters whose
// updater keeps `updater_vectors` vectors of state (0-3), and of the initial model.
int64_t parameter_memory_bytes(int64_t params, int workers, int updater_vectors);

// Throws UserError when parameter_memory_bytes exceeds 80% of `available_bytes` (the rest is
// for activations, data and everything else). `where` names the memory ("this node's memory",
// "GPU 0").
void check_parameter_memory(int64_t params, int workers, int updater_vectors,
                            int64_t available_bytes, const std::string& where);

// MemAvailable from /proc/meminfo, in bytes; -1 when it cannot be read.
int64_t available_host_memory();

}  // namespace dtrain::core
