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
        const bool other_split = f.export_id == first->export_id;  // train and test of one
        catalog.error = members[k] + "'s " + f.path + " is from " +
                        (other_split ? "the other split (train or test) of the export of "
                                     : "another export than ") +
                        first_node + "'s " + first->path;
        catalog.fix = other_split ? "match the files of one split only, e.g. DIR/test-*.dtb"
                                  : "give every node files of one export (dtrain-submit export "
                                    "SPEC --out DIR)";
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

constexpr size_t kNobody = SIZE_MAX;

// Lowers the most loaded member's load by moving one of its files to another holder, directly
// or by a chain of two (that holder passes one of its own files on to a third): node-local
// layouts of copies often need the chain (node-2's file can go to node-1 only once node-1's
// copy-held file goes to node-3). True when it moved something; `budget` bounds the search.
bool relieve_heaviest(const std::vector<DistinctShard>& files, std::vector<size_t>& holder_of,
                      std::vector<int64_t>& load, int64_t& budget) {
  const size_t heavy = size_t(std::max_element(load.begin(), load.end()) - load.begin());
  auto move = [&](size_t f, size_t to) {
    load[holder_of[f]] -= files[f].examples;
    load[to] += files[f].examples;
    holder_of[f] = to;
  };
  for (size_t f = 0; f < files.size(); ++f) {
    if (holder_of[f] != heavy) continue;
    const int64_t e = files[f].examples;
    for (const auto& [a, path_a] : files[f].holders) {
      if (a == heavy) continue;
      if (load[a] + e < load[heavy]) {
        move(f, a);
        return true;
      }
      for (size_t g = 0; g < files.size() && --budget > 0; ++g) {
        if (holder_of[g] != a) continue;
        for (const auto& [b, path_b] : files[g].holders) {
          if (b == a || b == heavy) continue;
          const int64_t new_a = load[a] + e - files[g].examples, new_b = load[b] + files[g].examples;
          if (std::max(new_a, new_b) < load[heavy]) {
            move(g, b);
            move(f, a);
            return true;
          }
        }
      }
      if (budget <= 0) return false;
    }
  }
  return false;
}

// Relieves the most loaded member while it can be. Each step leaves fewer members at the
// highest load and none above it, so this ends; the bounds keep it quick under the
// controller's lock. A move never empties a member: the one that gives a file keeps more than
// the one that gets it had, and a chain's middle member gets one for the one it gives.
void even_out(const std::vector<DistinctShard>& files, std::vector<size_t>& holder_of,
              std::vector<int64_t>& member_examples) {
  const size_t rounds = std::min(4 * files.size(), 4 * (member_examples.size() + 16));
  int64_t budget = 20'000'000;
  for (size_t round = 0; round < rounds; ++round)
    if (!relieve_heaviest(files, holder_of, member_examples, budget)) return;
}

// Kuhn's augmenting path from member `m`: a file of its own, taken from another member only
// when that one can take another file instead.
bool match(size_t m, const std::vector<std::vector<size_t>>& held_by, std::vector<size_t>& owner,
           std::vector<bool>& seen) {
  for (size_t f : held_by[m]) {
    if (seen[f]) continue;
    seen[f] = true;
    if (owner[f] == kNobody || match(owner[f], held_by, owner, seen)) {
      owner[f] = m;
      return true;
    }
  }
  return false;
}

// Each file to one of its holders, balancing the examples. First every member that holds
// files gets one of its own (a matching: whenever some deal feeds every holder, this one
// does); then the other files, those with the fewest holders first (they leave no choice, and
// the choices should even out around them) and the largest first among equals, each to its
// holder with the fewest examples so far; then moves off the most loaded node, direct or by a
// chain of two, while one lowers it (they never empty a node; even_out). The holder's member index per file of `files` (in
// its order), every member's examples, and the order in which the files were dealt.
std::vector<size_t> balance(const std::vector<DistinctShard>& files, size_t members,
                            std::vector<int64_t>& member_examples, std::vector<size_t>& order) {
  std::vector<std::vector<size_t>> held_by(members);
  for (size_t f = 0; f < files.size(); ++f)
    for (const auto& holder : files[f].holders) held_by[holder.first].push_back(f);
  std::vector<size_t> holder_of(files.size(), kNobody);
  for (size_t m = 0; m < members; ++m) {
    std::vector<bool> seen(files.size(), false);
    match(m, held_by, holder_of, seen);
  }
  member_examples.assign(members, 0);
  order.clear();
  std::vector<size_t> rest;
  for (size_t f = 0; f < files.size(); ++f) {
    if (holder_of[f] == kNobody) {
      rest.push_back(f);
      continue;
    }
    member_examples[holder_of[f]] += files[f].examples;
    order.push_back(f);
  }
  std::stable_sort(rest.begin(), rest.end(), [&](size_t a, size_t b) {
    if (files[a].holders.size() != files[b].holders.size())
      return files[a].holders.size() < files[b].holders.size();
    return files[a].examples > files[b].examples;
  });
  for (size_t f : rest) {
    size_t best = files[f].holders.front().first;
    for (const auto& holder : files[f].holders)
      if (member_examples[holder.first] < member_examples[best]) best = holder.first;
    member_examples[best] += files[f].examples;
    holder_of[f] = best;
    order.push_back(f);
  }
  even_out(files, holder_of, member_examples);
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
  if (catalog.files.size() > kMaxTaskParts) {
    plan.error = "the nodes hold " + std::to_string(catalog.files.size()) +
                 " distinct files; an evaluation takes at most " + std::to_string(kMaxTaskParts);
    plan.fix = "export the test set into fewer files (--test-files)";
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
