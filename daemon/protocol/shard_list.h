#pragma once
// A node's list of the data.train.shards files it holds (node-local data; daemon/README.md,
// "Node-local data"), as its Shards report carries it to the controller.
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

struct ShardFile {
  std::string path;        // on the node that listed it
  int64_t examples = 0;    // its records
  int64_t total = 0;       // the export's examples (in every file's header)
  uint32_t export_id = 0;  // core::PackedHeader::export_id
  // Its name without the folder: with the record count, what tells copies on two nodes apart
  // from different files.
  std::string name() const;
};
// A node's Shards report body ({"files": [{path, examples, total, export}]}), every field
// checked; false with `error` saying what is wrong.
bool read_shard_list(const Json& body, std::vector<ShardFile>& out, std::string& error);
Json shard_list_json(const std::vector<ShardFile>& files);

}  // namespace dtrain::daemon
