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
  std::vector<std::string> matches;
  if (glob(node_pattern(pattern, node).c_str(), 0, nullptr, &g) == 0)
    matches.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);  // glob sorts
  globfree(&g);
  roots.require(matches);  // every match before any is read: one may be a link leading out
  for (const std::string& m : matches) {
    const core::PackedHeader h = core::read_packed_header(m, &roots);
    out.push_back({m, h.records, h.total, h.export_id});
  }
  return out;
}

}  // namespace dtrain::daemon
