#include "core/train/device_placement.h"

#include <thread>

#include "core/spec/workers_per_node.h"
#include "core/train/training_run.h"
#include "core/util/error.h"
#include "kernels/gpu_devices.h"

namespace dtrain::core {

LocalPlacement place_local(const JobSpec& job) {
  LocalPlacement p;
  std::string why;
  const std::vector<kernels::GpuInfo> gpus = job.training.device == Device::kCpu
                                                 ? std::vector<kernels::GpuInfo>{}
                                                 : kernels::list_gpus(&why);
  if (job.training.device == Device::kGpu && gpus.empty())
    throw UserError("training.device is gpu, but this machine offers no GPU: " + why,
                    "use training.device: auto (GPUs where there are some) or cpu");
  if (gpus.empty()) {
    p.workers = resolve_workers_per_node(job);
    p.description = "CPU";
    return p;
  }
  for (const auto& g : gpus) {
    p.gpus.push_back(g.index);
    p.description += (p.description.empty() ? "GPU " : ", GPU ") + std::to_string(g.index) +
                     " (" + g.name + ")";
  }
  p.workers = workers_per_node(job.training, std::thread::hardware_concurrency(), gpus.size());
  return p;
}

std::string device_label(const std::vector<int>& gpus) {
  if (gpus.empty()) return "cpu";
  std::string out = "gpu ";
  for (size_t i = 0; i < gpus.size(); ++i) out += (i ? ", " : "") + std::to_string(gpus[i]);
  return out;
}

}  // namespace dtrain::core
