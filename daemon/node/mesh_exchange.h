#pragma once
// Gradient sharing between nodes (docs/architecture/daemon.md, "The mesh exchange") over the job's
// mesh: every message of this node's workers goes once to the mesh, tagged with the epoch and
// minibatch its worker was at, every message from another node goes to the local workers' bus. At
// an epoch end each node announces how many messages it published in that epoch and its workers'
// thresholds; a node continues once it has received that many from every live node, so that all
// replicas agree before they are evaluated (and tau is averaged over every worker of the job). A
// lost node is not waited for: the survivors do its minibatches that are left (from the last
// position its messages carried) and meet at a second barrier.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/collective/ring_rounds.h"
#include "core/train/node_exchange.h"
#include "daemon/node/mesh_port.h"
#include "daemon/node/node_collective_path.h"
#include "daemon/node/sync_election.h"
#include "daemon/protocol/mesh_payloads.h"
#include "transport/mesh/mesh_node.h"

namespace dtrain::daemon {

struct JobMember {
  uint32_t id = 0;
  std::string name;
  int workers = 1;
};

class MeshExchange : public core::NodeExchange {
 public:
  MeshExchange(uint64_t job_id, uint32_t self, const std::vector<JobMember>& members,
               std::chrono::milliseconds epoch_deadline);

  // The mesh carrying this job (JobMesh, or a test's fake); set before training starts.
  void set_mesh(MeshPort* mesh) { mesh_ = mesh; }
  // From the mesh (the endpoint's I/O thread). By value: an all-reduce part's values are read
  // in place from its bytes, kept until they are added.
  void on_message(transport::Delivery d);
  void on_loss(uint32_t lost);

  int first_worker() const override { return first_worker_; }
  int total_workers() const override { return total_workers_; }
  void attach(core::MessageBus& bus, int64_t num_params) override;
  void detach() override;
  void publish(const core::SharedMessage& message) override;
  std::chrono::milliseconds wait_deadline() const override { return epoch_deadline_; }
  std::chrono::milliseconds stall_threshold() const override {
    return on_stall ? stall_after_ : std::chrono::milliseconds(0);
  }
  void step_stalled(std::chrono::milliseconds waited, int64_t epoch, int64_t batch,
                    const std::vector<int>& waiting) override;
  EpochEnd end_epoch(int64_t epoch, double local_tau_sum, int local_workers) override;
  std::vector<float> end_takeover(int64_t epoch, const StateSum& local) override;
  std::vector<float> end_averaging_epoch(int64_t epoch, const StateSum& local) override;
  EvaluationShard evaluation_shard() override;
  // Every node broadcasts its parameters on the mesh and each computes the same mean (summed in
  // member order, so the replicas stay bit-identical); no controller on the data path.
  void average_parameters(float* params, int64_t n, int64_t round) override;
  // Local steps: every node broadcasts its encoded pseudo-gradient; the round's list is in
  // member order on every node.
  std::vector<PseudoGradient> share_pseudo_gradient(int64_t round,
                                                    const PseudoGradient& mine) override;
  // Over the ring, as every step's sum (core/train/node_exchange.h): the bits of a digest of the
  // values (BLAKE2b, replica_digest) summed.
  bool replicas_agree(const float* values, int64_t n, int64_t epoch) override;
  // mode allreduce: a ring all-reduce over the live members (core/collective/ring_rounds.h),
  // its parts sent point to point (mesh_ring.cc). `round`: core::step_round_id's; the members a
  // step counted did that minibatch (a lost one's later minibatches are the takeover's).
  void sum_over_nodes(float* values, int64_t n, int64_t round) override;
  void set_step_buckets(int buckets) override { step_buckets_ = buckets; }
  // `mode: auto`'s rehearsal (sync_rehearsal.h): ring step `index` (round id `index`, before
  // every training step's), each part waited for at most `deadline`; counts no minibatch.
  void rehearse_ring(float* values, int64_t n, int32_t index, std::chrono::milliseconds deadline);
  // The sums will be of about `n` values (mode allreduce: the model's parameters and two): so
  // much of a faster node's first parts is held before this node's first step.
  void expect_sums_of(int64_t n) { ring_->expect_values(n); }
  // How the ring's parts travel (core/collective/ring_wire.h): before the first sum.
  void set_ring_wire(const core::RingWire& wire) { ring_->set_wire(wire); }
  // GPU nodes given an NCCL id: the sums go over NCCL while it works on every node
  // (node_collective_path.h). `members`: its ranks' member ids. Before the first sum.
  void use_node_collective(NodeCollectivePath::Open open, std::vector<uint32_t> members);

