#include "daemon/election/etcd_job_records.h"

#include <spdlog/spdlog.h>

#include "daemon/protocol/job_id.h"

namespace dtrain::daemon {

EtcdJobRecords::EtcdJobRecords(EtcdClient& etcd, std::string prefix, LeaderFence fence)
    : etcd_(etcd), prefix_(std::move(prefix) + "/jobs/"), fence_(std::move(fence)) {}

std::string record_text_within(const JobRecord& job, size_t most) {
  auto text = [](const JobRecord& j) {
    return j.to_json(/*with_log=*/true).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  std::string out = text(job);
  if (out.size() <= most) return out;
  JobRecord cut = job;
  while (out.size() > most && !cut.log.empty()) {
    const size_t drop = (cut.log.size() + 1) / 2;  // halves: a few tries at most
    cut.log.erase(cut.log.begin(), cut.log.begin() + static_cast<std::ptrdiff_t>(drop));
    cut.log_dropped += drop;
    out = text(cut);
  }
  return out;
}

void EtcdJobRecords::save(const JobRecord& job) {
  if (!fence_.acts()) throw FencedOut("this controller's lease ran out (by its own clock)");
  const std::string text = record_text_within(job, kMostRecordBytes);
  if (text.size() > kMostRecordBytes) {  // no log left to cut: never a whole record this large
    spdlog::error("job {}: its record is {} bytes, over the {} etcd may keep: not saved",
                  job_id_text(job.id), text.size(), kMostRecordBytes);
    return;
  }
  bool landed = false;
  try {
    landed = etcd_.put_if_held(prefix_ + job_id_text(job.id), text, fence_.leader_key,
                               fence_.lease);
  } catch (const EtcdError& e) {
    throw FencedOut(std::string("etcd did not confirm a record's write: ") + e.what());
  }
  if (!landed) throw FencedOut("the leader key is no longer under this controller's lease");
}

std::vector<JobRecord> EtcdJobRecords::load() {
  std::vector<JobRecord> jobs;
  for (const auto& [key, value] : etcd_.list(prefix_)) {
    const Json j = Json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      spdlog::warn("controller: skipping the unreadable record {} in etcd", key);
      continue;
    }
    try {
      jobs.push_back(JobRecord::from_json(j));
    } catch (const std::exception& e) {
      spdlog::warn("controller: skipping the record {} in etcd: {}", key, e.what());
    }
  }
  return jobs;
}

}  // namespace dtrain::daemon
