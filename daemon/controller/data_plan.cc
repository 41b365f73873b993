#include "daemon/controller/data_plan.h"

#include <algorithm>

namespace dtrain::daemon {

DataPlanMessage DataPlan::message_for(const std::string& node) const {
  DataPlanMessage m;
  auto it = files.find(node);
  if (it != files.end()) m.files = it->second;
  m.member_examples = member_examples;
  return m;
}

Json data_plan_json(const DataPlan& plan) {
  return {{"files", plan.files}, {"member_examples", plan.member_examples}};
}

DataPlanMessage plan_message_for(const Json& kept, const std::string& node) {
  DataPlanMessage m;
  if (!kept.is_object()) return m;
  const Json files = kept.value("files", Json::object());
  if (files.is_object() && files.contains(node) && files[node].is_array())
    for (const Json& f : files[node])
      if (f.is_string()) m.files.push_back(f.get<std::string>());
  const Json examples = kept.value("member_examples", Json::array());
  for (const Json& n : examples)
    if (n.is_number_integer()) m.member_examples.push_back(n.get<int64_t>());
  return m;
}

DataPlan make_data_plan(const std::vector<std::string>& members,
                        const std::map<std::string, std::vector<ShardFile>>& lists) {
  DataPlan plan;
  // One entry per distinct file (name and record count): who holds it, and where.
  struct Held {
    int64_t examples = 0;
    std::vector<std::pair<size_t, std::string>> holders;  // member index, path there
  };
  std::map<std::pair<std::string, int64_t>, Held> distinct;
  const ShardFile* first = nullptr;
  std::string first_node;
  for (size_t k = 0; k < members.size(); ++k) {
    auto it = lists.find(members[k]);
    if (it == lists.end()) continue;
    for (const ShardFile& f : it->second) {
      if (!first) first = &f, first_node = members[k];
      if (f.export_id != first->export_id || f.total != first->total) {
        plan.error = members[k] + "'s " + f.path + " is from another export than " + first_node +
                     "'s " + first->path;
        plan.fix = "give every node files of one export (dtrain-submit export SPEC --out DIR)";
        return plan;
      }
      Held& h = distinct[{f.name(), f.examples}];
      h.examples = f.examples;
      h.holders.push_back({k, f.path});
    }
  }
  if (!first) {
    plan.error = "no node holds a file that data.train.shards matches";
    plan.fix = "copy the export's files to the nodes, at the path the pattern gives";
    return plan;
  }
  std::vector<const Held*> order;
  for (const auto& [key, h] : distinct) order.push_back(&h);
  std::stable_sort(order.begin(), order.end(),
                   [](const Held* a, const Held* b) { return a->examples > b->examples; });
  plan.member_examples.assign(members.size(), 0);
  for (const Held* h : order) {
    const auto* best = &h->holders.front();
    for (const auto& holder : h->holders)
      if (plan.member_examples[holder.first] < plan.member_examples[best->first]) best = &holder;
    plan.member_examples[best->first] += h->examples;
    plan.files[members[best->first]].push_back(best->second);
  }
  int64_t used = 0;
  for (int64_t n : plan.member_examples) used += n;
  if (used > first->total) {  // distinct files hold more than the export has: not one export
    plan.error = "the files hold " + std::to_string(used) + " examples, more than their export's " +
                 std::to_string(first->total) + ": files of two exports of the same data, or "
                 "renamed files";
    plan.fix = "give every node files of one export, under the names export gave them";
    plan.files.clear();
    return plan;
  }
  for (size_t k = 0; k < members.size(); ++k) {
    if (lists.count(members[k]) && plan.member_examples[k] == 0) {
      plan.error = members[k] + " holds " +
                   (lists.at(members[k]).empty() ? "none of the files data.train.shards matches"
                                                 : "only copies of files other nodes train from") +
                   ": its workers would have no data";
      plan.fix = "copy it some of the export's files (its own, not another node's), or run the "
                 "job on fewer nodes (training.nodes)";
      plan.files.clear();
      return plan;
    }
  }
  plan.summary = "node-local data: " + std::to_string(distinct.size()) + " files, " +
                 std::to_string(used) + " of the export's " + std::to_string(first->total) +
                 " examples;";
  for (size_t k = 0; k < members.size(); ++k)
    plan.summary += (k ? ", " : " ") + members[k] + " trains from " +
                    std::to_string(plan.files[members[k]].size()) + " (" +
                    std::to_string(plan.member_examples[k]) + " examples)";
  if (used < first->total)
    plan.summary += "; the nodes lack " + std::to_string(first->total - used) +
                    " examples of the export, which are not trained on";
  return plan;
}

}  // namespace dtrain::daemon
