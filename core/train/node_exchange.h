#pragma once
// How the workers of one node reach the other nodes of a cluster job (docs/architecture/core.md,
// "Sharing"). core/ has no networking: the daemon implements this over
// the transport; --local training has none.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/codec/message.h"
#include "core/train/message_bus.h"
#include "core/train/update_audit.h"

namespace dtrain::core {

class NodeExchange {
 public:
  virtual ~NodeExchange() = default;

  // This node's workers are global workers [first_worker, first_worker + local workers) of
  // total_workers: their data shards and their messages' origins.
  virtual int first_worker() const = 0;
  virtual int total_workers() const = 0;

  // Before training: messages from other nodes go to `bus` (as from no local worker) from now
  // on, including those that arrived while this node was still loading its data. Every
  // message carries the epoch and minibatch its worker was at (EncodedMessage::epoch, batch):
  // if this node is lost the others know which of its minibatches are left to cover, and
  // bus.gate() learns of every worker of a lost node (and of an admitted one).
  virtual void attach(MessageBus& bus, int64_t num_params) = 0;
  // The bus is going away (training ended, normally or by an exception): nothing may be
  // delivered to it from now on.
  virtual void detach() = 0;
  // Every message this node's workers produce, from the producing thread.
  virtual void publish(const SharedMessage& message) = 0;
  // How long a worker may wait for another's messages (training.sync) or an epoch end; by then
  // a silent node has been declared lost and is no longer waited for.
  virtual std::chrono::milliseconds wait_deadline() const = 0;
  // A worker's step has waited `waited` at the step gate (training.sync) for the messages of
  // global workers `waiting`: the stall report names their nodes. Called once per
  // stall_threshold() of waiting; a threshold of 0 reports nothing.
  virtual std::chrono::milliseconds stall_threshold() const { return std::chrono::milliseconds(0); }
  virtual void step_stalled(std::chrono::milliseconds waited, int64_t epoch, int64_t batch,
                            const std::vector<int>& waiting) {}

  // Parameter averaging (docs/architecture/core.md, "Sharing"): replaces `params` with the mean
  // over every live node of round `round` (each node calls it with its own parameters,
  // rounds in the same order). Waits with a deadline; a node that misses it is named in
  // the log and left out of the round.
  virtual void average_parameters(float* params, int64_t n, int64_t round) = 0;

  // Local steps (docs/architecture/core.md, "Local steps"): sends this node's encoded
  // pseudo-gradient of round `round`, the mean over its `workers` workers, and returns every
  // live node's of that round, this node's included, in member order: the same list on every
  // node. Waits like average_parameters; a node that misses the round is left out of it.
  // Without a cluster (--local) only this node's.
  struct PseudoGradient {
    int workers = 0;
    std::vector<EncodedMessage> messages;  // its levels (LocalStepsSpec::levels), summed
  };
  virtual std::vector<PseudoGradient> share_pseudo_gradient(int64_t round,
                                                            const PseudoGradient& mine) {
    (void)round;
    return {mine};
  }

  // Dense all-reduce (docs/architecture/core.md, "Dense all-reduce"): replaces `values` with
  // their sum over every live node for step `round` (every node calls it with its own n values,
  // rounds in increasing order), the same bits on every node. A node lost during the round is
  // counted in it on every survivor or on none; the survivors go on without it. Without a
  // cluster (--local): unchanged.
  virtual void sum_over_nodes(float* values, int64_t n, int64_t round) {
    (void)values, (void)n, (void)round;
  }
  // A step's gradient goes in this many rounds (core/train/gradient_buckets.h), its buckets
  // 0 .. buckets - 1 in the round ids' low bits: a node's minibatch of a step counts as done once
  // the step's last bucket counted it (a node lost after its first buckets has it done again by
  // the survivors). Before the first step; 1 if never called.
  virtual void set_step_buckets(int buckets) { (void)buckets; }

