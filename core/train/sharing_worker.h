#pragma once
// A worker in gradient-sharing mode (DESIGN.md §5): each step it applies what the other
// workers sent, computes its step u, encodes u against its residual, applies its own
// quantised message to its replica and publishes the message. It never waits for anyone.
#include <cstdint>
#include <functional>
#include <memory>

#include "core/codec/update_encoder.h"
#include "core/train/message_bus.h"
#include "core/train/worker.h"

namespace dtrain::core {

// Sees every message once, from the thread that produced it (tests audit the invariant).
using MessageObserver = std::function<void(const EncodedMessage&)>;

class SharingWorker {
 public:
  // `index`: this worker on the node's bus; `shard` of `shards`: its data shard and the origin
  // of its messages among every worker of the job (the same as index and the node's worker
  // count when the job runs on one node).
  SharingWorker(const JobSpec& job, const Dataset& train, const Model& initial, int index,
                int shard, int shards, MessageBus& bus, const CodecEngine& engine);

  // One minibatch; false at the end of the epoch (nothing done then). Iterations as in
  // Worker::compute_step.
  bool step(int64_t own_iteration, int64_t schedule_iteration);
  // One minibatch of another shard of this epoch (Worker::compute_step_on).
  bool step_on(int64_t shard, int64_t num_shards, int64_t batch, int64_t own_iteration,
               int64_t schedule_iteration);
  // Applies every message waiting in this worker's inbox; returns how many.
  int64_t apply_received();

  Worker& worker() { return worker_; }
  UpdateEncoder& encoder() { return encoder_; }
  int index() const { return index_; }
  int64_t messages_applied() const { return messages_applied_; }
  void set_observer(MessageObserver observer) { observer_ = std::move(observer); }

 private:
  void share_step();  // encode u, apply our own message, publish it

  Worker worker_;
  UpdateEncoder encoder_;
  MessageBus& bus_;
  const CodecEngine& engine_;
  int index_;
  int64_t messages_applied_ = 0;
  MessageObserver observer_;
};

}  // namespace dtrain::core
