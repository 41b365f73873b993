#pragma once
// The nodes a controller knows (docs/architecture/daemon.md, "The controller"): who registered, on
// which session, from which process (boot), whether it is alive, and the frames waiting to go to
// it. A node's registration is checked here (no two live nodes share an id; every live node has
// the same lane count). Not thread-safe: the controller calls it under its lock.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/controller/placement.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

struct Member {
  uint32_t id = 0;
  std::string name, address;
  uint16_t data_port = 0;
  uint8_t data_lanes = 1;
  uint16_t data_mtu = 1500;
  uint32_t cores = 1;
  std::vector<NodeRegistration::Gpu> gpus;
  bool alive = false;
  uint64_t session = 0;  // the live session's number (a re-registration replaces it)
  uint64_t boot_id = 0;  // of the daemon process that registered
  std::chrono::steady_clock::time_point last_heard;
  std::deque<std::vector<uint8_t>> outbox;  // frames for the node

  // What placement needs to know of it.
  NodeOffer offer() const;
  void send(std::vector<uint8_t> frame) { outbox.push_back(std::move(frame)); }
};

class Membership {
 public:
  using Clock = std::chrono::steady_clock;
  // `now`: the clock liveness is measured on (tests pass their own).
  explicit Membership(std::function<Clock::time_point()> now = Clock::now)
      : now_(std::move(now)) {}

  // Why `node` may not register now, naming the fix: another live node has its id, its data
  // channel speaks another wire version, or its lane count is outside 1..kMaxLanes, or its lanes
  // or data.mtu differ from the live nodes'.
  std::optional<Refusal> refusal(const NodeRegistration& node) const;
  // The entry of a node of this name (made on first use; names are the nodes' identity).
  Member& entry(const std::string& name);
  // Takes `node`'s registration into its entry on a fresh session: alive, heard now, its outbox
  // emptied (what it held was for the old session). Returns the entry.
  Member& admit(const NodeRegistration& node);
  // Whether `m` still holds session `session` (a newer registration replaces it).
  static bool holds(const Member& m, uint64_t session) { return m.session == session; }
  void heard(Member& m) { m.last_heard = now_(); }
  // Every live node is heard now (the controller held its lock long enough that heartbeats
  // queued up: they were not silent).
  void heard_all();
  bool silent(const Member& m, std::chrono::milliseconds timeout) const {
    return now_() - m.last_heard > timeout;
  }
  double seconds_since_heard(const Member& m) const {
    return std::chrono::duration<double>(now_() - m.last_heard).count();
  }

  Member* find(const std::string& name);
  const Member* find(const std::string& name) const;
  bool alive(const std::string& name) const;
  // Queues `frame` for node `name` if it has an entry (alive or not: a lost node that registers
  // again starts a new session with an empty outbox).
  void send(const std::string& name, const std::vector<uint8_t>& frame);
  // Queues `frame` for node `name` only while it is alive.
  void send_if_alive(const std::string& name, const std::vector<uint8_t>& frame);

  size_t alive_count() const;
  std::vector<NodeOffer> alive_offers() const;
  // The live nodes `eligible` lets in, by node id.
  std::vector<Member*> alive_by_id(const std::function<bool(const Member&)>& eligible);
  // {"<node id>": "<name>"}: stats' link rows name peers by id.
  Json node_names() const;
  template <class Visit>
  void for_each(Visit visit) const {
    for (const auto& [name, m] : members_) visit(m);
  }

 private:
  // A data setting every node of a cluster shares (data.KEY, the member's field `of`): refused
  // where it differs from a live node's, naming both, `why` and the fix.
  template <typename Value>
  std::optional<Refusal> differs_from_live(const std::string& name, const std::string& key,
                                           Value value, Value Member::*of,
                                           const std::string& why) const;
  std::function<Clock::time_point()> now_;
  std::map<std::string, Member> members_;  // by name
  uint64_t next_session_ = 1;
};

}  // namespace dtrain::daemon
