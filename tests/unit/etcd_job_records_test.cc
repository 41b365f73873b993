// An elected controller's job records in etcd (daemon/election/etcd_job_records.h) against an
// in-process etcd: a write lands only while the writer leads by its own clock and holds the
// leader key under its lease; otherwise (its count ran out, another candidate holds the key,
// etcd cannot be reached) it throws FencedOut and nothing is written. The next leader reads
// every record back; a record too large for etcd loses its oldest log lines, not its fields.
#include <catch2/catch.hpp>

#include "daemon/controller/job_store.h"
#include "daemon/election/etcd_job_records.h"
#include "tests/unit/fake_etcd.h"

namespace {

using dtrain::daemon::EtcdJobRecords;
using dtrain::daemon::FencedOut;
using dtrain::daemon::JobRecord;
using dtrain::daemon::JobState;
using dtrain::daemon::LeaderFence;
using dtrain::test::FakeEtcd;
using std::chrono::seconds;

constexpr char kLeaderKey[] = "/t/controller/leader";

JobRecord job(uint64_t id, JobState state) {
  JobRecord j;
  j.id = id;
  j.name = "job-" + std::to_string(id);
  j.state = state;
  j.add_log("submitted");
  return j;
}

struct Etcd {
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::time_point() + seconds(9);
  FakeEtcd etcd{now};
  bool acts = true;
  // A candidate that holds the leader key: its lease.
  int64_t lead(const std::string& who) {
    const int64_t lease = etcd.grant_lease(5);
    REQUIRE(etcd.create(kLeaderKey, who, lease));
    return lease;
  }
  EtcdJobRecords records(int64_t lease) {
    return EtcdJobRecords(etcd, "/t", LeaderFence{[this] { return acts; }, kLeaderKey, lease});
  }
};

}  // namespace

TEST_CASE("a leader's records land in etcd and the next leader reads them all") {
  Etcd e;
  EtcdJobRecords mine = e.records(e.lead("c1 h:1"));
  mine.save(job(0x11, JobState::kRunning));
  mine.save(job(0x22, JobState::kQueued));
  JobRecord done = job(0x11, JobState::kSucceeded);
  done.add_log("job succeeded");
  mine.save(done);  // replaces the running one
  const auto read = e.records(0).load();
  REQUIRE(read.size() == 2);
  CHECK(read[0].id == 0x11);
  CHECK(read[0].state == JobState::kSucceeded);
  CHECK(read[0].log.size() == 2);
  CHECK(read[1].id == 0x22);
  CHECK(read[1].state == JobState::kQueued);
}

TEST_CASE("a leader whose own count of its lease ran out writes nothing") {
  Etcd e;
  EtcdJobRecords mine = e.records(e.lead("c1 h:1"));
  e.acts = false;
  CHECK_THROWS_AS(mine.save(job(0x11, JobState::kRunning)), FencedOut);
  CHECK(e.etcd.list("/t/jobs/").empty());
}

TEST_CASE("a deposed leader's write is refused by etcd once another holds the key") {
  Etcd e;
  const int64_t old_lease = e.lead("c1 h:1");
  EtcdJobRecords old_leader = e.records(old_lease);
  old_leader.save(job(0x11, JobState::kRunning));
  e.now += seconds(6);  // its lease expires in etcd (the old leader was paused, say)
  e.etcd.get(kLeaderKey);  // etcd notices
  EtcdJobRecords new_leader = e.records(e.lead("c2 h:2"));
  JobRecord adopted = job(0x11, JobState::kRunning);
  adopted.add_log("adopted by the elected controller c2");
  new_leader.save(adopted);
  // The old leader's clock says it still acts (its pause hid the time): etcd's guard refuses.
  JobRecord ended_twice = job(0x11, JobState::kFailed);
  CHECK_THROWS_AS(old_leader.save(ended_twice), FencedOut);
  const auto read = e.records(0).load();
  REQUIRE(read.size() == 1);
  CHECK(read[0].state == JobState::kRunning);
  CHECK(read[0].log.back().find("adopted by") != std::string::npos);
}

TEST_CASE("without the leader key (expired, nobody leads yet) nothing is written") {
  Etcd e;
  EtcdJobRecords mine = e.records(e.lead("c1 h:1"));
  e.etcd.erase(kLeaderKey);
  CHECK_THROWS_AS(mine.save(job(0x11, JobState::kRunning)), FencedOut);
  CHECK(e.etcd.list("/t/jobs/").empty());
}

TEST_CASE("etcd unreachable is a fenced-out write, not a lost record taken for saved") {
  Etcd e;
  EtcdJobRecords mine = e.records(e.lead("c1 h:1"));
  e.etcd.down = true;
  CHECK_THROWS_AS(mine.save(job(0x11, JobState::kRunning)), FencedOut);
  CHECK_THROWS_AS(mine.load(), dtrain::daemon::EtcdError);
}

TEST_CASE("an unreadable record in etcd is skipped, the others read") {
  Etcd e;
  const int64_t lease = e.lead("c1 h:1");
  EtcdJobRecords mine = e.records(lease);
  mine.save(job(0x11, JobState::kRunning));
  REQUIRE(e.etcd.put_if_held("/t/jobs/0000000000000099", "{not json", kLeaderKey, lease));
  const auto read = mine.load();
  REQUIRE(read.size() == 1);
  CHECK(read[0].id == 0x11);
}

TEST_CASE("a record over etcd's size keeps its fields and its newest log lines") {
  JobRecord big = job(0x11, JobState::kRunning);
  for (int i = 0; i < 4000; ++i) big.add_log("line " + std::to_string(i) + std::string(300, 'x'));
  const std::string text = dtrain::daemon::record_text_within(big, 100000);
  REQUIRE(text.size() <= 100000);
  const JobRecord back = JobRecord::from_json(dtrain::daemon::Json::parse(text));
  CHECK(back.id == 0x11);
  CHECK(back.state == JobState::kRunning);
  REQUIRE(!back.log.empty());
  CHECK(back.log.back().find("line 3999") != std::string::npos);
  REQUIRE(back.log.size() < big.log.size());
  CHECK(back.log.front() == big.log[big.log.size() - back.log.size()]);  // the newest, in order
}

TEST_CASE("a fenced-out save calls the store's hook before it unwinds") {
  Etcd e;
  const int64_t lease = e.lead("c1 h:1");
  dtrain::daemon::JobStore store(std::make_unique<EtcdJobRecords>(
      e.etcd, "/t", LeaderFence{[&e] { return e.acts; }, kLeaderKey, lease}));
  int hooked = 0;
  store.on_fenced([&hooked] { ++hooked; });
  JobRecord& kept = store.add(job(0, JobState::kQueued));
  CHECK(hooked == 0);
  e.acts = false;
  CHECK_THROWS_AS(store.save(kept), FencedOut);
  CHECK(hooked == 1);  // the controller marks itself silent here, under its lock
}