  // This node is a restarted member rejoining the job; `lost`: the members lost now.
  void set_rejoining(const std::vector<uint32_t>& lost);
  // The whole job goes on from its consistent checkpoint: every node starts at `epoch`.
  void start_at(int64_t epoch) {
    std::lock_guard<std::mutex> lock(mutex_);
    first_epoch_ = current_epoch_ = epoch;
  }
  // Member `id` restarted and rejoins (the controller says so): it is not waited for until the
  // live nodes admit it at an epoch end; it joins the mesh now so that it misses nothing.
  void on_rejoin(uint32_t id);
  // Elastic membership: vacant slots (members without a node yet) are not waited for, and
  // their shards are done by the live nodes at each epoch end (the takeover), like a lost
  // node's; they are not named among the lost.
  void set_vacant(const std::vector<uint32_t>& slots);
  // A rejoining or joining member failed before it was admitted (the controller says so): it is
  // not admitted, and if it was already, it is taken as lost (the takeover covers its shards).
  void on_withdrawn(uint32_t id);
  // A node new to the job takes vacant slot `slot` (its workers are the slot's): from then on
  // like a rejoining member, admitted at the next epoch end. `where`: its data channel.
  void on_join(uint32_t slot, uint32_t id, const std::string& name,
               const transport::MeshMember& where);
  // The job's epoch count: nobody is admitted after the last epoch.
  void set_epochs(int64_t epochs);
  // Called once a rejoining node has its parameters (epoch it starts with, who sent them).
  std::function<void(int64_t epoch, const std::string& from)> on_resumed;
  // A wait at an epoch end or an averaging round passed the stall threshold: who it waits for,
  // since when, and what was last heard from them (one line, for the node's and the job's log).
  std::function<void(const std::string& line)> on_stall;
  void set_stall_threshold(std::chrono::milliseconds after) { stall_after_ = after; }
  // Reports a publish blocked on the data channel for the stall threshold, naming what
  // `backlog` lists ("node-3 (1.2 MB unacknowledged)"); a thread until destruction.
  void start_watchdog(std::function<std::vector<std::string>()> backlog);
  ~MeshExchange() override;

  bool resume(Resume& resume) override;
  void set_outer_momentum(const std::vector<float>& momentum) override {
    std::lock_guard<std::mutex> lock(mutex_);
    outer_momentum_ = momentum;
  }
  void epoch_applied(int64_t epoch, const float* params, int64_t num_params, const float* state,
                     int64_t num_state, float tau, const core::AppliedTotals& applied) override;

  // Wakes end_epoch() for good (the job was cancelled): it throws then.
  void cancel();
  // `training.sync: auto`: the job's choice, made before training (daemon/node/sync_election.h).
  SyncElection& sync_election() { return election_; }
  uint64_t messages_sent() const { return published_; }
  uint64_t bytes_sent() const;  // published and the all-reduce's parts (mesh_ring.cc)
  std::vector<std::string> lost_names();

