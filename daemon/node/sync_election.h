#pragma once
// `training.sync: auto` on a cluster (docs/architecture/daemon.md, "Choosing the sync"): rank 0
// measures the job's mesh with probes (two small ones for the round trip, a large one for the
// goodput, each answered by every live node) and announces what it chose; every other node
// answers the probes until the choice arrives. A member that rejoins or joins later hears the
// choice again from every live node, so the whole job trains one way.
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
#include <vector>

#include "core/train/sync_choice.h"
#include "daemon/protocol/mesh_payloads.h"

namespace dtrain::daemon {

class SyncElection {
 public:
  // Publishes a payload on the job's mesh; throws UserError when the mesh takes nothing.
  using Send = std::function<void(PayloadBytes bytes)>;
  static constexpr size_t kSmallProbeBytes = 64;
  static constexpr size_t kMinLargeProbeBytes = size_t(64) << 10;
  static constexpr size_t kMaxLargeProbeBytes = size_t(1) << 20;

  // `peers`: the job's other members (id, name).
  explicit SyncElection(std::map<uint32_t, std::string> peers, Send send);

  // From the mesh's thread.
  void on_probe(uint32_t origin, uint64_t id);
  void on_ack(uint32_t origin, uint64_t id);
  void on_choice(uint32_t origin, const SyncChoicePayload& choice);
  // A member lost (or a vacant slot): not waited for.
  void on_loss(uint32_t id);
  void cancel();

  // The chooser: the slowest live peer's round trip and goodput, the goodput of a message of
  // `bytes` (within kMinLargeProbeBytes..kMaxLargeProbeBytes). Throws UserError when no peer
  // answered within `deadline`.
  core::LinkFigures measure(std::chrono::milliseconds deadline, size_t bytes);
  // The chooser: every node trains the way `choice` says (this one remembers it).
  void announce(const core::SyncChoice& choice);
  // A member rejoined or joined: it hears the choice this node knows (if any).
  void repeat_for_newcomer();
  // Every other node: answers the probes until the choice arrives. `chooser` (absent for a
  // rejoining node, which any live node tells): its loss ends the wait. Throws UserError when
  // the chooser is lost, the job cancelled, or nothing came within `deadline`.
  core::SyncChoice await(std::optional<uint32_t> chooser, std::chrono::milliseconds deadline);

 private:
  using Clock = std::chrono::steady_clock;
  // One probe of `bytes`: seconds until each live peer's answer (those that answered).
  std::map<uint32_t, double> time_probe(size_t bytes, Clock::time_point until);
  bool all_answered() const;  // under mutex_
  void send_due_acks(std::unique_lock<std::mutex>& lock);
  std::string name_of(uint32_t id) const;

  const std::map<uint32_t, std::string> peers_;
  const Send send_;
  std::mutex mutex_;
  std::condition_variable changed_;
  static constexpr size_t kMaxAcksDue = 16;  // a flood of probes costs at most this many acks
  std::deque<uint64_t> acks_due_;
  uint64_t probe_id_ = 0;
  Clock::time_point probe_sent_;
  std::map<uint32_t, double> answered_;
  std::optional<core::SyncChoice> choice_;
  std::set<uint32_t> lost_;
  bool cancelled_ = false;
};

}  // namespace dtrain::daemon
