#pragma once
// Node-local data (data.train.shards; docs/architecture/daemon.md, "Node-local data"): each node
// lists the export's files it holds (a Shards report), and the controller gives every file to
// exactly one of its holders, so that no example is read twice in an epoch and none crosses the
// network.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/shard_list.h"

namespace dtrain::daemon {

struct DataPlan {
  std::map<std::string, std::vector<std::string>> files;  // per node: the paths it trains from
  std::vector<int64_t> member_examples;                   // in member order
  std::string error, fix;  // set when no plan can be made (the job fails with them)
  std::string summary;     // for the job's log
  DataPlanMessage message_for(const std::string& node) const;
};

// The plan as the job record keeps it ({"files": {node: [paths]}, "member_examples": [...]}),
// and a node's part of a kept plan (a node that rejoins is sent it again).
Json data_plan_json(const DataPlan& plan);
DataPlanMessage plan_message_for(const Json& kept, const std::string& node);

// The distinct files the nodes listed (copies of a file: the same name and record count on
// several nodes), in name order, with who holds each and where; error/fix set when the lists
// mix exports or hold no file at all.
struct DistinctShard {
  std::string name;
  int64_t examples = 0;
  std::vector<std::pair<size_t, std::string>> holders;  // member index, path there
};
struct ShardCatalog {
  std::vector<DistinctShard> files;
  int64_t total = 0;  // the export's examples
  std::string error, fix;
};
ShardCatalog catalog_shards(const std::vector<std::string>& members,
                            const std::map<std::string, std::vector<ShardFile>>& lists);

// A node-local evaluation (`eval --cluster --shards`): every distinct file is a part, in name
// order, given to one holder as balance() in data_plan.cc deals (as for training). Every
// example of the export must be held somewhere: the merged counts are those of all the data.
constexpr uint32_t kMaxTaskParts = 4096;  // parts of any evaluation or inference job
struct TaskPartPlan {
  std::vector<std::map<std::string, std::string>> holders;  // per part: node -> its path there
  std::vector<int64_t> examples;                            // per part
  std::vector<std::string> owner;                           // per part: who evaluates it
  std::string error, fix, summary;
};
TaskPartPlan make_task_parts(const std::vector<std::string>& members,
                             const std::map<std::string, std::vector<ShardFile>>& lists);

// `members`: the job's nodes in member order; `lists`: what each reporting node holds (a node
// that never reported, lost before it could, gets nothing). Copies of a file (the same name
// and record count on several nodes) go to one holder, dealt by balance() in data_plan.cc
// (first a file of its own for every holder, then the rest, balanced). Every node that
// reported must get data.
DataPlan make_data_plan(const std::vector<std::string>& members,
                        const std::map<std::string, std::vector<ShardFile>>& lists);

}  // namespace dtrain::daemon
