// The GPU entry points of a build without CUDA (the default build): no devices, no GPU
// backend, and a reason that names the fix.
#include "kernels/backend.h"
#include "kernels/gpu_devices.h"

namespace dtrain::kernels {
namespace {
const char* kWhy = "this build has no CUDA backend (build with `bazel build --config=cuda`)";
}

std::vector<GpuInfo> list_gpus(std::string* why) {
  if (why) *why = kWhy;
  return {};
}

std::unique_ptr<Backend> make_gpu_backend(int, std::string* why) {
  if (why) *why = kWhy;
  return nullptr;
}

}  // namespace dtrain::kernels
