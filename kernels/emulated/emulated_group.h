#pragma once
// The device group (kernels/device_group.h) between emulated GPUs: the all-gather and the
// all-reduce copy through host memory (each rank's download and upload, so its buffers are checked as that
// rank's), as NCCL would through NVLink or PCIe. Offered by builds without CUDA
// for emulated GPUs unless DTRAIN_EMULATED_NCCL=0, so CI runs the trainer's GPU-to-GPU path
// and its host fallback.
#include <memory>
#include <string>
#include <vector>

#include "kernels/device_group.h"

namespace dtrain::kernels {

// Null with `why` when the backends are not emulated GPUs on distinct devices.
std::unique_ptr<DeviceGroup> make_emulated_group(const std::vector<Backend*>& backends,
                                                 std::string* why);

}  // namespace dtrain::kernels
