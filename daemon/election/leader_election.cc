#include "daemon/election/leader_election.h"

namespace dtrain::daemon {

LeaderElection::LeaderElection(EtcdClient& etcd, ElectionConfig config)
    : etcd_(etcd), config_(std::move(config)) {}

const char* role_name(LeaderElection::Role role) {
  return role == LeaderElection::Role::kLeader ? "leader" : "standby";
}

LeaderElection::Role LeaderElection::step(Clock::time_point now) {
  error_.clear();
  const auto third = std::chrono::milliseconds(config_.lease_s * 1000 / 3);
  next_ = now + third;
  try {
    role_ = role_ == Role::kLeader ? lead(now) : watch(now);
  } catch (const EtcdError& e) {
    error_ = e.what();
    // Unrenewed, a leader acts only until its own count of the lease runs out.
    if (role_ == Role::kLeader && now >= lease_end_) {
      role_ = Role::kStandby;
      leader_.clear();  // not known without etcd
    }
  }
  if (role_ == Role::kLeader) next_ = std::min(next_, lease_end_);
  return role_;
}

LeaderElection::Role LeaderElection::lead(Clock::time_point now) {
  const int64_t left = etcd_.keep_alive(lease_);
  if (left <= 0) {  // expired before this renewal reached etcd: someone may lead now
    error_ = "the lease expired before it was renewed";
    leader_ = etcd_.get(config_.key).value_or("");
    return Role::kStandby;
  }
  lease_end_ = now + std::chrono::seconds(left);
  return Role::kLeader;
}

LeaderElection::Role LeaderElection::watch(Clock::time_point now) {
  const auto value = etcd_.get(config_.key);
  if (value) {
    leader_ = *value;
    return Role::kStandby;
  }
  return campaign(now);
}

LeaderElection::Role LeaderElection::campaign(Clock::time_point now) {
  const int64_t lease = etcd_.grant_lease(config_.lease_s);
  if (etcd_.create(config_.key, config_.self, lease)) {
    lease_ = lease;
    lease_end_ = now + std::chrono::seconds(config_.lease_s);
    leader_ = config_.self;
    return Role::kLeader;
  }
  etcd_.revoke(lease);  // another candidate was quicker
  leader_ = etcd_.get(config_.key).value_or("");
  return Role::kStandby;
}

void LeaderElection::resign() {
  if (role_ != Role::kLeader) return;
  role_ = Role::kStandby;
  try {
    etcd_.revoke(lease_);  // the key goes with it
  } catch (const EtcdError& e) {
    error_ = e.what();  // it expires by itself
  }
}

}  // namespace dtrain::daemon
