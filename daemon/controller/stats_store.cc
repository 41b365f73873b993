#include "daemon/controller/stats_store.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

// "c1 REAL, c2 REAL, ..." / "c1, c2, ..." / "?, ?, ..." over a report's columns.
template <size_t N>
std::string column_list(const std::array<const char*, N>& columns, const char* suffix) {
  std::string out;
  for (const char* c : columns) out += std::string(out.empty() ? "" : ", ") + c + suffix;
  return out;
}
template <size_t N>
std::string placeholders() {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += i ? ", ?" : "?";
  return out;
}

struct Statement {
  sqlite3_stmt* stmt = nullptr;
  Statement(sqlite3* db, const std::string& sql) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(stmt); }
};

template <size_t N>
void insert_rows(sqlite3* db, const std::string& table, const std::array<const char*, N>& columns,
                 const std::string& job, const std::string& node,
                 const std::vector<std::array<double, N>>& rows) {
  if (rows.empty()) return;
  Statement s(db, "INSERT OR REPLACE INTO " + table + " (job, node, " +
                      column_list(columns, "") + ") VALUES (?, ?, " + placeholders<N>() + ")");
  for (const auto& row : rows) {
    sqlite3_reset(s.stmt);
    sqlite3_bind_text(s.stmt, 1, job.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s.stmt, 2, node.c_str(), -1, SQLITE_TRANSIENT);
    for (size_t i = 0; i < N; ++i) {
      if (std::isfinite(row[i])) sqlite3_bind_double(s.stmt, int(i) + 3, row[i]);
      else sqlite3_bind_null(s.stmt, int(i) + 3);
    }
    if (sqlite3_step(s.stmt) != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
  }
}

template <size_t N>
Json select_rows(sqlite3* db, const std::string& table, const std::array<const char*, N>& columns,
                 const std::string& order, const std::string& job, const std::string& node,
                 const std::string& where = "1") {
  Statement s(db, "SELECT node, " + column_list(columns, "") + " FROM " + table +
                      " WHERE job = ?1 AND (?2 = '' OR node = ?2) AND " + where + " ORDER BY " +
                      order);
  sqlite3_bind_text(s.stmt, 1, job.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s.stmt, 2, node.c_str(), -1, SQLITE_TRANSIENT);
  Json rows = Json::array();
  while (sqlite3_step(s.stmt) == SQLITE_ROW) {
    Json row = {reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0))};
    for (size_t i = 0; i < N; ++i) {
      if (sqlite3_column_type(s.stmt, int(i) + 1) == SQLITE_NULL) row.push_back(nullptr);
      else row.push_back(sqlite3_column_double(s.stmt, int(i) + 1));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

template <size_t N>
Json names(const std::array<const char*, N>& columns) {
  Json out = {"node"};
  for (const char* c : columns) out.push_back(c);
  return out;
}

}  // namespace

StatsStore::StatsStore(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw core::UserError("cannot open the stats store " + path + ": " + why,
                          "check that the controller's data_dir is writable by dtraind");
  }
  sqlite3_busy_timeout(db_, 5000);
  try {
    // WAL: readers (stats queries) never wait for the writer (the nodes' reports).
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    // A store of another layout (an earlier release) holds only history: it starts over.
    if (user_version() != kSchemaVersion) {
      exec("DROP TABLE IF EXISTS steps; DROP TABLE IF EXISTS epochs; DROP TABLE IF EXISTS links");
      exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    }
    exec(("CREATE TABLE IF NOT EXISTS steps (job TEXT NOT NULL, node TEXT NOT NULL, " +
          column_list(kStepColumns, " REAL") + ", PRIMARY KEY (job, node, worker, iteration))")
             .c_str());
    exec(("CREATE TABLE IF NOT EXISTS epochs (job TEXT NOT NULL, node TEXT NOT NULL, " +
          column_list(kEpochColumns, " REAL") + ", PRIMARY KEY (job, node, epoch))")
             .c_str());
    exec(("CREATE TABLE IF NOT EXISTS links (job TEXT NOT NULL, node TEXT NOT NULL, " +
          column_list(kLinkColumns, " REAL") + ", PRIMARY KEY (job, node, time_ms, peer))")
             .c_str());
  } catch (const std::exception& e) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw core::UserError("the stats store " + path + " cannot be used: " + e.what(),
                          "move the file aside (the controller makes a new one); it holds only "
                          "the stats history");
  }
}

StatsStore::~StatsStore() { sqlite3_close(db_); }

int StatsStore::user_version() const {
  Statement s(db_, "PRAGMA user_version");
  return sqlite3_step(s.stmt) == SQLITE_ROW ? sqlite3_column_int(s.stmt, 0) : 0;
}

void StatsStore::exec(const char* sql) const {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string why = error ? error : "unknown error";
    sqlite3_free(error);
    throw std::runtime_error(why);
  }
}

void StatsStore::add(const std::string& job, const std::string& node, const StatsReport& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    exec("BEGIN");
    insert_rows(db_, "steps", kStepColumns, job, node, r.steps);
    insert_rows(db_, "epochs", kEpochColumns, job, node, r.epochs);
    insert_rows(db_, "links", kLinkColumns, job, node, r.links);
    exec("COMMIT");
  } catch (const std::exception& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    spdlog::error("controller: could not store {} stats rows of job {} from {} in {}: {}",
                  r.steps.size(), job, node, path_, e.what());
  }
}

Json StatsStore::query(const std::string& job, const std::string& node,
                       int64_t max_steps) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t every = 1;
  if (max_steps > 0) {
    Statement count(db_, "SELECT COUNT(*) FROM steps WHERE job = ?1 AND (?2 = '' OR node = ?2)");
    sqlite3_bind_text(count.stmt, 1, job.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(count.stmt, 2, node.c_str(), -1, SQLITE_TRANSIENT);
    const int64_t rows = sqlite3_step(count.stmt) == SQLITE_ROW ? sqlite3_column_int64(count.stmt, 0) : 0;
    every = std::max<int64_t>(1, (rows + max_steps - 1) / max_steps);
  }
  const std::string sampled = "CAST(iteration AS INTEGER) % " + std::to_string(every) + " = 0";
  return {{"step_columns", names(kStepColumns)},
          {"steps", select_rows(db_, "steps", kStepColumns, "node, worker, iteration", job, node,
                                sampled)},
          {"every", every},
          {"epoch_columns", names(kEpochColumns)},
          {"epochs", select_rows(db_, "epochs", kEpochColumns, "node, epoch", job, node)},
          {"link_columns", names(kLinkColumns)},
          {"links", select_rows(db_, "links", kLinkColumns, "node, peer, time_ms", job, node)}};
}

}  // namespace dtrain::daemon