  // Allreduce and local steps at the end of `epoch` (agree_or_average,
  // TrainingRun::agree_on_global_state): whether every live node's `values` are
  // the same bits as this node's, agreed over the job's ring (the bits of each node's digest of
  // them, summed: a bit is the same everywhere where its sum is 0 or the nodes' count), so that
  // every survivor gets the same answer even with a node lost during it, as every step's sum.
  // Without a cluster (--local): true.
  virtual bool replicas_agree(const float* values, int64_t n, int64_t epoch) {
    (void)values, (void)n, (void)epoch;
    return true;
  }

  // Minibatches of a lost node's worker (global shard `shard` of total_workers) that nobody
  // has done this epoch: from `from_batch` to the end of the shard.
  struct Takeover {
    int shard = 0;
    int64_t from_batch = 0;
  };
  struct EpochEnd {
    double tau_sum = 0.0;  // over the workers of every node that finished the epoch
    int workers = 0;
    std::vector<std::string> lost;  // nodes declared lost so far
    // The lost nodes' remaining minibatches, the same list on every survivor; they deal them
    // out over their workers: this node's workers are [live_first_worker, + local workers) of
    // live_workers.
    std::vector<Takeover> takeover;
    int live_first_worker = 0, live_workers = 1;
    // The lost nodes' minibatches whose updates another survivor applied and this node never
    // received (in flight when their node was lost): the takeover starts after the last update
    // any survivor received, so they are not done again, and this replica lacks them.
    int64_t missed_batches = 0;
  };
  // After this node's workers finished `epoch`: waits (with a deadline; throws a UserError
  // naming the nodes it waited for) until every message the other live nodes produced up to
  // the end of their epoch is in the bus, so that the replicas agree once it is applied.
  virtual EpochEnd end_epoch(int64_t epoch, double local_tau_sum, int local_workers) = 0;
  // Parameter averaging, after the last round of `epoch` (every live replica is the same
  // then): waits until every live node got here, and admits the restarted nodes that any of
  // them knows of, the same set on every node (epoch_applied sends them these parameters).
  // Both second barriers also average the model state (batch-norm running statistics, which no
  // update or averaging round carries) over the live nodes: given this node's sum over its
  // workers, they return the mean over every live node's workers, the same bits on every node
  // (empty when `local` is).
  struct StateSum {
    std::vector<double> sum;
    int workers = 0;
  };
  virtual std::vector<float> end_averaging_epoch(int64_t epoch, const StateSum& local) = 0;
  // After this node's share of EpochEnd::takeover (possibly none; every node calls it every
  // epoch): waits like end_epoch until every live node's takeover messages are in the bus.
  virtual std::vector<float> end_takeover(int64_t epoch, const StateSum& local) = 0;

  // Which part of the test set this node evaluates at the end: part `index` of `count`, the
  // live nodes in member order, so that the parts merged cover it once.
  struct EvaluationShard {
    int index = 0, count = 1;
  };
  virtual EvaluationShard evaluation_shard() = 0;

  // A restarted node rejoining a running job (docs/architecture/core.md, "Sharing"), in either
  // mode: resume() waits for a live node's parameters as of the end of an epoch and returns true
  // with them; false for a node that starts with the job.
  struct Resume {
    int64_t next_epoch = 0;
    float tau = 0.0f;
    std::vector<float> params, state;
    std::vector<float> outer_momentum;  // local steps (empty otherwise)
    // What the live node's audited replica had applied (docs: update_audit.h); messages 0: not
    // known (a sender of an earlier release), and this replica is not audited.
    AppliedTotals applied;
  };
  virtual bool resume(Resume& resume) = 0;
  // After every update of `epoch` is applied (each epoch end): updates tagged with the next
  // epoch, held back until now, go to the bus, and if a restarted node was admitted at this
  // epoch end one live node sends it these parameters, with what its audited replica applied.
  // Local steps: the outer optimizer's momentum after this epoch, which a snapshot for a
  // restarted node carries with the parameters (call before epoch_applied).
  virtual void set_outer_momentum(const std::vector<float>& momentum) { (void)momentum; }
  virtual void epoch_applied(int64_t epoch, const float* params, int64_t num_params,
                             const float* state, int64_t num_state, float tau,
                             const AppliedTotals& applied) = 0;
};

}  // namespace dtrain::core
