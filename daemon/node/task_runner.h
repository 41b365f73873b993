#pragma once
// A cluster evaluation or inference job on this node (docs/architecture/daemon.md, "Evaluation and
// inference jobs"), on a thread of its own: it loads the model the controller shipped and the
// data (at the same path on every node) once, then evaluates or predicts each part it is given
// (core/data/part_range.h) and reports each as a PartDone: an evaluation's counts or sums, or
// the file of predictions it wrote. More parts may come while it runs (those of a lost node).
// It ends when cancelled: the controller cancels every node of the job when the job ends. A
// failure is reported by name; it never takes the daemon down.
// Node-local evaluation (`eval --cluster --shards`): it first lists the packed files it holds
// (a Shards report); the controller then makes each distinct file a part, given to one holder
// with its path here.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/data/dataset.h"
#include "core/data/part_range.h"
#include "daemon/config/daemon_config.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/shard_list.h"

namespace dtrain::daemon {

class TaskRunner {
 public:
  using Report = std::function<void(const NodeReport& report)>;

  TaskRunner(const DaemonConfig& config, uint64_t job_id, TaskMessage task, Report report);
  ~TaskRunner();  // cancels and joins

  // More parts of the same job (the model and data are loaded already); with shards, the
  // message also brings the part count and each part's file.
  void add_parts(const TaskMessage& more);
  void cancel();
  bool done() const { return done_; }
  Json snapshot() const;

 private:
  struct Loaded;
  void run();
  void check_inputs() const;
  std::shared_ptr<const core::DataRoots> confining_roots() const;
  void load(Loaded& loaded);
  PartDoneReport run_part(Loaded& loaded, uint32_t part);
  // Node-local: the part's file, read and normalised for the model.
  core::Dataset shard_data(Loaded& loaded, uint32_t part) const;
  // An evaluation's figures for data's examples [r.begin, r.end) into `done`.
  void evaluate_part(Loaded& loaded, const core::Dataset& data, core::ExampleRange r,
                     uint32_t part, PartDoneReport& done) const;
  void queue_parts(const std::vector<uint32_t>& parts, const std::vector<std::string>& files);
  void hold_while_asked(std::unique_lock<std::mutex>& lock);
  bool next_part(uint32_t& part);  // false once cancelled
  void list_shards();              // node-local: what this node holds, to the controller

  const DaemonConfig& config_;
  uint64_t job_id_;
  TaskMessage task_;
  Report report_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<uint32_t> parts_;  // to do, in order
  // Parts queued or running: a repeat is dropped. The controller sends a node its unfinished
  // parts again when it registers again; one finished here meanwhile is reported again from
  // finished_ (its report may have died with the old connection). Both bounded by part_count.
  std::set<uint32_t> seen_;
  std::map<uint32_t, PartDoneReport> finished_;
  // Node-local: the files listed here, and each part's file as the controller gave it.
  std::map<std::string, ShardFile> listed_;  // by path
  std::map<uint32_t, std::string> part_files_;
  std::optional<ShardsReport> shard_report_;  // as reported (set once, before any part can come)
  bool cancelled_ = false;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace dtrain::daemon
