// The GPU entry points of a build without CUDA (the default build): no devices and no GPU
// backend, with a reason that names the fix. For tests of the GPU code paths on machines
// without one, DTRAIN_EMULATED_GPUS=N offers N emulated GPUs (kernels/emulated: CPU arithmetic
// behind device-memory discipline); dtraind logs them as emulated.
#include <cstdlib>
#include <string>

#include "kernels/backend.h"
#include "kernels/device_group.h"
#include "kernels/emulated/emulated_gpu.h"
#include "kernels/emulated/emulated_group.h"
#include "kernels/gpu_devices.h"
#include "kernels/node_collective.h"

namespace dtrain::kernels {
namespace {
const char* kWhy = "this build has no CUDA backend (build with `bazel build --config=cuda`)";

int emulated_gpus() {
  const char* env = std::getenv("DTRAIN_EMULATED_GPUS");
  if (!env || !*env) return 0;
  const int n = std::atoi(env);
  return n > 0 && n <= 16 ? n : 0;
}
}  // namespace

std::vector<GpuInfo> list_gpus(std::string* why) {
  std::vector<GpuInfo> out;
  for (int d = 0; d < emulated_gpus(); ++d) {
    GpuInfo g;
    g.index = d;
    g.name = "emulated GPU (DTRAIN_EMULATED_GPUS, CPU arithmetic)";
    g.memory_bytes = int64_t(1) << 30;
    g.memory_used_bytes = emulated_gpu_bytes_in_use(d);
    out.push_back(g);
  }
  if (out.empty() && why) *why = kWhy;
  return out;
}

// Emulated GPUs get the emulated group; DTRAIN_EMULATED_NCCL=0 takes it away (as a machine
// without NCCL would), for tests of the host fallback.
std::unique_ptr<DeviceGroup> make_device_group(const std::vector<Backend*>& backends,
                                               std::string* why) {
  const char* nccl = std::getenv("DTRAIN_EMULATED_NCCL");
  if (emulated_gpus() > 0 && nccl && std::string(nccl) == "0") {
    if (why) *why = "DTRAIN_EMULATED_NCCL=0 (emulated GPUs without NCCL)";
    return nullptr;
  }
  if (emulated_gpus() == 0) {
    if (why) *why = kWhy;
    return nullptr;
  }
  return make_emulated_group(backends, why);
}

std::unique_ptr<Backend> make_gpu_backend(int device, std::string* why) {
  if (device >= 0 && device < emulated_gpus()) return make_emulated_gpu(device);
  if (why) *why = kWhy;
  return nullptr;
}

// No NCCL without CUDA, emulated GPUs included: their jobs sum between nodes over the mesh.
std::vector<uint8_t> make_node_collective_id(std::string* why) {
  if (why) *why = kWhy;
  return {};
}

std::unique_ptr<NodeCollective> open_node_collective(const std::vector<uint8_t>&, int, int, int,
                                                     const GiveUp&, std::string* why) {
  if (why) *why = kWhy;
  return nullptr;
}

}  // namespace dtrain::kernels
