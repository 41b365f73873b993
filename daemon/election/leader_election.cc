#include "daemon/election/leader_election.h"

#include <algorithm>

#include "core/util/error.h"

namespace dtrain::daemon {

LeaderElection::LeaderElection(EtcdClient& etcd, ElectionConfig config)
    : etcd_(etcd), config_(std::move(config)) {
  if (config_.lease_s < 2 || config_.lease_s > 3600)
    throw core::UserError("a controller lease of " + std::to_string(config_.lease_s) + " s",
                          "give lease_s from 2 (etcd's shortest) to 3600 seconds");
}

const char* role_name(LeaderElection::Role role) {
  return role == LeaderElection::Role::kLeader ? "leader" : "standby";
}

LeaderElection::Role LeaderElection::step(Clock::time_point now) {
  error_.clear();
  const auto third = std::chrono::milliseconds(config_.lease_s * 1000 / 3);
  next_ = now + third;
  try {
    role_ = role_ == Role::kLeader ? lead(now) : watch(now);
  } catch (const std::exception& e) {  // EtcdError, or an answer of the wrong shape
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
  const int64_t left = std::min<int64_t>(etcd_.keep_alive(lease_), config_.lease_s);
  const auto key = etcd_.get(config_.key);
  if (left <= 0 || !key || key->lease != lease_) {
    // Expired before this renewal reached etcd, or the key was deleted (by hand, a restore):
    // someone else may lead now.
    error_ = left <= 0 ? "the lease expired before it was renewed"
                       : "the leader key is no longer this candidate's";
    leader_ = key ? key->value : "";
    if (left > 0) etcd_.revoke(lease_);
    return Role::kStandby;
  }
  lease_end_ = now + std::chrono::seconds(left);
  return Role::kLeader;
}

LeaderElection::Role LeaderElection::watch(Clock::time_point now) {
  if (const auto key = etcd_.get(config_.key)) {
    leader_ = key->value;
    return Role::kStandby;
  }
  return campaign(now);
}

LeaderElection::Role LeaderElection::campaign(Clock::time_point now) {
  const int64_t lease = etcd_.grant_lease(config_.lease_s);
  bool created = false;
  try {
    created = etcd_.create(config_.key, config_.self, lease);
  } catch (const std::exception&) {
    // The key may have been created and the answer lost: give the lease back so that it does not
    // hold everyone off for a lease (best effort; otherwise it expires).
    try {
      etcd_.revoke(lease);
    } catch (const std::exception&) {
    }
    throw;
  }
  if (created) {
    lease_ = lease;
    lease_end_ = now + std::chrono::seconds(config_.lease_s);
    leader_ = config_.self;
    return Role::kLeader;
  }
  etcd_.revoke(lease);  // another candidate was quicker
  const auto key = etcd_.get(config_.key);
  leader_ = key ? key->value : "";
  return Role::kStandby;
}

void LeaderElection::resign() {
  if (role_ != Role::kLeader) return;
  role_ = Role::kStandby;
  leader_.clear();
  try {
    etcd_.revoke(lease_);  // the key goes with it
  } catch (const std::exception& e) {
    error_ = e.what();  // it expires by itself
  }
}

}  // namespace dtrain::daemon
