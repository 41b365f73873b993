// Run-time backend selection. The CUDA backend registers itself only in --config=cuda builds.
#include <mutex>
#include <stdexcept>

#include "kernels/backend.h"

namespace dtrain::kernels {
namespace cpu {
Backend& cpu_backend();
}

namespace {
Backend* selected = nullptr;
std::mutex selected_mutex;
}  // namespace

Backend& backend() {
  std::lock_guard<std::mutex> lock(selected_mutex);
  if (!selected) selected = &cpu::cpu_backend();
  return *selected;
}

std::vector<std::string> available_backends() { return {"cpu"}; }

void select_backend(const std::string& name) {
  std::lock_guard<std::mutex> lock(selected_mutex);
  if (name == "cpu" || name == "auto") {
    selected = &cpu::cpu_backend();
    return;
  }
  throw std::invalid_argument("unknown compute backend '" + name +
                              "'; use 'cpu' (or 'auto'); 'cuda' needs a build with --config=cuda");
}

}  // namespace dtrain::kernels
