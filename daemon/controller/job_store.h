#pragma once
// Every job the controller has accepted, by id, each kept durably (job_records.h: a JSON file
// under <data_dir>/controller/jobs/, or etcd), so that a restarted or newly elected controller
// still shows past jobs and goes on with the queued and running ones. Not thread-safe: the
// controller calls it under its lock. Records are never removed: a reference to one stays valid.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/controller/job_record.h"
#include "daemon/controller/job_records.h"

namespace dtrain::daemon {

class JobStore {
 public:
  explicit JobStore(std::unique_ptr<JobRecords> records) : records_(std::move(records)) {}
  // Files under <data_dir>/controller/jobs (FileJobRecords).
  explicit JobStore(const std::string& data_dir)
      : JobStore(std::make_unique<FileJobRecords>(data_dir)) {}

  // Reads the records back after a restart or an election. What cannot go on is failed and
  // saved: a task job
  // (its model and parts were in memory only). Returns the running jobs' ids and the queued
  // ones, each in the order submitted.
  struct Recovered {
    std::vector<uint64_t> running;
    std::vector<uint64_t> queued;
  };
  Recovered recover();

  JobRecord* find(uint64_t id);
  // Gives `job` a random id (never 0, never one in use) and its submission time, and saves it.
  JobRecord& add(JobRecord job);
  // Throws FencedOut (job_records.h) when an elected controller may no longer act, after
  // calling the fenced-out hook (the controller stops sending before the lock is released).
  void save(const JobRecord& job) const {
    try {
      records_->save(job);
    } catch (const FencedOut&) {
      if (on_fenced_) on_fenced_();
      throw;
    }
  }
  void on_fenced(std::function<void()> hook) { on_fenced_ = std::move(hook); }
  size_t size() const { return jobs_.size(); }
  // Queued or running evaluation and inference jobs (each holds its model in memory).
  size_t unfinished_tasks() const;
  // `status --json`: every job, in the order submitted.
  Json list_json() const;

 private:
  std::unique_ptr<JobRecords> records_;
  std::function<void()> on_fenced_;
  std::map<uint64_t, JobRecord> jobs_;
};

}  // namespace dtrain::daemon
