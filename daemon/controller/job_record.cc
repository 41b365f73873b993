#include "daemon/controller/job_record.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/spec/job_spec_parser.h"
#include "core/util/durable_file.h"

namespace dtrain::daemon {

namespace fs = std::filesystem;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json JobRecord::to_json(bool with_log) const {
  Json j;
  j["id"] = job_id_text(id);
  j["name"] = name;
  j["state"] = job_state_name(state);
  j["mode"] = mode;
  if (!task.empty()) {
    j["task"] = task;
    j["task_request"] = task_request;
    j["task_parts"] = {{"done", part_results.size()}, {"total", part_count}};
  }
  j["nodes"] = nodes;
  j["lost_nodes"] = lost_nodes;
  j["rejoined_nodes"] = rejoined_nodes;
  j["joined_nodes"] = joined_nodes;
  j["submitted_at"] = submitted_at;
  j["started_at"] = started_at;
  j["finished_at"] = finished_at;
  j["progress"] = Json::object();
  for (const auto& [node, p] : progress) {
    j["progress"][node] = p;
    // Each node's last report stays, but an ended job has nothing left to wait for.
    if (finished() && p.is_object()) j["progress"][node].erase("eta_seconds");
  }
  j["result"] = result;
  if (const int64_t epoch = consistent_checkpoint(); epoch >= 0)
    j["checkpoint"] = {{"epoch", epoch}, {"nodes", checkpoints}};
  j["error"] = error;
  j["fix"] = fix;
  if (with_log) {
    j["spec"] = spec_text;
    j["base_dir"] = base_dir;
    j["results"] = results;
    j["failures"] = failures;
    j["log"] = log;
    j["members"] = members;
    j["checkpoints"] = checkpoints;
    j["mesh"] = mesh;
    j["resume_epoch"] = resume_epoch;
    j["parts"] = parts;
    j["min_nodes"] = min_nodes;
    if (!data_plan.is_null()) j["data_plan"] = data_plan;
    // Lists in before a controller restart: the nodes do not send them again.
    for (const auto& [node, files] : shard_lists) j["shard_lists"][node] = shard_list_json(files);
  }
  return j;
}

JobRecord JobRecord::from_json(const Json& j) {
  JobRecord r;
  parse_job_id(j.value("id", ""), r.id);
  r.name = j.value("name", "");
  // A record of a later release's state, or none: failed (it cannot be running here).
  r.state = parse_job_state(j.value("state", "")).value_or(JobState::kFailed);
  r.mode = j.value("mode", "");
  r.task = j.value("task", "");
  if (j.contains("task_request") && j["task_request"].is_object()) r.task_request = j["task_request"];
  r.spec_text = j.value("spec", "");
  r.base_dir = j.value("base_dir", "");
  r.nodes = j.value("nodes", std::vector<std::string>{});
  r.lost_nodes = j.value("lost_nodes", std::vector<std::string>{});
  r.rejoined_nodes = j.value("rejoined_nodes", std::vector<std::string>{});
  r.joined_nodes = j.value("joined_nodes", std::vector<std::string>{});
  r.min_nodes = j.value("min_nodes", int64_t(0));
  if (j.contains("data_plan") && j["data_plan"].is_object()) r.data_plan = j["data_plan"];
  if (j.contains("shard_lists") && j["shard_lists"].is_object())
    for (const auto& [node, list] : j["shard_lists"].items()) {
      std::vector<ShardFile> files;
      std::string error;
      if (read_shard_list(list, files, error)) r.shard_lists[node] = std::move(files);
    }
  r.submitted_at = j.value("submitted_at", 0.0);
  r.started_at = j.value("started_at", 0.0);
  r.finished_at = j.value("finished_at", 0.0);
  if (j.contains("progress") && j["progress"].is_object())
    for (const auto& [k, v] : j["progress"].items()) r.progress[k] = v;
  if (j.contains("results") && j["results"].is_object())
    for (const auto& [k, v] : j["results"].items()) r.results[k] = v;
  if (j.contains("failures") && j["failures"].is_object())
    for (const auto& [k, v] : j["failures"].items()) r.failures[k] = v;
  r.result = j.value("result", Json::object());
  r.error = j.value("error", "");
  r.fix = j.value("fix", "");
  r.log = j.value("log", std::vector<std::string>{});
  if (j.contains("members") && j["members"].is_array()) r.members = j["members"];
  r.mesh = j.value("mesh", "");
  r.resume_epoch = j.value("resume_epoch", int64_t(-1));
  if (j.contains("parts") && j["parts"].is_object())
    for (const auto& [k, v] : j["parts"].items())
      if (v.is_number_unsigned()) r.parts[k] = v.get<uint64_t>();
  if (j.contains("checkpoints") && j["checkpoints"].is_object())
    for (const auto& [k, v] : j["checkpoints"].items())
      if (v.is_number_integer()) r.checkpoints[k] = v.get<int64_t>();
  return r;
}

core::JobSpec JobRecord::spec() const {
  core::SpecParseOptions options;
  options.check_files = false;
  options.base_dir = base_dir;
  return core::parse_job_spec_text(spec_text, name, options);
}

std::string JobRecord::resume_hint() const {
  const int64_t epoch = consistent_checkpoint();
  if (epoch < 0) return "";
  return "dtrain-submit resume " + job_id_text(id) +
         " goes on from its checkpoint at the end of epoch " + std::to_string(epoch);
}

bool JobRecord::dropped(const std::string& node) const {
  return listed(lost_nodes, node) && !listed(rejoined_nodes, node);
}

int64_t JobRecord::consistent_checkpoint() const {
  int64_t epoch = -1;
  for (const std::string& n : nodes) {
    if (dropped(n) || listed(rejoining, n)) continue;  // not live, or not admitted yet
    auto it = checkpoints.find(n);
    // A node back in the job (or new to it) writes its first one at its first epoch end; the
    // others' files hold the job's until then.
    if (it == checkpoints.end() && (listed(rejoined_nodes, n) || listed(joined_nodes, n)))
      continue;
    if (it == checkpoints.end()) return -1;
    epoch = epoch < 0 ? it->second : std::min(epoch, it->second);
  }
  return epoch;
}

void JobRecord::add_log(const std::string& line) {
  const std::time_t t = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  log.push_back(std::string(stamp) + " " + line);
  if (log.size() > 5000) {
    log.erase(log.begin(), log.begin() + 1000);
    log_dropped += 1000;
  }
}

void save_job(const std::string& dir, const JobRecord& job) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = dir + "/" + job_id_text(job.id) + ".json";
  // Durable (fsync, rename, fsync of the folder): a crash leaves the previous record intact.
  std::string error;
  const std::string text =
      job.to_json(/*with_log=*/true).dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
  if (!core::write_file_durably(path, text, &error))
    spdlog::error("job {}: {} (disk full or read-only data_dir?)", job_id_text(job.id), error);
}

std::vector<JobRecord> load_jobs(const std::string& dir) {
  std::vector<JobRecord> jobs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      spdlog::warn("controller: skipping unreadable job file {}", entry.path().string());
      continue;
    }
    jobs.push_back(JobRecord::from_json(j));
  }
  return jobs;
}

}  // namespace dtrain::daemon
