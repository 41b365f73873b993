#pragma once
// Node-local data (data.train.shards; docs/architecture/daemon.md, "Node-local data"): the export's
// files this node holds, listed for the controller, which gives each file to one holder.
#include <string>
#include <vector>

#include "core/util/data_roots.h"
#include "daemon/protocol/shard_list.h"

namespace dtrain::daemon {

// The files `pattern` matches here, `{node}` in it replaced by `node` (this node's name), each
// header read and checked; none is not an error (the controller says what the job lacks).
// Throws core::UserError naming a file that is damaged or not a packed file, or one that `roots`
// do not allow (a match may be a link leading out of them), before it is read.
std::vector<ShardFile> list_local_shards(const std::string& pattern, const std::string& node,
                                         const core::DataRoots& roots);

}  // namespace dtrain::daemon