 private:
  // changed_.wait_for(lock, epoch deadline, done), reporting a stall (on_stall) after every
  // stall threshold of it; `waiting` is what `done` leaves naming whom it still waits for.
  bool wait_reporting(std::unique_lock<std::mutex>& lock, const std::string& what,
                      const std::vector<std::string>& waiting, const std::function<bool()>& done);
  std::string stall_line(const std::string& what, std::chrono::steady_clock::time_point since,
                         const std::vector<std::string>& waiting) const;
  const JobMember* member_named(const std::string& name) const;
  std::unique_lock<std::mutex> exchange_round(PayloadBytes bytes, const std::string& what,
                                              const std::function<bool(uint32_t)>& has);
  static std::string describe(const MeshPayloadIn& in);
  struct Announcement {
    uint64_t published = 0;  // update messages tagged with the epoch
    double tau_sum = 0.0;
    int workers = 0;
    std::vector<uint32_t> joiners;  // restarted members the node knows of (phase 1)
    StateSum state;                 // phase 1
    std::vector<int64_t> last_batches, heard_updates;  // phase 0 (EpochEndPayload)
  };
  struct Snapshot {
    int64_t epoch = 0;
    float tau = 0.0f;
    std::vector<float> params, state, outer_momentum;
    core::AppliedTotals applied;
    uint32_t from = 0;
  };
  std::vector<float> outer_momentum_;  // set_outer_momentum's; under mutex_
  struct Position {
    int64_t epoch = -1, batch = -1;
  };
  using Barrier = std::pair<int64_t, int>;  // (epoch, phase): 0 own shards, 1 takeover
  // Publishes this node's announcement for `barrier`, then waits for every live node's.
  void meet(Barrier barrier, double tau_sum, int workers, const StateSum* state = nullptr);
  // After the phase-1 meet of `epoch`: the live nodes' state summed in member order.
  std::vector<float> mean_state(int64_t epoch, const StateSum& local);
  // Under mutex_: to the bus; `forwarded`: from a survivor, not counted as `origin`'s own.
  void deliver(core::EncodedMessage m, uint32_t origin, bool forwarded = false);
  // Under mutex_: whether an update tagged `at` may go to the bus now; release_pending() moves
  // the held ones that may.
  bool deliverable(const Position& at) const;
  void release_pending();
  void on_update(core::EncodedMessage m, uint32_t origin);         // under mutex_
  void on_snapshot(const SnapshotPayload& s, uint32_t origin);     // under mutex_
  void on_epoch_end(EpochEndPayload e, uint32_t origin);           // under mutex_
  // Under publish_mutex_: the next message id; throws `failure` if the mesh took nothing.
  void send(PayloadBytes bytes, const std::string& failure);
  void admit(int64_t epoch, std::vector<uint32_t> joiners);  // under mutex_
  // Of this node's joiners, those every live node announced at the barrier (under mutex_).
  std::vector<uint32_t> agreed_joiners(Barrier barrier, const std::vector<uint32_t>& mine);
  const JobMember* member(uint32_t id) const;  // null: not one of the job's members
  std::string name_of(uint32_t id) const;
  std::vector<std::string> lost_names_locked() const;  // under mutex_; vacant slots left out
  int live_first_worker(int* live_workers) const;  // under mutex_
  // A lost node's last updates (mesh_takeover.cc; docs/architecture/daemon.md, "The mesh
  // exchange"), all under mutex_ but the two phases of end_epoch. The last minibatch of `epoch`
  // whose update this node received from global worker `g` (-1: none), and how many of g's
  // updates of `epoch` it received; per worker, as the first barrier announces them.
  int64_t last_batch_heard(uint32_t g, int64_t epoch) const;
  int64_t updates_heard(uint32_t g, int64_t epoch) const;
  void announce_heard(int64_t epoch, EpochEndPayload& e);
  // The last minibatch of worker `g` that this node heard (now) or any other live node announced
  // at the first barrier of `epoch`; the most updates of g that any live node announced (this
  // node's own as announced), `first` (may be null) the first member, in member order, that
  // announced that many (0: none).
  int64_t last_batch_agreed(uint32_t g, int64_t epoch);
  int64_t most_heard(uint32_t g, int64_t epoch, uint32_t* first);
  const Announcement* phase_zero_of(uint32_t id, int64_t epoch);
  // The workers of the lost nodes that did not finish `epoch`'s shards.
  std::vector<uint32_t> unfinished_lost_workers(int64_t epoch);
  void remember(const core::SharedMessage& m);
  // The node that heard most of a lost worker's updates sends each live node those it lacks;
  // the others wait for them (not locked on entry).
  void forward_missed_updates(int64_t epoch);
  void await_forwarded_updates(int64_t epoch);
  struct Forward {
    ForwardedPayload header;  // its updates empty: they are `updates`
    std::vector<SharedUpdate> updates;
  };
  Forward forward_to(uint32_t to, int64_t epoch, uint32_t g, int64_t after, int64_t most);
  void on_forwarded(ForwardedPayload f, uint32_t origin);
  // Under mutex_: node `id` is lost (or back): in lost_, and its workers are no longer (or
  // again) waited for by the bus's step gate.
  void set_lost(uint32_t id, bool lost);
  void set_gate_live(uint32_t id, bool live);  // under mutex_; attach() syncs the gate too

  uint64_t job_id_;
  uint32_t self_;
  std::vector<JobMember> members_;
  std::chrono::milliseconds epoch_deadline_;
  std::chrono::milliseconds stall_after_{5000};
  struct Heard {
    std::chrono::steady_clock::time_point at;
    std::string what;
  };
  std::map<uint32_t, Heard> last_heard_;  // per node: its last message on the mesh
  // The watchdog of blocked publishes (start_watchdog), under watch_mutex_.
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  int publishing_ = 0;  // publishes in progress
  std::chrono::steady_clock::time_point publishing_since_;
  int64_t reported_ = 0;  // stall thresholds of the current blocked publish already reported
  bool watch_stop_ = false;
  std::function<std::vector<std::string>()> backlog_;
  std::thread watchdog_;
  int first_worker_ = 0, total_workers_ = 0;
  MeshPort* mesh_ = nullptr;

