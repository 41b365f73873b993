#pragma once
// What the controller knows about one job, kept on disk (one JSON file per job under
// <data_dir>/controller/jobs/) so that a restarted controller still shows past jobs. Its JSON
// form is what `dtrain-submit status --json` prints (docs/user-guide.md, "JSON output").
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "daemon/controller/data_plan.h"
#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/job_state.h"

namespace dtrain::daemon {

struct JobRecord {
  uint64_t id = 0;
  std::string name;
  // Who submitted it (Requester::name: a client's name, or kClusterKeyHolder); empty for a job
  // of a release before owners, which only operators may act on (controller/job_access.h).
  std::string owner;
  JobState state = JobState::kQueued;
  std::string mode;
  std::string spec_text, base_dir;
  std::vector<std::string> nodes;       // chosen at start
  std::vector<std::string> lost_nodes;  // declared lost while it ran
  std::vector<std::string> rejoined_nodes;  // lost, restarted and back in the job
  std::vector<std::string> joined_nodes;    // new to the job mid-way (elastic), admitted
  int64_t min_nodes = 0;  // elastic: the job stops below this many live nodes; 0: no minimum
  // Not kept on disk (only a running job needs them): restarted nodes waiting to be admitted,
  // and the members list every node got at the start.
  std::vector<std::string> rejoining;
  // Of those, the ones whose new part is not on the job's mesh yet: the frame telling the
  // others to expect it, held until it reports Attached (Controller::announce_rejoin). Told
  // earlier, the others could admit it and send its parameters before it takes datagrams.
  std::map<std::string, std::vector<uint8_t>> unannounced;
  // Node-local data (data.train.shards): the nodes' lists until every live node sent one, then
  // the plan made from them (both on disk: a restarted controller goes on with them, and a
  // node that rejoins is sent its part of the plan again).
  std::map<std::string, std::vector<ShardFile>> shard_lists;
  Json data_plan;
  // Kept on disk for a restarted controller that adopts the job (docs/architecture/daemon.md,
  // "Controller restart"): every node's start entry (with its boot) and the mesh kind.
  Json members = Json::array();
  std::string mesh;
  // A running job found on disk by a restarted controller: its nodes are adopted as they
  // register, until adopt_until. Not on disk.
  bool adopting = false;
  std::vector<std::string> adopted;    // registered again, still training it
  std::vector<std::string> restarted;  // registered again as a new process: its part is gone
  std::chrono::steady_clock::time_point adopt_until;
  double submitted_at = 0, started_at = 0, finished_at = 0;  // Unix seconds
  std::map<std::string, Json> progress;  // latest per node
  std::map<std::string, Json> results;   // per node, at the end
  std::map<std::string, Json> failures;  // per node
  // Per node: the epoch (0-based) its newest epoch-end checkpoint resumes at.
  std::map<std::string, int64_t> checkpoints;
  // Per node: the part number of the latest Start it was sent; reports of an earlier one are
  // stale (Controller::send_start).
  std::map<std::string, uint64_t> parts;
  // A queued job that goes on from its checkpoint with this many epochs done (`dtrain-submit
  // resume`); -1 for a fresh start.
  int64_t resume_epoch = -1;
  // A cluster evaluation or inference job (docs/architecture/daemon.md, "Evaluation and inference
  // jobs"): task is Eval or Infer (Unknown for training; its word in JSON), task_request its data
  // and options (the RunTask fields, as the client sent them). The model's bytes and the parts'
  // state live only in memory: a restarted controller fails such a job (nodes cancel it as an
  // orphan).
  TaskKind task = TaskKind::Unknown;
  bool is_task() const { return task != TaskKind::Unknown; }
  Json task_request = Json::object();
  std::shared_ptr<const std::vector<uint8_t>> model;
  uint32_t part_count = 0;
  std::map<uint32_t, std::string> part_owner;  // the node each part was last given to
  std::map<uint32_t, Json> part_results;       // PartDone reports, by part
  // Node-local evaluation (task_request.shards): part_count stays 0 until every live node's
  // list is in (shard_lists); then each part is one distinct file, with every holder's path.
  std::vector<std::map<std::string, std::string>> part_holders;
  std::vector<int64_t> part_examples;
  Json result = Json::object();          // merged, once finished
  std::string error, fix;
  bool cancel_requested = false;
  std::vector<std::string> log;
  uint64_t log_dropped = 0;  // lines dropped from the front (the log keeps the newest)

  // The job's consistent checkpoint: the latest epoch every live node has a checkpoint for
  // (the replicas agree at epoch ends, so any node's file of it is the job's); -1 when some
  // live node has none.
  int64_t consistent_checkpoint() const;
  // The job's spec as submitted, its data files not checked (each node checks its own); throws
  // core::UserError when it does not parse (a record from another release).
  core::JobSpec spec() const;
  // "dtrain-submit resume ID goes on from its checkpoint at the end of epoch N", or "" without
  // a consistent checkpoint: the fix a stopped job offers.
  std::string resume_hint() const;
  // Lost and not back in the job (lost_nodes keeps a node that rejoined; rejoined_nodes says so).
  bool dropped(const std::string& node) const;
  bool finished() const { return job_ended(state); }
  // Status (`status --json`), or with_log the whole record as kept on disk; both, and from_json,
  // walk one list of the kept fields (for_each_field, job_record.cc).
  Json to_json(bool with_log = false) const;
  static JobRecord from_json(const Json& j);
  void add_log(const std::string& line);
  // add_log unless the last line says it already (a wait logged once, not at every pass).
  void add_log_once(const std::string& line);

 private:
  template <class Record, class Visit>
  static void for_each_field(Record& r, Visit&& field);
};

// A job's lists of node names (nodes, lost_nodes, rejoining, ...).
inline bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}
inline void unlist(std::vector<std::string>& names, const std::string& name) {
  names.erase(std::remove(names.begin(), names.end(), name), names.end());
}

// Writes <dir>/<id>.json atomically (temporary file, then rename).
void save_job(const std::string& dir, const JobRecord& job);
// Every job file in `dir`; unreadable files are skipped with a warning.
std::vector<JobRecord> load_jobs(const std::string& dir);

double unix_now();

}  // namespace dtrain::daemon
