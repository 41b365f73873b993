#pragma once
// The GPUs this node offers to jobs (docs/architecture/daemon.md, "The node"): what the driver
// reports, narrowed by dtraind.yaml's `gpus: all | none | [0, 1]`. A listed GPU that does not exist
// stops the daemon at start with the GPUs it did find.
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/protocol/control_messages.h"
#include "kernels/gpu_devices.h"

namespace dtrain::daemon {

// Throws core::UserError naming the config file, the GPUs found and the fix.
std::vector<kernels::GpuInfo> usable_gpus(const DaemonConfig& config);

// As the node registers them with the controller.
std::vector<NodeRegistration::Gpu> registration_gpus(const std::vector<kernels::GpuInfo>& gpus);

}  // namespace dtrain::daemon
