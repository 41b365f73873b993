// dtrain-submit against a cluster: submit (and follow), status, nodes, cancel, logs. Every
// call is one authenticated request to the controller (transport/control) with a deadline;
// the JSON the controller answers is what --json prints.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/spec/job_spec_parser.h"
#include "core/train/init_from.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/job_state.h"
#include "submit/cluster_commands.h"
#include "submit/controller_client.h"
#include "submit/exit_codes.h"
#include "submit/progress_printer.h"
#include "transport/control/control_connection.h"
#include "transport/security/client_credential.h"
#include "transport/security/cluster_key.h"

namespace dtrain::submit {
namespace {

using daemon::Json;
using transport::ControlError;

volatile std::sig_atomic_t g_interrupted = 0;

std::string progress_line(const Json& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "epoch %d/%d  iter %d/%d  loss %.4f  %.0f samples/s",
                p.value("epoch", 0), p.value("epochs", 0), p.value("iteration_in_epoch", 0),
                p.value("iterations_per_epoch", 0), p.value("loss", 0.0),
                p.value("samples_per_sec", 0.0));
  std::string line = buf;
  if (p.contains("tau")) {
    std::snprintf(buf, sizeof buf, "  tau %.2e dens %.3f%% %s", p.value("tau", 0.0),
                  100.0 * p.value("density", 0.0), p.value("encoding", "").c_str());
    line += buf;
  }
  line += "  ETA " + format_duration(p.value("eta_seconds", 0.0));
  if (p.value("diverging", false)) line += "  DIVERGING: loss far above its best";
  return line;
}

// The progress of the lowest-ranked node, with samples/s summed over all nodes.
Json merged_progress(const Json& job) {
  Json best;
  double rate = 0;
  for (const auto& [node, p] : job["progress"].items()) {
    rate += p.value("samples_per_sec", 0.0);
    if (best.is_null() || p.value("rank", 1 << 30) < best.value("rank", 1 << 30)) best = p;
  }
  if (!best.is_null()) best["samples_per_sec"] = rate;
  return best;
}

// The job list's figure: the test accuracy, a regression's R² per target, or an inference's
// predictions.
std::string result_summary(const Json& r) {
  char text[64];
  if (r.contains("accuracy") && r["accuracy"].is_number()) {
    std::snprintf(text, sizeof text, "accuracy %.4f", r["accuracy"].get<double>());
    return text;
  }
  if (r.contains("regression") && r["regression"].contains("r2") && r["regression"]["r2"].is_array()) {
    std::string out = "R\u00b2";
    for (const Json& v : r["regression"]["r2"]) {
      std::snprintf(text, sizeof text, " %.4f", v.is_number() ? v.get<double>() : NAN);
      out += text;
    }
    return out;
  }
  if (r.contains("rows") && r["rows"].is_number_integer())
    return std::to_string(r["rows"].get<int64_t>()) + " predictions";
  return "-";
}

void print_result(const Json& job) {
  const Json& r = job["result"];
  std::printf("job %s (%s): %s\n", job.value("id", "").c_str(), job.value("name", "").c_str(),
              job.value("state", "").c_str());
  if (r.contains("accuracy"))
    std::printf("  test accuracy %.4f, top-%d %.4f\n", r.value("accuracy", 0.0),
                r.value("top_n", 1), r.value("top_n_accuracy", 0.0));
  if (r.contains("regression") && r["regression"].is_object()) {
    const Json& m = r["regression"];
    std::printf("  test loss %.6g", r.value("test_loss", 0.0));
    for (const char* key : {"r2", "rmse"}) {
      std::printf(", %s", key);
      if (m.contains(key) && m[key].is_array())
        for (const Json& v : m[key]) std::printf(" %s", v.is_number() ? std::to_string(v.get<double>()).c_str() : "-");
    }
    std::printf("\n");
  }
  if (r.contains("replica_max_relative_difference"))
    std::printf("  replicas agree: max relative difference %.2e over %zu nodes\n",
                r.value("replica_max_relative_difference", 0.0),
                r.value("replicas_compared", job["nodes"].size()));
  if (r.contains("samples_per_sec"))
    std::printf("  %.0f samples/s over all nodes, %.1f s of training\n",
                r.value("samples_per_sec", 0.0), r.value("train_seconds", 0.0));
  for (const auto& [key, what] : {std::pair<const char*, const char*>{"lost_nodes", "lost"},
                                  {"rejoined_nodes", "back (rejoined)"},
                                  {"joined_nodes", "joined (elastic)"}}) {
    if (!job.contains(key) || !job[key].is_array() || job[key].empty()) continue;
    std::string names;
    for (const auto& n : job[key]) names += (names.empty() ? "" : ", ") + n.get<std::string>();
    std::printf("  %s during the job: %s\n", what, names.c_str());
  }
  if (r.contains("output"))
    std::printf("  %lld predictions in %s\n", (long long)r.value("rows", int64_t(0)),
                r.value("output", "").c_str());
  if (r.contains("files") && r["files"].is_array())
    std::printf("  %lld predictions in %zu part files in %s (part-NNNNN.csv, in key order)\n",
                (long long)r.value("rows", int64_t(0)), r["files"].size(),
                r.value("folder", "").c_str());
  if (r.contains("model_path"))
    std::printf("  model written on the first node: %s\n  (dtrain-submit fetch %s copies it "
                "here)\n", r.value("model_path", "").c_str(), job.value("id", "").c_str());
  if (!job.value("error", "").empty()) {
    std::printf("  error: %s\n", job.value("error", "").c_str());
    if (!job.value("fix", "").empty()) std::printf("  fix: %s\n", job.value("fix", "").c_str());
  }
}

}  // namespace

