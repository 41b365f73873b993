#pragma once
// The controller's stats history (daemon/README.md, "Stats history"): the recorded steps and
// epochs its nodes report (protocol/job_stats.h), kept per job in SQLite
// (data_dir/controller/stats.db, WAL mode), so they outlive the job and the controller.
// A row is keyed by (job, node, worker, iteration), so one a node sends again is stored once.
#include <cstdint>
#include <mutex>
#include <string>

#include "daemon/protocol/job_stats.h"

struct sqlite3;

namespace dtrain::daemon {

class StatsStore {
 public:
  // Opens (or creates) the store at `path`. Throws core::UserError naming the file and the fix.
  explicit StatsStore(const std::string& path);
  ~StatsStore();
  StatsStore(const StatsStore&) = delete;
  StatsStore& operator=(const StatsStore&) = delete;

  // One node's report for job `job` (16 hex digits). Thread-safe; a failed write is logged
  // and the rest of the controller goes on.
  void add(const std::string& job, const std::string& node, const StatsReport& report);
  // The job's rows, of `node` only unless it is empty: {"step_columns", "steps", "epoch_columns",
  // "epochs"}, steps ordered by node, worker and iteration (figures that are not finite: null).
  Json query(const std::string& job, const std::string& node) const;

 private:
  void exec(const char* sql) const;
  sqlite3* db_ = nullptr;
  std::string path_;
  mutable std::mutex mutex_;
};

}  // namespace dtrain::daemon
