#pragma once
// Where a node keeps one training job's files: its model and checkpoints live in a folder of
// their own, named by the job's id (docs/architecture/daemon.md, "The node"), so that two jobs
// naming the same `output.model` never replace or prune each other's files, and `resume` of
// each goes on from its own checkpoints. Such a folder is no other job's input unless the
// controller checked that the job's owner may read it (a model.init_from naming it).
#include <cstdint>
#include <optional>
#include <string>

namespace dtrain::daemon {

// data_dir/jobs/<job id, 16 hex digits>
std::string job_folder(const std::string& data_dir, uint64_t job_id);

// The job whose folder `path` names (".../jobs/<16 hex digits>/..." once '.' and '..' are
// resolved), if any.
std::optional<uint64_t> job_of_folder_path(const std::string& path);

}  // namespace dtrain::daemon
