#pragma once
// dtrain-submit's cluster subcommands (the controller's control channel). Exit codes as in
// exit_codes.h: 3 when the controller cannot be reached, 2 for bad input or a refused request
// (wrong key, invalid spec, unknown job), 1 when a followed job fails.
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace dtrain::submit {

struct ClusterArgs {
  std::string controller = "127.0.0.1:7070";  // host:port of the controller's control channel
  std::string key_file = "/etc/dtrain/cluster.key";
  std::string credential;  // a client credential file; when set, used instead of key_file
  int connect_timeout_ms = 10000;
};

int run_cluster_submit(const ClusterArgs& a, const std::string& job_path, bool detach);
// `resume JOB`: a failed or cancelled job goes on from its consistent checkpoint.
int run_cluster_resume(const ClusterArgs& a, const std::string& job, bool detach);
// Follows job `id` (16 hex digits) to its end, printing its log (from line `log_next`) and
// progress, or nothing when `quiet`; `final_status`, when given, receives its last status.
int follow_job(const ClusterArgs& a, const std::string& id, uint64_t log_next = 0,
               bool quiet = false, nlohmann::json* final_status = nullptr);
// `fetch JOB [-o FILE]`: copies a finished job's model here (default: its file name), in chunks
// of `chunk_kb` KiB, and says so on `report`.
int run_cluster_fetch(const ClusterArgs& a, const std::string& job, const std::string& output,
                      uint32_t chunk_kb, std::FILE* report = stdout);
int run_cluster_status(const ClusterArgs& a, const std::string& job, bool json);
int run_cluster_nodes(const ClusterArgs& a, bool json);
int run_cluster_cancel(const ClusterArgs& a, const std::string& job);
int run_cluster_logs(const ClusterArgs& a, const std::string& job);
struct StatsFormat {
  bool csv = false, json = false;
  std::string node;  // only this node's rows ("" = every node)
};
// `stats JOB`: the job's recorded steps and epochs (a table, --csv or --json).
int run_cluster_stats(const ClusterArgs& a, const std::string& job, const StatsFormat& format);
// `timeline JOB`: the stats history as Chrome trace events, on stdout.
int run_cluster_timeline(const ClusterArgs& a, const std::string& job);

struct EvalArgs;
struct InferArgs;
// `eval MODEL|JOB --cluster`, `infer MODEL|JOB --cluster --output DIR`: the evaluation or
// inference as a job of the cluster's (submit/cluster_task_command.cc).
int run_cluster_eval(const ClusterArgs& a, const EvalArgs& args);
int run_cluster_infer(const ClusterArgs& a, const InferArgs& args);

}  // namespace dtrain::submit
