#include "core/util/relative_path.h"

#include <filesystem>

namespace dtrain::core {

bool stays_inside(const std::string& relative) {
  if (relative.empty() || relative[0] == '/') return false;
  const std::filesystem::path path(relative);
  for (const auto& part : path)
    if (part == "..") return false;
  // It names a file: not the folder itself ("."), nor a folder ("x/").
  const std::string last = path.filename().string();
  return !last.empty() && last != ".";
}

}  // namespace dtrain::core
