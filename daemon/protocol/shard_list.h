#pragma once
// A node's list of the data.train.shards files it holds (node-local data;
// docs/architecture/daemon.md, "Node-local data"), as its Shards report carries it to the
// controller.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::daemon {

using Json = nlohmann::json;

struct ShardFile {
  std::string path;        // on the node that listed it
  int64_t examples = 0;    // its records
  int64_t total = 0;       // the export's examples (in every file's header)
  uint32_t export_id = 0;  // core::PackedHeader::export_id
  // Its name without the folder: with the record count, what tells copies on two nodes apart
  // from different files.
  std::string name() const;
};
// False, with `error` saying what is wrong, for an entry no real node lists: an empty or
// impossible path, counts out of range.
bool check_shard_file(const ShardFile& file, std::string& error);
// The list as the controller's job record keeps it ({"files": [{path, examples, total,
// export}]}), every field checked when it is read back.
bool read_shard_list(const Json& body, std::vector<ShardFile>& out, std::string& error);
Json shard_list_json(const std::vector<ShardFile>& files);

}  // namespace dtrain::daemon
