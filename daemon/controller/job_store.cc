#include "daemon/controller/job_store.h"

#include <sodium.h>

#include <algorithm>
#include <filesystem>

#include "core/util/error.h"

namespace dtrain::daemon {

FileJobRecords::FileJobRecords(const std::string& data_dir) : dir_(data_dir + "/controller/jobs") {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw core::UserError("cannot create " + dir_ + ": " + ec.message(),
                          "make data_dir (" + data_dir + ") writable for dtraind");
}

namespace {

void fail_record(JobRecord& job, const std::string& error, const std::string& fix) {
  job.state = JobState::kFailed;
  job.error = error;
  job.fix = fix;
  job.finished_at = unix_now();
}

}  // namespace

JobStore::Recovered JobStore::recover() {
  Recovered out;
  for (JobRecord& job : records_->load()) {
    if (job.is_task() && !job.finished()) {
      // Its model and parts were in memory only; a node still running it is an orphan (the
      // controller tells it to stop when it registers).
      fail_record(job, std::string("the controller restarted before the ") + task_kind_word(job.task) + " job ended",
                  "submit it again");
      save(job);
    }
    if (job.state == JobState::kRunning) out.running.push_back(job.id);
    if (job.state == JobState::kQueued) out.queued.push_back(job.id);
    const uint64_t id = job.id;
    jobs_[id] = std::move(job);
  }
  auto submitted = [&](uint64_t a, uint64_t b) {
    return jobs_[a].submitted_at < jobs_[b].submitted_at;
  };
  std::stable_sort(out.running.begin(), out.running.end(), submitted);
  std::stable_sort(out.queued.begin(), out.queued.end(), submitted);
  return out;
}

JobRecord* JobStore::find(uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

JobRecord& JobStore::add(JobRecord job) {
  do randombytes_buf(&job.id, sizeof job.id);
  while (job.id == 0 || jobs_.count(job.id));
  job.submitted_at = unix_now();
  save(job);
  const uint64_t id = job.id;
  return jobs_[id] = std::move(job);
}

size_t JobStore::unfinished_tasks() const {
  size_t n = 0;
  for (const auto& [id, j] : jobs_) n += j.is_task() && !j.finished();
  return n;
}

Json JobStore::list_json() const {
  Json jobs = Json::array();
  for (const auto& [id, job] : jobs_) jobs.push_back(job.to_json());
  std::sort(jobs.begin(), jobs.end(), [](const Json& a, const Json& b) {
    return a["submitted_at"].get<double>() < b["submitted_at"].get<double>();
  });
  return {{"jobs", jobs}};
}

}  // namespace dtrain::daemon
