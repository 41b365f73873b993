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

namespace {

// Where a kept field shows: in `status --json` and the record on disk, or on disk only (what a
// restarted controller needs to go on).
enum class Shown { kStatus, kRecord };

// The record's id and state are words in JSON (job_id_text, job_state_name); the shard lists
// have their own form (shard_list.h). Each is read leniently: a record of an older release or
// an unknown word keeps the default (a state it cannot read: failed, it cannot be running here).
template <class Id>
struct AsJobId {
  Id& id;
};
template <class State>
struct AsStateWord {
  State& state;
};
template <class Kind>
struct AsTaskWord {
  Kind& kind;
};
template <class Lists>
struct AsShardLists {
  Lists& lists;
};

Json to_field(const AsJobId<const uint64_t>& f) { return job_id_text(f.id); }
Json to_field(const AsStateWord<const JobState>& f) { return job_state_name(f.state); }
Json to_field(const AsTaskWord<const TaskKind>& f) { return task_kind_word(f.kind); }
Json to_field(const AsShardLists<const std::map<std::string, std::vector<ShardFile>>>& f) {
  Json j = Json::object();
  for (const auto& [node, files] : f.lists) j[node] = shard_list_json(files);
  return j;
}
template <class T>
Json to_field(const T& value) {
  return value;
}

void from_field(const Json& j, AsJobId<uint64_t> f) { parse_job_id(j.get<std::string>(), f.id); }
void from_field(const Json& j, AsStateWord<JobState> f) {
  f.state = parse_job_state(j.get<std::string>()).value_or(JobState::kFailed);
}
void from_field(const Json& j, AsTaskWord<TaskKind> f) {
  f.kind = parse_task_kind(j.get<std::string>());
}
void from_field(const Json& j, AsShardLists<std::map<std::string, std::vector<ShardFile>>> f) {
  for (const auto& [node, list] : j.items()) {
    std::vector<ShardFile> files;
    std::string error;
    if (read_shard_list(list, files, error)) f.lists[node] = std::move(files);
  }
}
// A map of numbers: each entry read on its own (one of another type is left out).
template <class V>
void from_field(const Json& j, std::map<std::string, V>& value) {
  if (!j.is_object()) return;
  for (const auto& [key, v] : j.items()) {
    if constexpr (std::is_arithmetic_v<V>) {
      if (!v.is_number_integer() || (std::is_unsigned_v<V> && !v.is_number_unsigned())) continue;
    }
    value[key] = v.template get<V>();
  }
}
template <class T>
void from_field(const Json& j, T& value) {
  value = j.get<T>();
}

}  // namespace

// Every kept field of the record, once: its key, the member, and where it shows. to_json and
// from_json both walk this list (Record is JobRecord or const JobRecord).
template <class Record, class Visit>
void JobRecord::for_each_field(Record& r, Visit&& field) {
  using Id = std::conditional_t<std::is_const_v<Record>, const uint64_t, uint64_t>;
  using State = std::conditional_t<std::is_const_v<Record>, const JobState, JobState>;
  using Kind = std::conditional_t<std::is_const_v<Record>, const TaskKind, TaskKind>;
  using Lists = std::conditional_t<std::is_const_v<Record>,
                                   const std::map<std::string, std::vector<ShardFile>>,
                                   std::map<std::string, std::vector<ShardFile>>>;
  field("id", AsJobId<Id>{r.id}, Shown::kStatus);
  field("name", r.name, Shown::kStatus);
  field("owner", r.owner, Shown::kStatus);
  field("state", AsStateWord<State>{r.state}, Shown::kStatus);
  field("mode", r.mode, Shown::kStatus);
  field("nodes", r.nodes, Shown::kStatus);
  field("lost_nodes", r.lost_nodes, Shown::kStatus);
  field("rejoined_nodes", r.rejoined_nodes, Shown::kStatus);
  field("joined_nodes", r.joined_nodes, Shown::kStatus);
  field("submitted_at", r.submitted_at, Shown::kStatus);
  field("started_at", r.started_at, Shown::kStatus);
  field("finished_at", r.finished_at, Shown::kStatus);
  field("progress", r.progress, Shown::kStatus);
  field("result", r.result, Shown::kStatus);
  field("error", r.error, Shown::kStatus);
  field("fix", r.fix, Shown::kStatus);
  field("spec", r.spec_text, Shown::kRecord);
  field("base_dir", r.base_dir, Shown::kRecord);
  field("results", r.results, Shown::kRecord);
  field("failures", r.failures, Shown::kRecord);
  field("log", r.log, Shown::kRecord);
  field("members", r.members, Shown::kRecord);
  field("checkpoints", r.checkpoints, Shown::kRecord);
  field("mesh", r.mesh, Shown::kRecord);
  field("resume_epoch", r.resume_epoch, Shown::kRecord);
  field("parts", r.parts, Shown::kRecord);
  field("min_nodes", r.min_nodes, Shown::kRecord);
  field("data_plan", r.data_plan, Shown::kRecord);
  // Lists in before a controller restart: the nodes do not send them again.
  field("shard_lists", AsShardLists<Lists>{r.shard_lists}, Shown::kRecord);
  // A task job's (task_view adds its parts to status).
  if (r.is_task() || !std::is_const_v<Record>) {
    field("task", AsTaskWord<Kind>{r.task}, Shown::kStatus);
    field("task_request", r.task_request, Shown::kStatus);
  }
}

Json JobRecord::to_json(bool with_log) const {
  Json j = Json::object();
  for_each_field(*this, [&](const char* key, const auto& value, Shown shown) {
    if (shown == Shown::kStatus || with_log) j[key] = to_field(value);
  });
  // Views made from the fields, for status only (a restarted controller makes them anew).
  if (is_task()) j["task_parts"] = {{"done", part_results.size()}, {"total", part_count}};
  if (finished())  // each node's last report stays, but an ended job has nothing to wait for
    for (auto& [node, p] : j["progress"].items())
      if (p.is_object()) p.erase("eta_seconds");
  if (const int64_t epoch = consistent_checkpoint(); epoch >= 0)
    j["checkpoint"] = {{"epoch", epoch}, {"nodes", checkpoints}};
  return j;
}

JobRecord JobRecord::from_json(const Json& j) {
  JobRecord r;
  r.state = JobState::kFailed;  // a record without a state cannot be running here
  for_each_field(r, [&](const char* key, auto&& value, Shown) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    try {
      from_field(*it, value);
    } catch (const Json::exception&) {
      // Of another type than this release writes: the default stays.
    }
  });
  return r;
}

core::JobSpec JobRecord::spec() const {
  return core::parse_job_spec_text(spec_text, name, core::stored_spec_options(base_dir));
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

void JobRecord::add_log_once(const std::string& line) {
  if (log.empty() || log.back().find(line) == std::string::npos) add_log(line);
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
