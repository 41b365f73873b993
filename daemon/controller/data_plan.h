#pragma once
// Node-local data (data.train.shards; daemon/README.md, "Node-local data"): each node lists the
// export's files it holds (a Shards report), and the controller gives every file to exactly one
// of its holders, so that no example is read twice in an epoch and none crosses the network.
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

// `members`: the job's nodes in member order; `lists`: what each reporting node holds (a node
// that never reported, lost before it could, gets nothing). Copies of a file (the same name
// and record count on several nodes) go to one holder: the largest files first, each to the
// holder with the fewest examples so far. Every node that reported must get some data.
DataPlan make_data_plan(const std::vector<std::string>& members,
                        const std::map<std::string, std::vector<ShardFile>>& lists);

}  // namespace dtrain::daemon
