#pragma once
// The stats history of a job (docs/architecture/daemon.md, "Stats history"): a node's Stats report
// holds rows of recorded steps, one per worker per `stride` of its steps, and a row per epoch; the
// controller keeps them in its SQLite store (controller/stats_store.h) and `dtrain-submit stats`
// prints them. The report travels as a StatsReport table (daemon/protocol/node_reports.h).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::daemon {

// The step columns, in the order of a report's rows and of `stats --csv`.
inline constexpr std::array<const char*, 16> kStepColumns = {
    "worker",     "iteration",     "epoch",         "loss",     "samples_per_sec",
    "tau",        "density",       "encoding",      "message_bytes", "residual_norm",
    "compute_ms", "encode_ms",     "apply_ms",      "wait_ms",  "start_ms",
    "data_ms"};
// `encoding` is a number in rows: 0 sparse, 1 bitmap, -1 none (parameter averaging).
inline constexpr std::array<const char*, 5> kEpochColumns = {
    "epoch", "train_loss", "samples_per_sec", "accuracy", "seconds"};
// `start_ms` (steps) and `time_ms` (links) are Unix times in milliseconds.
// Links: what the node's data channel sent to and took from each peer so far (cumulative), a
// sample a second: the transport tracks of `dtrain-submit timeline`.
inline constexpr std::array<const char*, 7> kLinkColumns = {
    "time_ms", "peer", "bytes_out", "bytes_in", "datagrams_out", "retransmits", "rtt_us"};

struct StatsReport {
  std::vector<std::array<double, kStepColumns.size()>> steps;
  std::vector<std::array<double, kEpochColumns.size()>> epochs;  // accuracy -1: not evaluated
  std::vector<std::array<double, kLinkColumns.size()>> links;
};

// A report holds at most this many rows of each kind (a node sends every second).
constexpr size_t kMaxStatsRows = 20000;

// False for rows no real node sends: a worker, iteration or epoch that is not a whole number a
// job can have. (A non-finite loss is kept: a diverged step.)
bool stats_rows_plausible(const StatsReport& report);

}  // namespace dtrain::daemon
