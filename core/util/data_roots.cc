#include "core/util/data_roots.h"

#include <filesystem>
#include <system_error>

namespace dtrain::core {
namespace {

namespace fs = std::filesystem;

bool inside(const fs::path& path, const std::string& folder) {
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(folder, ec);
  if (ec) return false;
  const fs::path rel = path.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

bool DataRoots::allows(const std::string& path) const {
  if (!confines()) return true;
  if (path.empty() || path[0] != '/') return false;
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(path, ec);
  if (ec) return false;
  for (const std::string& g : granted)
    if (inside(real, g)) return true;
  for (const std::string& e : excluded)
    if (inside(real, e)) return false;
  for (const std::string& a : allowed)
    if (inside(real, a)) return true;
  return false;
}

std::pair<std::string, std::string> DataRoots::refusal(const std::string& path) const {
  std::string roots;
  for (const std::string& a : allowed) roots += (roots.empty() ? "" : ", ") + a;
  return {"'" + path + "' is outside the folders the nodes read job data from (data_roots: " +
              roots + ")",
          "put the data under one of them, or ask the operator to add its folder to data_roots "
          "in the nodes' dtraind.yaml"};
}

}  // namespace dtrain::core
