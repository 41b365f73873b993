#pragma once
// Which of several controller candidates acts (docs/architecture/daemon.md, "Standby
// controllers"): each holds an etcd lease of lease_s seconds; the one whose transaction created
// the leader key (its name and address as the value) under its lease is the leader and renews
// the lease every lease_s / 3 (and checks that the key is still its own); the others read the
// key every lease_s / 3 and campaign when it is gone (its lease expired or was revoked).
// Fencing: a leader counts its lease from the moment it asked for it (grant or renewal), so its
// own clock runs out before etcd's; the step at which it has not renewed by then makes it a
// standby, which stops acting: no standby can have taken over before that moment. Without etcd
// nobody becomes leader, and a leader steps down when its lease runs out. step() is the whole
// state machine, driven by the caller's clock (tested with a fake etcd and a fake clock).
#include <chrono>
#include <cstdint>
#include <string>

#include "daemon/election/etcd_client.h"

namespace dtrain::daemon {

struct ElectionConfig {
  std::string key = "/dtrain/controller/leader";
  std::string self;  // this candidate's value for the key: "name address:port"
  int lease_s = 5;
};

class LeaderElection {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Role { kStandby, kLeader };

  LeaderElection(EtcdClient& etcd, ElectionConfig config);

  // Campaigns, renews or watches, as the role and `now` say; the role after it. Never throws:
  // what went wrong is in last_error().
  Role step(Clock::time_point now);
  Role role() const { return role_; }
  // Whether this candidate may act as the controller at `now`: leader, and within its own count
  // of its lease (checked before every act: a step may return after the count ran out).
  bool acts(Clock::time_point now) const { return role_ == Role::kLeader && now < lease_end_; }
  // Until when a leader may act, by its own clock.
  Clock::time_point acts_until() const { return lease_end_; }
  // The lease a leader holds the key under (a term's: a new lease is a new term).
  int64_t lease() const { return lease_; }
  // The leader's value as last read ("" when none was seen), this candidate's own when leader.
  const std::string& leader() const { return leader_; }
  // When to call step() next.
  Clock::time_point next_step() const { return next_; }
  // Why the last step did not do what it meant to (etcd unreachable, ...); "" when it did.
  const std::string& last_error() const { return error_; }
  // A leader gives its lease back (a clean stop: a standby need not wait for it to expire).
  void resign();

 private:
  Role lead(Clock::time_point now);
  Role watch(Clock::time_point now);
  Role campaign(Clock::time_point now);

  EtcdClient& etcd_;
  ElectionConfig config_;
  Role role_ = Role::kStandby;
  int64_t lease_ = 0;
  Clock::time_point lease_end_{};  // by this candidate's clock, counted from its request
  Clock::time_point next_{};
  std::string leader_;
  std::string error_;
};

const char* role_name(LeaderElection::Role role);

}  // namespace dtrain::daemon
