#pragma once
// The GPUs this process can use, for the node's inventory (dtrain-submit nodes, /metrics) and
// for placing GPU workers. Builds without CUDA see none; a CUDA build lists what the driver
// reports (kernels/cuda/cuda_devices.cc).
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::kernels {

struct GpuInfo {
  int index = 0;  // CUDA device ordinal
  std::string name;
  int64_t memory_bytes = 0;       // total
  int64_t memory_used_bytes = 0;  // by every process, at the time of the call
};

// Empty when there is no usable GPU; `why` (optional) then says what is missing (no CUDA in
// this build, no driver, no device).
std::vector<GpuInfo> list_gpus(std::string* why = nullptr);

}  // namespace dtrain::kernels