int run_cluster_submit(const ClusterArgs& a, const std::string& job_path, bool detach) {
  std::string text;
  try {
    // Refused here, before the controller or any node (a model.init_from file is read here
    // too; every node reads it again at the same path).
    core::check_init_from(core::parse_job_spec_file(job_path));
    std::ifstream in(job_path);
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  const std::string base_dir =
      std::filesystem::absolute(std::filesystem::path(job_path)).parent_path().string();
  Json job;
  try {
    daemon::ClientRequest submit = daemon::client_request(daemon::RequestKind::Submit);
    submit.spec = text;
    submit.base_dir = base_dir;
    submit.source = job_path;
    job = call(a, submit);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  const std::string id = job.value("id", "");
  if (detach) {
    std::printf("%s\n", id.c_str());
    return kExitSuccess;
  }
  std::printf("submitted job %s (%s) to %s\n", id.c_str(), job.value("name", "").c_str(),
              a.controller.c_str());
  return follow_job(a, id);
}

int run_cluster_resume(const ClusterArgs& a, const std::string& job_text, bool detach) {
  uint64_t id = 0;
  if (!job_id_arg(job_text, id)) return kExitBadInput;
  Json job;
  uint64_t log_from = 0;  // the log from the resume on (not the run before it)
  try {
    daemon::ClientRequest where = daemon::client_request(daemon::RequestKind::Status, id);
    where.log_from = UINT64_MAX;  // no lines: where its log ends
    log_from = call(a, where).value("log_next", uint64_t(0));
    job = call(a, daemon::RequestKind::Resume, id);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  if (detach) {
    std::printf("%s\n", job.value("id", "").c_str());
    return kExitSuccess;
  }
  std::printf("resuming job %s (%s) on %s\n", job.value("id", "").c_str(),
              job.value("name", "").c_str(), a.controller.c_str());
  return follow_job(a, job.value("id", ""), log_from);
}

// Prints the job's log and progress until it ends; its exit code is the job's outcome.
int follow_job(const ClusterArgs& a, const std::string& id, uint64_t log_next, bool quiet,
               Json* final_status) {
  uint64_t numeric = 0;
  daemon::parse_job_id(id, numeric);
  Json job;
  std::fflush(stdout);
  const bool terminal = isatty(fileno(stdout));
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  auto last_plain = std::chrono::steady_clock::now();
  int failures = 0;
  while (!g_interrupted) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    try {
      daemon::ClientRequest status = daemon::client_request(daemon::RequestKind::Status, numeric);
      status.log_from = log_next;
      job = call(a, status);
      failures = 0;
      const Json lines = quiet ? Json::array() : job.value("log", Json::array());
      if (!lines.empty() && terminal) std::printf("\r\033[K");
      for (const Json& line : lines) std::printf("%s\n", line.get<std::string>().c_str());
      log_next = job.value("log_next", log_next);
    } catch (const ControlError& e) {
      // The controller may be restarting: keep trying for a while, then say so.
      if (++failures == 20) {
        std::fprintf(stderr, "\nerror: lost the controller while following job %s: %s\n",
                     id.c_str(), e.what());
        return kExitNoController;
      }
      continue;
    } catch (const std::exception& e) {
      return report_error(e);
    }
    const auto state = daemon::parse_job_state(job.value("state", ""));
    if (state && daemon::job_ended(*state)) {
      const bool succeeded = *state == daemon::JobState::kSucceeded;
      if (terminal && !quiet) std::printf("\r\033[K");
      if (final_status) *final_status = job;
      if (!quiet || !succeeded) print_result(job);
      return succeeded ? kExitSuccess : kExitJobFailed;
    }
    const Json p = merged_progress(job);
    if (p.is_null() || quiet) continue;
    if (terminal) {
      std::printf("\r\033[K%s", progress_line(p).c_str());
      std::fflush(stdout);
    } else if (std::chrono::steady_clock::now() - last_plain > std::chrono::seconds(5)) {
      std::printf("%s\n", progress_line(p).c_str());
      std::fflush(stdout);
      last_plain = std::chrono::steady_clock::now();
    }
  }
  std::printf("\njob %s keeps running; follow it with `dtrain-submit status %s`\n", id.c_str(),
              id.c_str());
  return kExitSuccess;
}

int run_cluster_status(const ClusterArgs& a, const std::string& job, bool json) {
  uint64_t id = 0;
  if (!job.empty() && !job_id_arg(job, id)) return kExitBadInput;
  Json reply;
  try {
    reply = call(a, daemon::RequestKind::Status, id);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  if (json) {
    std::printf("%s\n", reply.dump(2).c_str());
    return kExitSuccess;
  }
  if (!job.empty()) {
    print_result(reply);
    std::printf("  owner: %s\n", reply.value("owner", std::string("-")).c_str());
    const Json p = merged_progress(reply);
    if (reply.value("state", "") == "running" && !p.is_null())
      std::printf("  %s\n", progress_line(p).c_str());
    if (reply.contains("task_parts") && reply["task_parts"].is_object())  // eval/infer --cluster
      std::printf("  parts: %lld of %lld done\n",
                  (long long)reply["task_parts"].value("done", int64_t(0)),
                  (long long)reply["task_parts"].value("total", int64_t(0)));
    return kExitSuccess;
  }
  std::printf("%-18s %-24s %-14s %-10s %-6s %s\n", "JOB", "NAME", "OWNER", "STATE", "NODES",
              "RESULT");
  for (const Json& j : reply["jobs"]) {
    const std::string owner = j.value("owner", std::string());
    std::printf("%-18s %-24s %-14s %-10s %-6zu %s\n", j.value("id", "").c_str(),
                j.value("name", "").c_str(), owner.empty() ? "-" : owner.c_str(),
                j.value("state", "").c_str(), j["nodes"].size(),
                result_summary(j["result"]).c_str());
  }
  return kExitSuccess;
}

namespace {
// "-" or "2 x NVIDIA H100 80GB HBM3 (79 GiB)"; mixed models are listed one by one.
std::string gpus_summary(const Json& gpus) {
  if (!gpus.is_array() || gpus.empty()) return "-";
  auto one = [](const Json& g) {
    return g.value("name", std::string("GPU")) + " (" +
           std::to_string(g.value("memory_bytes", uint64_t(0)) >> 30) + " GiB)";
  };
  bool same = true;
  for (const Json& g : gpus) same = same && one(g) == one(gpus[0]);
  if (same) return std::to_string(gpus.size()) + " x " + one(gpus[0]);
  std::string out;
  for (const Json& g : gpus) out += (out.empty() ? "" : ", ") + one(g);
  return out;
}
// "3f2a... (2 cores), 9c1b... (1 core, GPU 0)": the jobs holding a node, and their shares.
std::string jobs_summary(const Json& jobs) {
  std::string out;
  for (const Json& j : jobs) {
    out += (out.empty() ? "" : ", ") + j.value("id", std::string());
    if (j.value("whole_node", false)) continue;
    const int cores = j.value("cores", 0);
    out += " (" + std::to_string(cores) + (cores == 1 ? " core" : " cores");
    std::string gpus;
    for (const Json& g : j.value("gpus", Json::array()))
      gpus += (gpus.empty() ? "" : ",") + std::to_string(g.get<int>());
    out += (gpus.empty() ? "" : ", GPU " + gpus) + ")";
  }
  return out;
}
}  // namespace

int run_cluster_nodes(const ClusterArgs& a, bool json) {
  Json reply;
  try {
    reply = call(a, daemon::RequestKind::Nodes, 0);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  if (json) {
    std::printf("%s\n", reply.dump(2).c_str());
    return kExitSuccess;
  }
  std::printf("%-20s %-8s %-22s %-6s %-28s %s\n", "NODE", "STATE", "DATA", "CORES", "GPUS", "JOBS");
  for (const Json& n : reply["nodes"]) {
    const std::string data = n.value("address", "") + ":" + std::to_string(n.value("data_port", 0));
    std::printf("%-20s %-8s %-22s %-6d %-28s %s\n", n.value("name", "").c_str(),
                n.value("state", "").c_str(), data.c_str(), n.value("cores", 0),
                gpus_summary(n.value("gpus", Json::array())).c_str(),
                jobs_summary(n.value("jobs", Json::array())).c_str());
  }
  return kExitSuccess;
}

int run_cluster_cancel(const ClusterArgs& a, const std::string& job) {
  uint64_t id = 0;
  if (!job_id_arg(job, id)) return kExitBadInput;
  try {
    const Json r = call(a, daemon::RequestKind::Cancel, id);
    const std::string state = r.value("state", "");
    if (r.value("already_ended", false))  // the controller left it as it ended
      std::printf("job %s: already %s, nothing to cancel\n", job.c_str(), state.c_str());
    else
      std::printf("job %s: %s\n", job.c_str(),
                  daemon::parse_job_state(state) == daemon::JobState::kCancelled ? "cancelled"
                                                                                 : "cancelling");
  } catch (const std::exception& e) {
    return report_error(e);
  }
  return kExitSuccess;
}

int run_cluster_logs(const ClusterArgs& a, const std::string& job) {
  uint64_t id = 0;
  if (!job_id_arg(job, id)) return kExitBadInput;
  try {
    const Json r = call(a, daemon::RequestKind::Logs, id);
    for (const auto& line : r["log"]) std::printf("%s\n", line.get<std::string>().c_str());
  } catch (const std::exception& e) {
    return report_error(e);
  }
  return kExitSuccess;
}

}  // namespace dtrain::submit
