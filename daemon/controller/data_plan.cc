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

ShardCatalog catalog_shards(const std::vector<std::string>& members,
                            const std::map<std::string, std::vector<ShardFile>>& lists) {
  ShardCatalog catalog;
  std::map<std::pair<std::string, int64_t>, DistinctShard> distinct;
  const ShardFile* first = nullptr;
  std::string first_node;
  for (size_t k = 0; k < members.size(); ++k) {
    auto it = lists.find(members[k]);
    if (it == lists.end()) continue;
    for (const ShardFile& f : it->second) {
      if (!first) first = &f, first_node = members[k];
      if (f.export_id != first->export_id || f.total != first->total) {
        catalog.error = members[k] + "'s " + f.path + " is from another export than " +
                        first_node + "'s " + first->path;
        catalog.fix = "give every node files of one export (dtrain-submit export SPEC --out DIR)";
        return catalog;
      }
      DistinctShard& d = distinct[{f.name(), f.examples}];
      d.name = f.name();
      d.examples = f.examples;
      d.holders.push_back({k, f.path});
    }
  }
  if (!first) {
    catalog.error = "no node holds a file that the pattern matches";
    catalog.fix = "copy the export's files to the nodes, at the path the pattern gives";
    return catalog;
  }
  catalog.total = first->total;
  for (auto& [key, d] : distinct) catalog.files.push_back(std::move(d));
  return catalog;
}

namespace {

// Each file to one of its holders, balancing the examples: the files with the fewest holders
// first (a file only one node holds leaves no choice, and the choices should even out around
// those), the largest first among equals, each to its holder with the fewest examples so far;
// then single moves from the most loaded node while one lowers it. The holder's member index
// per file of `files` (in its order), every member's examples, and the order files were dealt.
std::vector<size_t> balance(const std::vector<DistinctShard>& files, size_t members,
                            std::vector<int64_t>& member_examples, std::vector<size_t>& order) {
  order.resize(files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (files[a].holders.size() != files[b].holders.size())
      return files[a].holders.size() < files[b].holders.size();
    return files[a].examples > files[b].examples;
  });
  member_examples.assign(members, 0);
  std::vector<size_t> holder_of(files.size());
  for (size_t i : order) {
    const auto* best = &files[i].holders.front();
    for (const auto& holder : files[i].holders)
      if (member_examples[holder.first] < member_examples[best->first]) best = &holder;
    member_examples[best->first] += files[i].examples;
    holder_of[i] = best->first;
  }
  // Each move lowers the sum of squared loads, so this ends; the bound is a safeguard.
  for (size_t round = 0; round < 4 * files.size(); ++round) {
    const size_t heavy = size_t(
        std::max_element(member_examples.begin(), member_examples.end()) - member_examples.begin());
    bool moved = false;
    for (size_t i : order) {
      if (holder_of[i] != heavy) continue;
      for (const auto& holder : files[i].holders)
        if (member_examples[holder.first] + files[i].examples < member_examples[heavy]) {
          member_examples[heavy] -= files[i].examples;
          member_examples[holder.first] += files[i].examples;
          holder_of[i] = holder.first;
          moved = true;
          break;
        }
      if (moved) break;
    }
    if (!moved) break;
  }
  return holder_of;
}

}  // namespace

TaskPartPlan make_task_parts(const std::vector<std::string>& members,
                             const std::map<std::string, std::vector<ShardFile>>& lists) {
  TaskPartPlan plan;
  const ShardCatalog catalog = catalog_shards(members, lists);
  if (!catalog.error.empty()) {
    plan.error = catalog.error;
    plan.fix = catalog.fix;
    return plan;
  }
  int64_t held = 0;
  for (const DistinctShard& f : catalog.files) held += f.examples;
  if (held != catalog.total) {
    plan.error = "the nodes hold " + std::to_string(held) + " of the export's " +
                 std::to_string(catalog.total) + " examples" +
                 (held > catalog.total ? " (files of two exports of the same data, or renamed "
                                         "files)" : "");
    plan.fix = held > catalog.total
                   ? "give every node files of one export, under the names export gave them"
                   : "copy the missing files of the export to a node (every example is "
                     "evaluated), or evaluate with --data";
    return plan;
  }
  std::vector<int64_t> member_examples;
  std::vector<size_t> order;
  const std::vector<size_t> holder_of =
      balance(catalog.files, members.size(), member_examples, order);
  for (size_t i = 0; i < catalog.files.size(); ++i) {
    std::map<std::string, std::string> where;
    for (const auto& [k, path] : catalog.files[i].holders) where[members[k]] = path;
    plan.holders.push_back(std::move(where));
    plan.examples.push_back(catalog.files[i].examples);
    plan.owner.push_back(members[holder_of[i]]);
  }
  plan.summary = "node-local evaluation: " + std::to_string(catalog.files.size()) + " files, " +
                 std::to_string(held) + " examples;";
  for (size_t k = 0; k < members.size(); ++k)
    if (lists.count(members[k]))
      plan.summary += (k ? ", " : " ") + members[k] + " evaluates " +
                      std::to_string(std::count(holder_of.begin(), holder_of.end(), k)) + " (" +
                      std::to_string(member_examples[k]) + " examples)";
  return plan;
}

DataPlan make_data_plan(const std::vector<std::string>& members,
                        const std::map<std::string, std::vector<ShardFile>>& lists) {
  DataPlan plan;
  const ShardCatalog catalog = catalog_shards(members, lists);
  if (!catalog.error.empty()) {
    plan.error = catalog.error;
    plan.fix = catalog.fix;
    return plan;
  }
  std::vector<size_t> order;  // each node's files in the order the deal gave them
  const std::vector<size_t> holder_of =
      balance(catalog.files, members.size(), plan.member_examples, order);
  for (size_t i : order)
    for (const auto& [k, path] : catalog.files[i].holders)
      if (k == holder_of[i]) {
        plan.files[members[k]].push_back(path);
        break;
      }
  int64_t used = 0;
  for (int64_t n : plan.member_examples) used += n;
  if (used > catalog.total) {  // distinct files hold more than the export has: not one export
    plan.error = "the files hold " + std::to_string(used) + " examples, more than their export's " +
                 std::to_string(catalog.total) + ": files of two exports of the same data, or "
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
  plan.summary = "node-local data: " + std::to_string(catalog.files.size()) + " files, " +
                 std::to_string(used) + " of the export's " + std::to_string(catalog.total) +
                 " examples;";
  for (size_t k = 0; k < members.size(); ++k)
    plan.summary += (k ? ", " : " ") + members[k] + " trains from " +
                    std::to_string(plan.files[members[k]].size()) + " (" +
                    std::to_string(plan.member_examples[k]) + " examples)";
  if (used < catalog.total)
    plan.summary += "; the nodes lack " + std::to_string(catalog.total - used) +
                    " examples of the export, which are not trained on";
  return plan;
}

}  // namespace dtrain::daemon
