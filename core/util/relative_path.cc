#include "core/util/relative_path.h"

#include <filesystem>

namespace dtrain::core {

bool stays_inside(const std::string& relative) {
  if (relative.empty() || relative[0] == '/') return false;
  for (const auto& part : std::filesystem::path(relative))
    if (part == "..") return false;
  return true;
}

}  // namespace dtrain::core
