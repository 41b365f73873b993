#pragma once
// Every job the controller has accepted, by id, each kept durably on disk as one JSON file
// under <data_dir>/controller/jobs/ (job_record.h), so that a restarted controller still shows
// past jobs and goes on with the queued and running ones. Not thread-safe: the controller calls
// it under its lock. Records are never removed: a reference to one stays valid.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/controller/job_record.h"

namespace dtrain::daemon {

class JobStore {
 public:
  // Keeps its files in <data_dir>/controller/jobs, made now; throws core::UserError naming
  // data_dir when it cannot be.
  explicit JobStore(const std::string& data_dir);

  // Reads the folder back after a restart. What cannot go on is failed and saved: a task job
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
  void save(const JobRecord& job) const { save_job(dir_, job); }
  size_t size() const { return jobs_.size(); }
  // Queued or running evaluation and inference jobs (each holds its model in memory).
  size_t unfinished_tasks() const;
  // `status --json`: every job, in the order submitted.
  Json list_json() const;

 private:
  std::string dir_;
  std::map<uint64_t, JobRecord> jobs_;
};

}  // namespace dtrain::daemon
