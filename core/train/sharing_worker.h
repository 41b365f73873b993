#pragma once
// A worker in gradient-sharing mode (docs/architecture/core.md, "The update"): each step it waits
// as long as training.sync asks (docs/architecture/core.md, "Staleness and corrections"), applies
// what the other workers sent, computes its step u, encodes u against its residual, applies its own
// quantised message to its replica and publishes it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/codec/update_encoder.h"
#include "core/train/message_bus.h"
#include "core/train/step_stats.h"
#include "core/train/test_fault.h"
#include "core/train/update_audit.h"
#include "core/train/worker.h"

namespace dtrain::core {

// Sees every message once, from the thread that produced it (tests audit the invariant).
using MessageObserver = std::function<void(const EncodedMessage&)>;

class SharingWorker {
 public:
  // `index`: this worker on the node's bus; `shard` of `shards`: its data shard and the origin
  // of its messages among every worker of the job (the same as index and the node's worker
  // count when the job runs on one node).
  // `backend`: where it computes (default: the process's, the CPU; a GPU backend puts its
  // model, residual and codec on that GPU). `data`: its minibatches' part of `train` when that
  // is not its shard (Worker).
  SharingWorker(const JobSpec& job, const ExampleSource& train, const Model& initial, int index,
                int shard, int shards, MessageBus& bus, const CodecEngine& engine,
                kernels::Backend* backend = nullptr, DataShard data = {});

  // How long a step may wait for the others (sync: bsp / bounded) and what ends the wait
  // early (a stopped or cancelled job: step() then returns false). `all_local`: every worker
  // of the job is in this process, so a wait that runs out is no node's fault.
  void set_wait(std::chrono::milliseconds deadline, std::function<bool()> stopped,
                bool all_local = false) {
    wait_deadline_ = deadline;
    stopped_ = std::move(stopped);
    all_local_ = all_local;
  }
  // A step gate wait that passes `after` (and each further `after`) is reported to `stalled`
  // with how long it has waited and whom for; after 0: never.
  using Stalled = std::function<void(std::chrono::milliseconds waited, int64_t epoch,
                                     int64_t batch, const std::vector<int>& waiting)>;
  void set_stall_report(std::chrono::milliseconds after, Stalled stalled) {
    stall_after_ = after;
    stalled_ = std::move(stalled);
  }

  // Minibatch `batch` of `epoch` of its own shard; false at the end of the epoch or when a
  // wait was ended by set_wait's `stopped` (nothing done then). Iterations as in
  // Worker::compute_step. Throws UserError when the wait passes its deadline.
  bool step(int64_t own_iteration, int64_t schedule_iteration, int64_t epoch, int64_t batch);
  // One minibatch of another shard of this epoch (Worker::compute_step_on): this worker's
  // takeover step `takeover_step` (0-based), which waits as StepGate::wait_takeover says.
  bool step_on(int64_t shard, int64_t num_shards, int64_t batch, int64_t own_iteration,
               int64_t schedule_iteration, int64_t epoch, int64_t takeover_step);
  // Applies every message waiting in this worker's inbox (and any held back), in message order
  // (epoch, minibatch, origin, segment); returns how many.
  int64_t apply_received();

  Worker& worker() { return worker_; }
  UpdateEncoder& encoder() { return encoder_; }
  int index() const { return index_; }
  int shard() const { return shard_; }
  int64_t messages_applied() const { return messages_applied_; }
  // Of those, how many arrived GPU to GPU (their words already in this worker's memory).
  int64_t messages_from_gpus() const { return messages_from_gpus_; }
  void set_observer(MessageObserver observer) { observer_ = std::move(observer); }
  // Every message this worker applies (its own included) goes through `audit` too.
  void set_audit(UpdateAudit* audit) { audit_ = audit; }
  // A fault a test injects on purpose (test_fault.h).
  void set_test_fault(const TestFault& fault) { fault_ = fault; }
  // The most steps this worker was ever ahead of a live worker's messages it had applied,
  // measured from the positions the messages carry (sync's bound keeps it <= K).
  int64_t max_ahead() const { return max_ahead_; }
  // Where the last step's time went (the stats history and the timeline).
  const StepTimes& last_times() const { return times_; }

 private:
  void share_step(int64_t epoch, int64_t batch);  // encode u, apply our own message, publish
  // Under bsp, the step of minibatch `batch` applies only the messages of the minibatches before
  // it; later ones wait for the next step (held_). Every replica then follows the same
  // arithmetic whatever the timing (docs/architecture/core.md, "Staleness and corrections").
  int64_t apply_before(int64_t epoch, int64_t batch);
  int64_t apply_in_order(std::vector<Delivery> due);
  // params -= m, on whichever memory the worker's model lives; clears `momentum` where m sent.
  // `on_device`: m's words already in this worker's GPU memory (GPU-to-GPU sharing).
  void apply(const EncodedMessage& m, float* params, float* momentum = nullptr,
             const uint32_t* on_device = nullptr);
  void measure_ahead(int64_t batch);
  // gate.wait (or wait_takeover, `takeover` >= 0) until the deadline, reporting a stall at
  // every stall_after_ of it.
  bool gate_wait(StepGate& gate, int64_t epoch, int64_t batch, int64_t takeover,
                 std::vector<int>& waiting);
  // A wait ended without its messages: false when stopped, else throws UserError naming them.
  bool waited_too_long(const StepGate& gate, const std::vector<int>& waiting) const;

  Worker worker_;
  UpdateEncoder encoder_;
  MessageBus& bus_;
  const CodecEngine& engine_;
  int index_, shard_;
  CorrectionsSpec corrections_;
  int64_t messages_applied_ = 0;
  int64_t messages_from_gpus_ = 0;
  MessageObserver observer_;
  UpdateAudit* audit_ = nullptr;
  std::chrono::milliseconds wait_deadline_{600000};
  bool all_local_ = false;
  std::function<bool()> stopped_ = [] { return false; };
  std::chrono::milliseconds stall_after_{0};
  Stalled stalled_;
  // Per worker of the job: the last minibatch of the current epoch applied here (-1: none).
  int64_t epoch_ = -1;
  std::vector<int64_t> applied_batch_;
  int64_t max_ahead_ = 0;
  StepTimes times_;
  std::vector<Delivery> held_;  // bsp: arrived before their step (host words only)
  // The lead worker's injected fault, if a test set one (test_fault.h), and the messages it
  // received from other workers so far.
  TestFault fault_;
  int64_t received_ = 0;
};

// A node's workers, in order (worker 0 leads: it reports, checkpoints and is audited).
using SharingWorkers = std::vector<std::unique_ptr<SharingWorker>>;

}  // namespace dtrain::core
