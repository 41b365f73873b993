#pragma once
// `training.sync: auto` on a cluster (docs/architecture/daemon.md, "Choosing the sync"): rank 0
// measures the job's mesh with probes (small ones for the round trip, one as large as a round's
// message for the goodput, each answered by every live node), has every node rehearse both
// ways to train (daemon/node/sync_rehearsal.h) and announces what it chose; every other node
// answers the chooser's probes and takes part in its rehearsal until the choice arrives. A member that rejoins or
// joins later hears the choice again from every live node, so the whole job trains one way.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/train/sync_choice.h"
#include "daemon/node/sync_rehearsal.h"
#include "daemon/protocol/mesh_payloads.h"

namespace dtrain::daemon {

class SyncElection {
 public:
  // Publishes a payload on the job's mesh; throws UserError when the mesh takes nothing.
  using Send = std::function<void(PayloadBytes bytes)>;
  static constexpr size_t kSmallProbeBytes = 64;
  static constexpr size_t kMinLargeProbeBytes = size_t(64) << 10;
  // A round's message is probed at its own size: one of megabytes may overrun queues that one
  // of 1 MiB fits (the wide MLP's 4.4 MB round at 1 Gbit/s: 38 MB/s, against 48 MB/s for 1 MiB;
  // docs/performance.md, "Every cell, each mode weighed at its own message size").
  static constexpr size_t kMaxLargeProbeBytes = size_t(16) << 20;
  // A probe not answered by every live node within this is sent again (a node may attach to
  // the job after the first one reached it; the transport does not resend what it delivered).
  static constexpr std::chrono::milliseconds kResendAfter{250};
  // A node taking part in the chooser's rehearsal waits at most this for each of its steps.
  static constexpr std::chrono::milliseconds kRehearsalWait{5000};

  // `peers`: the job's other members (id, name).
  SyncElection(std::map<uint32_t, std::string> peers, Send send);
  ~SyncElection();

  // From the mesh's thread.
  void on_probe(uint32_t origin, uint64_t id);
  void on_ack(uint32_t origin, uint64_t id);
  void on_choice(uint32_t origin, const SyncChoicePayload& choice);
  void on_rehearsal_plan(uint32_t origin, const RehearsalPlanPayload& plan);
  void on_rehearsal_mark(uint32_t origin, const RehearsalMarkPayload& mark);
  // A member lost (or a vacant slot): not waited for.
  void on_loss(uint32_t id);
  // A member restarted: if it was to choose and has not, it never will (its new process waits
  // to be told); a wait for it ends.
  void on_restarted(uint32_t id);
  void cancel();

  // The chooser: the slowest live peer's round trip and goodputs, of a message of
  // `round_bytes` and of one of `step_bytes` (each within
  // kMinLargeProbeBytes..kMaxLargeProbeBytes). Each probe waits at most `deadline` for the live
  // peers' answers; a peer that answered none of the small ones is left out. Throws UserError
  // when no peer answered.
  core::LinkFigures measure(std::chrono::milliseconds deadline, size_t round_bytes,
                            size_t step_bytes);
  // What this node does in a rehearsal (nothing set: the rehearsal only exchanges). Set
  // before measure() or await().
  void set_rehearsal_work(SyncRehearsal::Work work);
  // The chooser: every live node rehearses `plan` with it (each wait at most `deadline`);
  // nothing when a node's part did not come.
  std::optional<core::RehearsalFigures> rehearse(const RehearsalPlanPayload& plan,
                                                 std::chrono::milliseconds deadline);
  // The chooser: every node trains the way `choice` says (this one remembers it), sent once
  // every live peer has answered a probe (each waited for at most `deadline`).
  void announce(const core::SyncChoice& choice, std::chrono::milliseconds deadline);
  // A member rejoined or joined: it hears the choice this node knows (if any), sent from a
  // thread of its own (the caller is the node's control conversation, which must not wait on
  // the mesh).
  void repeat_for_newcomer();
  // Waits for the repeats in flight: before the mesh they use goes.
  void finish();
  // Every other node: answers the chooser's probes, and rehearses its plan, until the choice
  // arrives. `chooser` (absent
  // for a rejoining node, which any live node tells): only its probes and choice count, and its
  // loss or restart ends the wait. Throws UserError when the chooser is lost, the job cancelled,
  // or nothing came within `deadline`.
  core::SyncChoice await(std::optional<uint32_t> chooser, std::chrono::milliseconds deadline);

 private:
  using Clock = std::chrono::steady_clock;
  // One probe of `bytes`, sent again every `resend` (0: never) until every live peer answered
  // or `until`: seconds from each send to its answer, per peer.
  std::map<uint32_t, double> time_probe(size_t bytes, Clock::time_point until,
                                        std::chrono::milliseconds resend);
  // A probe of `bytes`: the slowest goodput of the peers with a round trip in `small` (0 if
  // none answered), and the largest of those peers' shortest round trips.
  std::pair<double, double> time_transfer(size_t bytes, const std::map<uint32_t, double>& small,
                                          std::chrono::milliseconds deadline);
  bool all_answered() const;  // under mutex_
  // Under mutex_: the chooser's choice heard (any live member's for a rejoining node).
  const core::SyncChoice* usable_choice(std::optional<uint32_t> chooser) const;
  void send_due_acks(std::unique_lock<std::mutex>& lock, std::optional<uint32_t> chooser);
  // Under mutex_ (released while it runs): the chooser's rehearsal, once, if it asked for one.
  void rehearse_if_asked(std::unique_lock<std::mutex>& lock, std::optional<uint32_t> chooser,
                         std::chrono::milliseconds deadline);
  std::string name_of(uint32_t id) const;

  const std::map<uint32_t, std::string> peers_;
  const Send send_;
  std::mutex mutex_;
  std::condition_variable changed_;
  static constexpr size_t kMaxAcksDue = 16;  // a flood of probes costs at most this many acks
  std::deque<std::pair<uint32_t, uint64_t>> acks_due_;  // (origin, probe id)
  uint64_t next_probe_id_ = 0;
  uint64_t series_first_id_ = 0;  // the current probe's first id; its resends follow
  std::map<uint64_t, Clock::time_point> sent_at_;  // the current probe's sends
  std::map<uint32_t, double> answered_;
  std::optional<core::SyncChoice> choice_;       // the job's, once this node knows it
  std::map<uint32_t, core::SyncChoice> heard_;  // per member, its first
  std::map<uint32_t, RehearsalPlanPayload> plans_;  // per member, its first
  bool rehearsed_ = false;
  SyncRehearsal::Work rehearsal_work_;
  SyncRehearsal rehearsal_;

  std::set<uint32_t> lost_, restarted_;
  bool cancelled_ = false;
  std::mutex repeats_mutex_;
  std::vector<std::thread> repeats_;
};

}  // namespace dtrain::daemon
