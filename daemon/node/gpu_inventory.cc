#include "daemon/node/gpu_inventory.h"

#include "core/util/error.h"

namespace dtrain::daemon {

std::vector<kernels::GpuInfo> usable_gpus(const DaemonConfig& config) {
  if (config.gpus == DaemonConfig::GpuChoice::kNone) return {};
  std::string why;
  const std::vector<kernels::GpuInfo> found = kernels::list_gpus(&why);
  if (config.gpus == DaemonConfig::GpuChoice::kAll) return found;
  std::string present;
  for (const auto& g : found)
    present += (present.empty() ? "" : ", ") + std::to_string(g.index) + ": " + g.name;
  std::vector<kernels::GpuInfo> chosen;
  for (int id : config.gpu_ids) {
    bool ok = false;
    for (const auto& g : found)
      if (g.index == id) {
        chosen.push_back(g);
        ok = true;
      }
    if (!ok)
      throw core::UserError(
          config.source + ": gpus lists GPU " + std::to_string(id) + ", but " +
              (found.empty() ? "this node has no usable GPU (" + why + ")"
                             : "this node has GPUs " + present),
          found.empty() ? "write gpus: none (or leave gpus out) on a machine without GPUs"
                        : "list only GPUs that exist, or write gpus: all");
  }
  return chosen;
}

std::vector<NodeRegistration::Gpu> registration_gpus(const std::vector<kernels::GpuInfo>& gpus) {
  std::vector<NodeRegistration::Gpu> out;
  for (const auto& g : gpus)
    out.push_back({uint32_t(g.index), g.name, uint64_t(g.memory_bytes)});
  return out;
}

}  // namespace dtrain::daemon
