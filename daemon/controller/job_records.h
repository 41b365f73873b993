#pragma once
// Where the controller keeps its job records (job_record.h): one JSON file each under
// <data_dir>/controller/jobs/ for a single controller, or in etcd for elected ones
// (daemon/election/etcd_job_records.h; docs/architecture/daemon.md, "Standby controllers").
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/controller/job_record.h"

namespace dtrain::daemon {

// An elected controller may no longer act: its lease ran out, another candidate holds the
// leader key, or etcd could not confirm it. Whatever it was doing stops where this is thrown
// (its record not saved, its frames not sent); the controller then gives up its term.
struct FencedOut : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class JobRecords {
 public:
  virtual ~JobRecords() = default;
  // Keeps the record (with its log), replacing the one of the same id. Throws FencedOut.
  virtual void save(const JobRecord& job) = 0;
  // Every record kept; unreadable ones are skipped with a warning.
  virtual std::vector<JobRecord> load() = 0;
};

class FileJobRecords : public JobRecords {
 public:
  // Keeps its files in <data_dir>/controller/jobs, made now; throws core::UserError naming
  // data_dir when it cannot be.
  explicit FileJobRecords(const std::string& data_dir);
  void save(const JobRecord& job) override { save_job(dir_, job); }
  std::vector<JobRecord> load() override { return load_jobs(dir_); }

 private:
  std::string dir_;
};

}  // namespace dtrain::daemon
