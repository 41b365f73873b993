// LeaderElection (daemon/election/leader_election.h) against an in-process etcd with leases on
// a fake clock (each call to it may take time on that clock): one leader among candidates, a
// standby takes over within two lease periods of the leader's end, a leader paused past its
// lease stops acting before anyone else starts and steps down when it resumes, nobody leads
// while etcd is down, a resignation hands over at once, a leader whose key was deleted steps
// down. At every tick of every run at most one candidate acts.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "daemon/election/leader_election.h"
#include "tests/unit/fake_etcd.h"

namespace {

using dtrain::daemon::ElectionConfig;
using dtrain::test::FakeEtcd;
using dtrain::daemon::EtcdError;
using dtrain::daemon::LeaderElection;
using Clock = LeaderElection::Clock;
using Role = LeaderElection::Role;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Candidates stepping on the fake clock, 100 ms a tick; a paused one does not step.
struct Cluster {
  Clock::time_point now = Clock::time_point() + seconds(1000);
  FakeEtcd etcd{now};
  std::vector<std::unique_ptr<LeaderElection>> candidates;
  std::vector<bool> paused;
  int most_acting = 0;
  int ticks_two_acting = 0;

  explicit Cluster(int n) {
    for (int i = 0; i < n; ++i) {
      candidates.push_back(std::make_unique<LeaderElection>(
          etcd, ElectionConfig{"/dtrain/controller/leader", "c" + std::to_string(i), 5}));
      paused.push_back(false);
    }
  }
  void run(milliseconds span) {
    for (const auto end = now + span; now < end; now += milliseconds(100)) {
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (!paused[i] && now >= candidates[i]->next_step()) candidates[i]->step(now);
        count_acting();  // after each step: its calls to etcd took time
      }
      int acting = 0;
      for (auto& k : candidates) acting += k->acts(now);
      ticks_two_acting += acting > 1;
    }
  }
  void count_acting() {
    int acting = 0;
    for (auto& c : candidates) acting += c->acts(now);
    most_acting = std::max(most_acting, acting);
  }
  int leader() const {  // the one acting, or -1
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i]->acts(now)) return int(i);
    return -1;
  }
  // Runs until someone other than `not_this` acts; the time it took.
  milliseconds until_new_leader(int not_this, milliseconds most) {
    const auto start = now;
    while (now - start < most) {
      run(milliseconds(100));
      if (leader() >= 0 && leader() != not_this) break;
    }
    return std::chrono::duration_cast<milliseconds>(now - start);
  }
};

}  // namespace

TEST_CASE("one of three candidates leads, and the others know which") {
  Cluster c(3);
  c.run(seconds(30));  // six lease periods of renewals
  REQUIRE(c.leader() == 0);
  CHECK(c.candidates[1]->role() == Role::kStandby);
  CHECK(c.candidates[1]->leader() == "c0");
  CHECK(c.candidates[2]->leader() == "c0");
  CHECK(c.most_acting == 1);
}

TEST_CASE("a crashed leader's standby takes over within two lease periods") {
  Cluster c(3);
  c.run(seconds(3));
  REQUIRE(c.leader() == 0);
  c.paused[0] = true;  // kill -9: it never steps again
  const milliseconds took = c.until_new_leader(0, seconds(20));
  INFO("took " << took.count() << " ms");
  CHECK(c.leader() > 0);
  CHECK(took <= seconds(10));
  CHECK(c.most_acting == 1);
}

TEST_CASE("a leader paused past its lease stops acting before another starts, and steps down") {
  Cluster c(2);
  c.run(seconds(3));
  REQUIRE(c.leader() == 0);
  c.paused[0] = true;  // SIGSTOP
  c.until_new_leader(0, seconds(20));
  REQUIRE(c.leader() == 1);
  CHECK_FALSE(c.candidates[0]->acts(c.now));  // fenced by its own clock, before its next step
  c.paused[0] = false;                        // SIGCONT
  c.candidates[0]->step(c.now);
  CHECK(c.candidates[0]->role() == Role::kStandby);
  CHECK(c.candidates[0]->leader() == "c1");  // at once: it read who leads now
  c.run(seconds(10));
  CHECK(c.candidates[0]->role() == Role::kStandby);
  CHECK(c.leader() == 1);
  CHECK(c.most_acting == 1);
}

TEST_CASE("without etcd nobody takes over, and the leader steps down when its lease runs out") {
  Cluster c(3);
  c.run(seconds(3));
  REQUIRE(c.leader() == 0);
  c.etcd.down = true;
  c.run(seconds(2));
  CHECK(c.leader() == 0);  // within its lease it still acts (its jobs go on)
  CHECK_FALSE(c.candidates[0]->last_error().empty());
  c.run(seconds(10));
  CHECK(c.leader() == -1);
  for (auto& k : c.candidates) CHECK(k->role() == Role::kStandby);
  c.etcd.down = false;
  c.run(seconds(10));
  CHECK(c.leader() >= 0);
  CHECK(c.most_acting == 1);
}

TEST_CASE("a leader that resigns hands over at the standbys' next step") {
  Cluster c(2);
  c.run(seconds(3));
  REQUIRE(c.leader() == 0);
  c.candidates[0]->resign();
  c.paused[0] = true;
  const milliseconds took = c.until_new_leader(0, seconds(20));
  CHECK(c.leader() == 1);
  CHECK(took <= milliseconds(1700));  // one watch period (5 s / 3), not a lease
}

TEST_CASE("with 300 ms a call to etcd, a killed or paused leader's successor never overlaps it") {
  Cluster c(3);
  c.etcd.latency = milliseconds(300);
  c.run(seconds(5));
  const int first = c.leader();
  REQUIRE(first >= 0);
  c.paused[size_t(first)] = true;  // paused: it steps again later, with its old lease
  c.until_new_leader(first, seconds(20));
  const int second = c.leader();
  REQUIRE(second >= 0);
  c.paused[size_t(first)] = false;
  c.run(seconds(10));
  CHECK(c.candidates[size_t(first)]->role() == Role::kStandby);
  CHECK(c.most_acting == 1);
}

TEST_CASE("a leader whose key was deleted steps down at its next renewal") {
  // Deleting the key by hand (etcdctl del, a restore) is the one way to two leaders: a standby
  // may create it before the old leader's next renewal sees it gone, at most lease_s / 3 later.
  Cluster c(2);
  c.run(seconds(3));
  REQUIRE(c.leader() == 0);
  c.etcd.erase("/dtrain/controller/leader");
  c.run(seconds(5));
  CHECK(c.leader() >= 0);
  CHECK((c.candidates[0]->role() == Role::kStandby) != (c.candidates[1]->role() == Role::kStandby));
  CHECK(c.ticks_two_acting <= 17);  // 5 s / 3, in 100 ms ticks
}
