#pragma once
// The folders a cluster node lets jobs read their inputs from (dtraind.yaml's `data_roots`;
// docs/operations.md, "Who may do what"): a job's data, its init_from model, a task's data. A
// path outside them is refused before anything is looked up, so a refusal tells nothing about
// what exists there; symbolic links are resolved first, so a link cannot lead out.
#include <string>
#include <vector>

namespace dtrain::core {

struct DataRoots {
  std::vector<std::string> allowed;  // absolute folders; empty: every path (a run on one machine)
  std::vector<std::string> excluded;  // folders inside them that are never inputs...
  std::vector<std::string> granted;   // ...but these, inside the excluded ones, are
  bool confines() const { return !allowed.empty(); }
  // True when `path` (absolute), its links resolved, lies inside a granted folder, or inside an
  // allowed folder and no excluded one.
  bool allows(const std::string& path) const;
  // "'PATH' is outside ..." with the fix, as (what, fix).
  std::pair<std::string, std::string> refusal(const std::string& path) const;
};

}  // namespace dtrain::core
