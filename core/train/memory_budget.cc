#include "core/train/memory_budget.h"

#include <cstdio>

#include "core/util/error.h"

namespace dtrain::core {
namespace {
// Parameter-sized float vectors a worker keeps besides its updater's: parameters, gradients,
// the step and the residual.
constexpr int kWorkerVectors = 4;
constexpr double kUsable = 0.8;

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(int64_t(1) << 30));
  return text;
}
}  // namespace

int64_t parameter_memory_bytes(int64_t params, int workers, int updater_vectors) {
  const int64_t vectors = int64_t(workers) * (kWorkerVectors + updater_vectors) + 1;
  return params * vectors * int64_t(sizeof(float));
}

void check_parameter_memory(int64_t params, int workers, int updater_vectors,
                            int64_t available_bytes, const std::string& where) {
  if (available_bytes <= 0) return;  // unknown: nothing to check against
  const int64_t need = parameter_memory_bytes(params, workers, updater_vectors);
  const int64_t usable = int64_t(kUsable * double(available_bytes));
  if (need <= usable) return;
  const int64_t fit = usable / (parameter_memory_bytes(1, workers, updater_vectors));
  throw UserError("the model has " + std::to_string(params) + " parameters: " +
                      std::to_string(workers) + (workers == 1 ? " worker needs" : " workers need") +
                      " about " + gib(need) + " for parameters, gradients, steps, "
                      "residuals and updater state, but " + where + " has " +
                      gib(available_bytes) + " available (at most " + std::to_string(fit) +
                      " parameters fit with 20% left for the rest)",
                  "use fewer workers per node (training.workers_per_node), a smaller model, or "
                  "nodes with more memory");
}

int64_t available_host_memory() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : int64_t(kib) * 1024;
}

}  // namespace dtrain::core
