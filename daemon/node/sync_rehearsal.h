#pragma once
// A rehearsal of both ways to train, on the job's own mesh, before `training.sync: auto`
// chooses (docs/architecture/daemon.md, "Choosing the sync"). Every node first takes `steps`
// lock steps: a real step of the job's model, per-step sharing's own work, a step-sized
// message to every other node and a wait for theirs (per-step sharing's barrier). Then, twice,
// steps/4 (at least kMinFreeSteps) steps back to back and a round: local steps' own work and a
// round-sized message from every node at once. Its figures hold what probes from one node
// cannot see: the slowest node's step, the nodes' compute and codec work on shared cores, the
// relaying first node and the hosts' queues under traffic that does not stop
// (docs/performance.md, "The rehearsal"). For `mode: auto`, last, `ring_steps` steps each with
// a ring all-reduce of a step's values: allreduce's step as it will train.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "core/train/sync_choice.h"
#include "daemon/protocol/mesh_payloads.h"

namespace dtrain::daemon {

class SyncRehearsal {
 public:
  using Send = std::function<void(PayloadBytes bytes)>;
  using RingStep = std::function<void(int32_t index, std::chrono::milliseconds deadline)>;
  // What this node does in the rehearsal (core/train/sync_workloads.h); any may be empty.
  struct Work {
    std::function<void()> prepare;     // once, before the first step (untimed)
    std::function<void()> step;        // the model's forward and backward pass: computing
    std::function<void()> share_step;  // per-step sharing's own work after it: waiting
    std::function<void()> round;       // a round of local steps' own work
    // `mode: auto`: ring step `index`, a step's values summed over the nodes (it waits for
    // every live node, as allreduce's step does, each part at most `deadline`; throws
    // UserError when it cannot finish).
    RingStep ring_step;
  };

  // `peers`: the job's other members.
  SyncRehearsal(std::set<uint32_t> peers, Send send);

  // From the mesh's thread: another node finished a step or sent its round.
  void on_mark(uint32_t origin, const RehearsalMarkPayload& mark);
  void on_loss(uint32_t id);
  void cancel();

  // Runs `plan` with every live peer. The figures are this node's: a lock step's period (over
  // the second half), a step taken back to back, and a round's time from its last step to
  // every node's message (the mean of kRehearsalRounds); with ring steps, allreduce's step.
  // Nothing when a live peer's mark did not come within `deadline` of a wait. The ring steps
  // run whatever the phases before gave, so that every node takes part in as many ring rounds
  // (one that gave up on a mark would otherwise leave the others waiting in the ring). Throws
  // UserError when the job is cancelled.
  std::optional<core::RehearsalFigures> run(const RehearsalPlanPayload& plan,
                                            const Work& work,
                                            std::chrono::milliseconds deadline);

 private:
  using Clock = std::chrono::steady_clock;
  using Mark = std::tuple<uint32_t, bool, int32_t>;  // (origin, round, index)
  static constexpr int32_t kMinFreeSteps = 4;
  // The two phases; false when a peer's mark did not come.
  bool lock_steps(int32_t steps, uint64_t step_bytes, const Work& work,
                  std::chrono::milliseconds deadline, core::RehearsalFigures& figures);
  bool free_rounds(int32_t steps, uint64_t round_bytes, const Work& work,
                   std::chrono::milliseconds deadline, core::RehearsalFigures& figures);
  bool ring_steps(int32_t steps, const Work& work, std::chrono::milliseconds deadline,
                  core::RehearsalFigures& figures);
  // Sends this node's mark and waits for every live peer's: whether they all came by `until`.
  bool exchange(bool round, int32_t index, uint64_t padding, Clock::time_point until);

  const std::set<uint32_t> peers_;
  const Send send_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<Mark> heard_;  // bounded: peers x (kMaxRehearsalSteps + kRehearsalRounds)
  std::set<uint32_t> lost_;
  bool cancelled_ = false;
};

}  // namespace dtrain::daemon
