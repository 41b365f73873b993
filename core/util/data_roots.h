#pragma once
// The folders a cluster node lets jobs read their inputs from (dtraind.yaml's `data_roots`;
// docs/operations.md, "Who may do what"): a job's data, its init_from model, a task's data. A
// path outside them is refused before anything is looked up, so a refusal tells nothing about
// what exists there; symbolic links are resolved first, so a link cannot lead out.
#include <string>
#include <utility>
#include <vector>

namespace dtrain::core {

struct DataRoots {
  std::vector<std::string> allowed;  // absolute folders; empty: every path (a run on one machine)
  std::vector<std::string> excluded;  // folders inside them that are never inputs...
  std::vector<std::string> granted;   // ...but these, inside the excluded ones, are
  // The folders above are canonical already (pinned()): checks compare with them as they are,
  // and refusals name the roots as configured (`named`).
  bool resolved = false;
  std::vector<std::string> named;
  bool confines() const { return !allowed.empty() || resolved; }
  // These roots with their links resolved now, for one reading of many files (an image folder's
  // thousands): each file is then checked without resolving the roots again. Pinned for that
  // reading only, so a root that changes is seen by the next. A root that cannot be resolved
  // holds nothing, as when it is resolved for each file. Only for roots that confine.
  DataRoots pinned() const;
  // True when `path` (absolute), its links resolved, lies inside a granted folder, or inside an
  // allowed folder and no excluded one.
  bool allows(const std::string& path) const;
  // True when the file open as `fd` lies inside them, by the path the kernel resolved when it
  // was opened (every link followed then): what was opened, not a name looked up again.
  bool allows_opened(int fd) const;
  // "'PATH' is outside ..." with the fix, as (what, fix).
  std::pair<std::string, std::string> refusal(const std::string& path) const;
  // Throws core::UserError (the refusal) for the first of `paths` not allowed; the roots are
  // resolved once for all of them (a pattern may match thousands of files). Empty paths pass.
  void require(const std::vector<std::string>& paths) const;
  void require(const std::string& path) const { require(std::vector<std::string>{path}); }
};

// The folder of a file pattern (DIR/part-*.dtb), which the data roots confine: throws
// core::UserError where the folder itself has wildcards (its matches could be anywhere).
std::string pattern_folder(const std::string& pattern);

}  // namespace dtrain::core
