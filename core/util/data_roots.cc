#include "core/util/data_roots.h"

#include <filesystem>
#include <system_error>

#include "core/util/error.h"

namespace dtrain::core {
namespace {

namespace fs = std::filesystem;

// The roots with their links resolved (a root that cannot be resolved holds nothing).
struct ResolvedRoots {
  std::vector<fs::path> allowed, excluded, granted;
  explicit ResolvedRoots(const DataRoots& r)
      : allowed(resolve(r.allowed, r.resolved)),
        excluded(resolve(r.excluded, r.resolved)),
        granted(resolve(r.granted, r.resolved)) {}

  static std::vector<fs::path> resolve(const std::vector<std::string>& folders, bool resolved) {
    std::vector<fs::path> out;
    for (const std::string& f : folders) {
      if (resolved) {
        out.push_back(f);
        continue;
      }
      std::error_code ec;
      fs::path root = fs::weakly_canonical(f, ec);
      if (!ec) out.push_back(std::move(root));
    }
    return out;
  }
  static bool inside_any(const fs::path& path, const std::vector<fs::path>& roots) {
    for (const fs::path& root : roots) {
      const fs::path rel = path.lexically_relative(root);
      if (!rel.empty() && *rel.begin() != "..") return true;
    }
    return false;
  }
  bool allows(const std::string& path) const {
    if (path.empty() || path[0] != '/') return false;
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(path, ec);
    return !ec && allows_real(real);
  }
  // `real`: a path with no link left in it, compared as text.
  bool allows_real(const fs::path& real) const {
    if (inside_any(real, granted)) return true;
    return !inside_any(real, excluded) && inside_any(real, allowed);
  }
};

}  // namespace

DataRoots DataRoots::pinned() const {
  const ResolvedRoots now(*this);
  DataRoots out;
  out.resolved = true;
  out.named = resolved ? named : allowed;
  for (const fs::path& p : now.allowed) out.allowed.push_back(p.string());
  for (const fs::path& p : now.excluded) out.excluded.push_back(p.string());
  for (const fs::path& p : now.granted) out.granted.push_back(p.string());
  return out;
}

bool DataRoots::allows(const std::string& path) const {
  return !confines() || ResolvedRoots(*this).allows(path);
}

bool DataRoots::allows_opened(int fd) const {
  if (!confines()) return true;
  std::error_code ec;
  const fs::path real = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  return !ec && real.is_absolute() && ResolvedRoots(*this).allows_real(real);
}

void DataRoots::require(const std::vector<std::string>& paths) const {
  if (!confines()) return;
  const ResolvedRoots roots(*this);
  for (const std::string& p : paths)
    if (!p.empty() && !roots.allows(p)) {
      const auto [what, fix] = refusal(p);
      throw UserError(what, fix);
    }
}

std::pair<std::string, std::string> DataRoots::refusal(const std::string& path) const {
  std::string roots;
  for (const std::string& a : resolved ? named : allowed) roots += (roots.empty() ? "" : ", ") + a;
  return {"'" + path + "' is outside the folders the nodes read job data from (data_roots: " +
              roots + ")",
          "put the data under one of them, or ask the operator to add its folder to data_roots "
          "in the nodes' dtraind.yaml"};
}

std::string pattern_folder(const std::string& pattern) {
  const std::string folder = fs::path(pattern).parent_path().string();
  if (folder.find_first_of("*?[") != std::string::npos)
    throw UserError("'" + pattern + "' has wildcards in its folder",
                    "name the folder; wildcards only in the file name (DIR/part-*.dtb)");
  return folder;
}

}  // namespace dtrain::core
