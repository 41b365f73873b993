#pragma once
// The controller's stats history (docs/architecture/daemon.md, "Stats history"): the recorded steps
// and epochs its nodes report (protocol/job_stats.h), kept per job in SQLite
// (data_dir/controller/stats.db, WAL mode), so they outlive the job and the controller.
// A row is keyed by (job, node, worker, iteration), so one a node sends again is stored once.
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/protocol/job_stats.h"

struct sqlite3;

namespace dtrain::daemon {

using Json = nlohmann::json;

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
  // "epochs", "link_columns", "links"}, steps ordered by node, worker and iteration, links by
  // node, peer and time (figures that are not finite: null).
  // With max_steps > 0, every k-th iteration only, k chosen so at most about max_steps step
  // rows come back (the dashboard's charts; --csv takes them all).
  Json query(const std::string& job, const std::string& node, int64_t max_steps = 0) const;

 private:
  // The tables' layout (PRAGMA user_version); a store of another is started over.
  static constexpr int kSchemaVersion = 3;  // 2: links.datagrams_out; 3: steps.data_ms
  void exec(const char* sql) const;
  int user_version() const;
  sqlite3* db_ = nullptr;
  std::string path_;
  mutable std::mutex mutex_;
};

}  // namespace dtrain::daemon
