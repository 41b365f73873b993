// Run-time backend selection for the process-wide default (tools and tests). GPU workers get
// their own backend from make_gpu_backend, one per worker.
#include <mutex>
#include <stdexcept>

#include "kernels/backend.h"

namespace dtrain::kernels {
namespace {
Backend* selected = nullptr;
std::mutex selected_mutex;
}  // namespace

Backend& backend() {
  std::lock_guard<std::mutex> lock(selected_mutex);
  if (!selected) selected = &cpu_backend();
  return *selected;
}

std::vector<std::string> available_backends() { return {"cpu"}; }

void select_backend(const std::string& name) {
  std::lock_guard<std::mutex> lock(selected_mutex);
  if (name == "cpu" || name == "auto") {
    selected = &cpu_backend();
    return;
  }
  throw std::invalid_argument("unknown compute backend '" + name +
                              "'; use 'cpu' (or 'auto'); GPU workers are chosen with "
                              "training.device in the job spec");
}

}  // namespace dtrain::kernels
