#pragma once
// This node's part of one training job, as NodeAgent drives it (docs/architecture/daemon.md, "The
// node"): JobRunner in the daemon; tests/unit/node_agent_test starts fakes instead
// (JobPartFactory), to show what the agent does with the controller's frames without training
// anything.
#include <cstdint>
#include <functional>
#include <memory>

#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

class JobPart {
 public:
  virtual ~JobPart() = default;  // cancels and joins
  virtual void cancel() = 0;
  // The job dropped this part and another takes its place: it stops and reports nothing more.
  virtual void drop() = 0;
  // A member restarted and rejoins, or a node joins a vacant slot (elastic membership).
  virtual void rejoin(const RejoinMessage& rejoin) = 0;
  // Node-local data: the controller's plan (the files this node trains from).
  virtual void plan(const DataPlanMessage& plan) = 0;
  virtual bool done() const = 0;
  // The latest progress and per-worker figures (for /status and /metrics).
  virtual Json snapshot() const = 0;
};

// Queues a report for the controller (thread-safe), with the StartJob.part it answers.
using PartReport = std::function<void(const NodeReport& report, uint64_t part)>;

// Starts the part `start` asks for; `predecessor`: this node's earlier part of the same job
// (a rejoin or resume replaces it). Throws when it cannot start (the agent reports Failed).
using JobPartFactory = std::function<std::unique_ptr<JobPart>(
    uint64_t job_id, const StartMessage& start, PartReport report,
    std::unique_ptr<JobPart> predecessor)>;

}  // namespace dtrain::daemon