  std::mutex mutex_;
  std::condition_variable changed_;
  core::MessageBus* bus_ = nullptr;
  bool detached_ = false;  // training is over: updates are dropped, not held
  int64_t num_params_ = 0;
  struct Pending {
    uint32_t origin;
    core::EncodedMessage message;  // with its position (epoch, batch)
  };
  // Updates not yet in the bus: before attach(), while rejoining without parameters, and those
  // tagged with a later epoch than this node's (a faster node's): a snapshot for a rejoining
  // node then holds exactly the updates of the epochs up to its own.
  std::deque<Pending> pending_;
  int64_t current_epoch_ = 0;
  int64_t first_epoch_ = 0;  // a rejoined node: earlier updates are in its snapshot
  bool rejoining_ = false;
  std::optional<Snapshot> snapshot_;
  std::set<uint32_t> joining_, readmitted_;  // known restarted members; those back in the mesh
  std::set<uint32_t> admitted_since_start_;  // never in an NCCL communicator formed at the start
  std::vector<uint32_t> admitted_now_;       // admitted at the last barrier: send a snapshot
  int64_t epochs_ = 0;
  std::map<uint32_t, std::map<int64_t, uint64_t>> received_;  // updates per node and epoch
  std::map<uint32_t, Position> last_position_;  // per global worker, from its messages
  // Per global worker, its updates of the current epoch heard: how many, and the newest (up to
  // kMaxForwardedUpdates, in all at most kKeptWords words, and kKeptWordsAll over the job's
  // workers: 8 MiB and 256 MiB), to forward them to a survivor that missed them when the
  // worker's node was lost.
  struct HeardUpdates {
    int64_t epoch = -1;
    int64_t count = 0;
    std::deque<core::SharedMessage> kept;  // oldest first
    size_t kept_words = 0;
    std::set<uint64_t> forwarded_ids;  // taken from a forward: a late copy is a duplicate
  };
  static constexpr size_t kKeptWords = size_t(1) << 21, kKeptWordsAll = size_t(1) << 26;
  std::map<uint32_t, HeardUpdates> heard_updates_;
  Announcement own_phase_zero_;  // this node's first barrier's figures, as announced
  int64_t own_phase_zero_epoch_ = -1;
  std::set<std::pair<int64_t, uint32_t>> forwards_in_;  // (epoch, worker): a forward came
  std::map<uint32_t, std::map<Barrier, Announcement>> announced_;
  std::set<uint32_t> lost_;
  std::set<uint32_t> vacant_;  // elastic slots no node has taken (in lost_ too)
  std::string bad_message_;  // first malformed message, reported by end_epoch
  bool cancelled_ = false;
  std::map<int64_t, std::map<uint32_t, std::vector<float>>> rounds_;  // parameter averaging
  int64_t last_round_ = -1;  // the latest round averaged here: older ones are stale
  // Local steps: each round's pseudo-gradients by origin, for rounds after last_pseudo_round_,
  // the newest kPseudoRoundsKept rounds only.
  static constexpr size_t kPseudoRoundsKept = 8;
  std::map<int64_t, std::map<uint32_t, PseudoGradient>> pseudo_rounds_;
  int64_t last_pseudo_round_ = -1;
  void on_pseudo_gradient(PseudoGradientPayload g, uint32_t origin);

  // mode allreduce (mesh_ring.cc).
  class RingPostOnMesh;
  std::vector<uint32_t> live_members();  // in member order, this node included
  // `bytes`: what `in` views, kept with a part's values until they are added.
  void on_ring_payload(const MeshPayloadIn& in, uint32_t origin,
                       std::shared_ptr<const std::vector<uint8_t>> bytes);
  void counted_in_step(const std::vector<uint32_t>& counted, int64_t round);  // under mutex_
  std::atomic<int> step_buckets_{1};  // set_step_buckets'
  std::unique_ptr<RingPostOnMesh> ring_post_;
  std::unique_ptr<core::RingRounds> ring_;
  std::unique_ptr<NodeCollectivePath> node_collective_;  // use_node_collective's
  bool stranger_warned_ = false;  // under mutex_

  SyncElection election_;
  std::mutex publish_mutex_;  // message ids in order per origin
  // From the clock at start: a restarted node's messages must not reuse the ids its old
  // process used, or the others' reassemblers would drop them as repeats.
  uint64_t next_message_id_;
  std::map<int64_t, uint64_t> published_in_;  // per epoch
  uint64_t published_ = 0, bytes_published_ = 0;
};

}  // namespace dtrain::daemon
