#include "daemon/protocol/job_folder.h"

#include <filesystem>

#include "daemon/protocol/job_id.h"

namespace dtrain::daemon {

std::string job_folder(const std::string& data_dir, uint64_t job_id) {
  return data_dir + "/jobs/" + job_id_text(job_id);
}

std::optional<uint64_t> job_of_folder_path(const std::string& path) {
  const std::filesystem::path normal = std::filesystem::path(path).lexically_normal();
  bool after_jobs = false;
  for (const std::filesystem::path& part : normal) {
    uint64_t id = 0;
    if (after_jobs && part.string().size() == 16 && parse_job_id(part.string(), id)) return id;
    after_jobs = part == "jobs";
  }
  return std::nullopt;
}

}  // namespace dtrain::daemon
