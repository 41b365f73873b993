#include "daemon/node/local_shards.h"

#include <glob.h>

#include "core/data/packed_file.h"
#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

// The pattern as this node reads it.
std::string node_pattern(const std::string& pattern, const std::string& node) {
  std::string out = pattern;
  for (size_t at = out.find("{node}"); at != std::string::npos; at = out.find("{node}", at))
    out.replace(at, 6, node), at += node.size();
  return out;
}

}  // namespace

std::vector<ShardFile> list_local_shards(const std::string& pattern, const std::string& node,
                                         const core::DataRoots& roots) {
  std::vector<ShardFile> out;
  glob_t g;
  if (glob(node_pattern(pattern, node).c_str(), 0, nullptr, &g) == 0) {
    try {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (!roots.allows(g.gl_pathv[i])) {
          const auto [what, fix] = roots.refusal(g.gl_pathv[i]);
          throw core::UserError(what, fix);
        }
        const core::PackedHeader h = core::read_packed_header(g.gl_pathv[i]);
        out.push_back({g.gl_pathv[i], h.records, h.total, h.export_id});
      }
    } catch (...) {
      globfree(&g);
      throw;
    }
  }
  globfree(&g);
  return out;  // glob sorts
}

}  // namespace dtrain::daemon
