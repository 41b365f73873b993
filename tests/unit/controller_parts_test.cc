// The controller's collaborators, each on its own with fakes (daemon/controller/controller.h):
// membership on a fake clock, the job store on a temporary folder, the scheduler's choices, the
// training lifecycle fed reports as nodes would send them (no sockets), and request handling.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "daemon/controller/fair_order.h"
#include "daemon/controller/job_store.h"
#include "daemon/controller/membership.h"
#include "daemon/controller/request_handler.h"
#include "daemon/controller/scheduler.h"
#include "daemon/controller/stats_store.h"
#include "daemon/controller/task_jobs.h"
#include "daemon/controller/training_jobs.h"
#include "daemon/protocol/node_reports.h"
#include "daemon/protocol/requester.h"
#include "tests/test_util.h"
#include "daemon/protocol/control_frames.h"

namespace dtrain::daemon {
namespace {

using namespace std::chrono_literals;
using testing::temp_dir;

// Running jobs holding whole nodes: node -> job.
NodeUse whole_on(const std::map<std::string, uint64_t>& holders) {
  NodeUse use;
  for (const auto& [node, job] : holders) use.holds[node].push_back(NodeHold{job});
  return use;
}
NodeUse whole_nodes(const std::vector<std::string>& nodes) {
  std::map<std::string, uint64_t> holders;
  for (const std::string& n : nodes) holders[n] = 99;
  return whole_on(holders);
}

NodeRegistration node(const std::string& name, uint32_t id, uint8_t lanes = 1) {
  NodeRegistration n;
  n.node_id = id;
  n.boot_id = 1000 + id;
  n.name = name;
  n.address = "127.0.0.1";
  n.data_port = uint16_t(40000 + id);
  n.data_lanes = lanes;
  n.cores = 4;
  return n;
}

// A clock the test moves by hand.
struct FakeClock {
  Membership::Clock::time_point now{std::chrono::seconds(1000)};
  std::function<Membership::Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

// The kinds of the frames waiting for `m`, and the frames themselves.
std::vector<JobKind> kinds(const Member& m) {
  std::vector<JobKind> out;
  for (const auto& frame : m.outbox) {
    JobMessageIn in;
    if (read_job_message(frame, in)) out.push_back(in.kind);
  }
  return out;
}

// A report as the node's session hands it to the controller (through the wire's reader).
JobMessageIn report(uint64_t job_id, const NodeReport& r, uint64_t part) {
  JobMessageIn in;
  REQUIRE(read_job_message(report_frame(job_id, r, part), in));
  return in;
}

const char* kSpec =
    "name: t\nmodel:\n  input: [4]\n  layers:\n    - output: {units: 2, activation: softmax, "
    "loss: mcxent}\ndata:\n  train: {format: csv, path: none.csv}\ntraining:\n  epochs: 1\n";

}  // namespace

// ---- Membership ----

TEST_CASE("membership refuses a second live node with the same id or another lane count") {
  FakeClock clock;
  Membership members(clock.fn());
  members.admit(node("a", 1, 2));
  REQUIRE_FALSE(members.refusal(node("a", 1, 2)));  // itself, again
  auto same_id = members.refusal(node("b", 1, 2));
  REQUIRE(same_id);
  CHECK(same_id->error.find("same node id (1) as node a") != std::string::npos);
  CHECK(same_id->fix.find("delete its data_dir/node_id") != std::string::npos);
  auto lanes = members.refusal(node("b", 2, 4));
  REQUIRE(lanes);
  CHECK(lanes->error.find("data.lanes 4, and node a (alive) has 2") != std::string::npos);
  CHECK(lanes->fix.find("data.lanes: 2") != std::string::npos);
  CHECK(members.refusal(node("b", 2, 0)));  // outside 1..kMaxLanes
  members.entry("a").alive = false;  // lost: its id and lanes bind nobody
  CHECK_FALSE(members.refusal(node("b", 1, 4)));
}

TEST_CASE("membership: each registration is a new session with an empty outbox; silence is "
          "measured on its clock") {
  FakeClock clock;
  Membership members(clock.fn());
  Member& a = members.admit(node("a", 1));
  const uint64_t first = a.session;
  a.send({1, 2, 3});
  members.admit(node("a", 1));
  CHECK(a.session != first);
  CHECK_FALSE(Membership::holds(a, first));
  CHECK(a.outbox.empty());
  clock.now += 9s;
  CHECK_FALSE(members.silent(a, 10s));
  clock.now += 2s;
  CHECK(members.silent(a, 10s));
  members.heard(a);
  CHECK_FALSE(members.silent(a, 10s));
  members.admit(node("c", 3));
  members.admit(node("b", 2));
  members.entry("c").alive = false;
  std::vector<std::string> order;
  for (Member* m : members.alive_by_id([](const Member&) { return true; }))
    order.push_back(m->name);
  CHECK(order == std::vector<std::string>{"a", "b"});
  CHECK(members.alive_count() == 2);
}

// ---- JobStore ----

TEST_CASE("the job store gives fresh ids, keeps records durably and recovers them") {
  const std::string dir = temp_dir();
  uint64_t queued = 0, running = 0, second_running = 0, task = 0;
  {
    JobStore store(dir);
    JobRecord q;
    q.name = "queued";
    queued = store.add(q).id;
    JobRecord r;
    r.name = "running";
    r.state = JobState::kRunning;
    running = store.add(r).id;
    JobRecord r2 = r;
    second_running = store.add(r2).id;
    JobRecord t;
    t.task = TaskKind::Eval;
    task = store.add(t).id;
    CHECK(queued != 0);
    CHECK(std::set<uint64_t>{queued, running, second_running, task}.size() == 4);
    CHECK(std::filesystem::exists(dir + "/controller/jobs/" + job_id_text(queued) + ".json"));
  }
  JobStore again(dir);
  const JobStore::Recovered found = again.recover();
  CHECK(found.queued.size() == 1);  // the task failed instead of queueing again
  CHECK(found.queued[0] == queued);
  // Several jobs run at once: every running one goes on (adopted), in the order submitted.
  CHECK(found.running == std::vector<uint64_t>{running, second_running});
  CHECK(again.find(second_running)->state == JobState::kRunning);
  CHECK(again.find(task)->state == JobState::kFailed);
  CHECK(again.find(task)->error == "the controller restarted before the eval job ended");
  JobStore third(dir);  // the failures were saved
  third.recover();
  CHECK(third.find(task)->state == JobState::kFailed);
}

TEST_CASE("a job record is written from one field list and read back whole") {
  JobRecord r;
  r.id = 0x1234abcd;
  r.name = "n";
  r.owner = "alice";
  r.state = JobState::kRunning;
  r.mode = "gradient_sharing";
  r.nodes = {"a", "b"};
  r.lost_nodes = {"b"};
  r.progress["a"] = {{"epoch", 2}, {"eta_seconds", 5}};
  r.results["a"] = {{"rank", 0}};
  r.checkpoints["a"] = 3;
  r.parts["a"] = 77;
  r.resume_epoch = 2;
  r.min_nodes = 2;
  r.spec_text = kSpec;
  r.log = {"one", "two"};
  const Json saved = r.to_json(/*with_log=*/true);
  const JobRecord back = JobRecord::from_json(saved);
  CHECK(back.to_json(true) == saved);
  CHECK(back.id == r.id);
  CHECK(back.state == JobState::kRunning);
  CHECK(back.parts.at("a") == 77);
  CHECK(back.owner == "alice");
  CHECK(r.to_json().at("owner") == "alice");  // status shows it
  // status leaves the record-only fields out
  const Json status = r.to_json();
  CHECK_FALSE(status.contains("spec"));
  CHECK(status["progress"]["a"].contains("eta_seconds"));  // still running
  CHECK(status["checkpoint"]["epoch"] == 3);  // b is dropped; a, the one live node, has epoch 3
  Json odd = saved;
  odd["state"] = "exploded";  // a later release's word
  odd["nodes"] = 5;           // another type: the default stays
  const JobRecord read = JobRecord::from_json(odd);
  CHECK(read.state == JobState::kFailed);
  CHECK(read.nodes.empty());
  CHECK(read.name == "n");
}

// ---- Scheduler ----

TEST_CASE("the scheduler keeps the queue in order and several jobs running") {
  Scheduler s;
  s.enqueue(1, "alice");
  s.enqueue(2, "alice");
  s.enqueue(3, "alice");
  CHECK(s.offer_order() == std::vector<uint64_t>{1, 2, 3});
  s.start(1);
  s.start(2);  // several at once
  CHECK(s.running_ids() == std::vector<uint64_t>{1, 2});
  CHECK(s.running_per_owner() == std::map<std::string, int64_t>{{"alice", 2}});
  s.enqueue(4, "bob");
  s.remove(3);  // cancelled while queued
  CHECK(s.offer_order() == std::vector<uint64_t>{4});
  s.ended(1);
  CHECK_FALSE(s.running(1));
  CHECK(s.running(2));
}

TEST_CASE("the queue is fair between owners: the one holding fewer running jobs goes first") {
  // alice queued ten jobs before bob's one; carol's came last.
  std::vector<QueuedJob> queue;
  for (uint64_t id = 1; id <= 10; ++id) queue.push_back({id, "alice"});
  queue.push_back({11, "bob"});
  queue.push_back({12, "carol"});
  // Nobody runs anything: each owner's oldest in turn, then alice's others.
  CHECK(fair_order(queue, {}) ==
        std::vector<uint64_t>{1, 11, 12, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  // alice runs two already: bob and carol go before any more of hers.
  const std::vector<uint64_t> after = fair_order(queue, {{"alice", 2}});
  CHECK(std::vector<uint64_t>(after.begin(), after.begin() + 3) ==
        std::vector<uint64_t>{11, 12, 1});
}

TEST_CASE("an owner's limit of running jobs counts the jobs it runs, not the ones it queued") {
  SchedulingLimits limits;
  limits.defaults.running_jobs = 1;
  CHECK(may_run_another("bob", {}, limits));
  CHECK(may_run_another("bob", {{"alice", 1}}, limits));
  CHECK_FALSE(may_run_another("alice", {{"alice", 1}}, limits));
  // Named users' limits replace the default's; the cluster key's holder has none.
  limits.users["alice"].running_jobs = 3;
  CHECK(may_run_another("alice", {{"alice", 2}}, limits));
  CHECK_FALSE(may_run_another("alice", {{"alice", 3}}, limits));
  CHECK(may_run_another(kClusterKeyHolder, {{kClusterKeyHolder, 50}}, limits));
  CHECK(may_run_another("carol", {{"carol", 9}}, SchedulingLimits{}));  // no limits: no bound
}

TEST_CASE("a training job waits for its nodes, GPU jobs for nodes with a GPU; elastic takes up "
          "to its max") {
  FakeClock clock;
  Membership members(clock.fn());
  members.admit(node("c", 30));
  members.admit(node("a", 10));
  core::TrainingSpec t;
  t.nodes = 3;
  NodeChoice wait = choose_training_nodes(t, members, NodeUse{});
  CHECK(wait.nodes.empty());
  CHECK(wait.waiting == "waiting for 3 nodes (2 registered)");
  NodeRegistration b = node("b", 20);
  b.gpus.push_back({0, "H100", 80ull << 30});
  members.admit(b);
  NodeChoice go = choose_training_nodes(t, members, NodeUse{});
  REQUIRE(go.nodes.size() == 3);
  CHECK(go.nodes[0]->name == "a");  // by node id
  CHECK(go.nodes[2]->name == "c");
  t.device = dtrain::core::Device::kGpu;
  t.nodes = 2;
  CHECK(choose_training_nodes(t, members, NodeUse{}).waiting ==
        "waiting for 2 nodes with a GPU (1 of 3 registered have one)");
  t.device = dtrain::core::Device::kCpu;
  t.nodes = 1;
  t.nodes_max = 2;
  CHECK(choose_training_nodes(t, members, NodeUse{}).nodes.size() == 2);
}

TEST_CASE("a job starts on free nodes only; one that would fit once others end keeps its place") {
  FakeClock clock;
  Membership members(clock.fn());
  for (const auto& [name, id] : {std::pair<std::string, uint32_t>{"a", 10}, {"b", 20},
                                 {"c", 30}, {"d", 40}})
    members.admit(node(name, id));
  core::TrainingSpec t;
  t.nodes = 2;
  const NodeChoice beside = choose_training_nodes(t, members, whole_nodes({"a", "b"}));
  REQUIRE(beside.nodes.size() == 2);
  CHECK(beside.nodes[0]->name == "c");
  CHECK(beside.nodes[1]->name == "d");
  t.nodes = 3;
  const NodeChoice held = choose_training_nodes(t, members, whole_nodes({"a", "b"}));
  CHECK(held.nodes.empty());
  CHECK(held.waiting == "waiting for 3 nodes (4 registered, 2 of them busy with other jobs)");
  CHECK(held.waits_for_busy);  // it fits once they end: the jobs after it wait behind it
  t.nodes = 5;
  const NodeChoice never = choose_training_nodes(t, members, whole_nodes({"a"}));
  CHECK_FALSE(never.waits_for_busy);  // more than are registered: the others may pass it
  t.nodes = 0;  // all: every eligible node, so it waits until all four are free
  CHECK(choose_training_nodes(t, members, whole_nodes({"d"})).waits_for_busy);
  CHECK(choose_training_nodes(t, members, NodeUse{}).nodes.size() == 4);
  CHECK(choose_task_nodes(0, members, {"a", "c"}).nodes.size() == 2);  // every free one
  CHECK(choose_task_nodes(3, members, {"a", "c"}).waits_for_busy);
}

TEST_CASE("shares of a node: jobs that ask for cores (and GPUs) run side by side, whole-node "
          "jobs wait for them") {
  FakeClock clock;
  Membership members(clock.fn());
  members.admit(node("a", 10));  // 4 cores each
  members.admit(node("b", 20));
  core::TrainingSpec two_cores;
  two_cores.nodes = 2;
  two_cores.cores_per_node = 2;
  // Job 1 holds 2 cores of a and b: job 2 (2 cores) fits beside it on both.
  NodeUse use;
  for (const char* n : {"a", "b"}) use.holds[n].push_back(NodeHold{1, false, 2, {}});
  const NodeChoice beside = choose_training_nodes(two_cores, members, use);
  REQUIRE(beside.nodes.size() == 2);
  CHECK(beside.nodes[0]->name == "a");
  // With job 2 there too, the nodes are full: a third share waits for busy nodes.
  for (const char* n : {"a", "b"}) use.holds[n].push_back(NodeHold{2, false, 2, {}});
  core::TrainingSpec one_core = two_cores;
  one_core.cores_per_node = 1;
  const NodeChoice full = choose_training_nodes(one_core, members, use);
  CHECK(full.nodes.empty());
  CHECK(full.waits_for_busy);
  CHECK(full.waiting == "waiting for 2 nodes (2 registered, 2 of them busy with other jobs)");
  // A job of whole nodes waits while any share runs there; a share waits for a whole-node job.
  use.holds["b"].clear();
  use.holds["a"].pop_back();
  use.holds.erase("b");
  core::TrainingSpec whole;
  whole.nodes = 2;
  CHECK(choose_training_nodes(whole, members, use).waits_for_busy);
  one_core.nodes = 1;
  const NodeChoice on_b = choose_training_nodes(one_core, members, whole_on({{"a", 7}}));
  REQUIRE(on_b.nodes.size() == 1);
  CHECK(on_b.nodes[0]->name == "b");
  // More cores than a node has: never eligible, refused at submit by name.
  core::TrainingSpec greedy = two_cores;
  greedy.cores_per_node = 8;
  const auto refusal = refuse_placement(greedy, {{"a", 4, {}}, {"b", 4, {}}});
  REQUIRE(refusal);
  CHECK(refusal->error == "the job asks for 8 cores on each of 2 nodes, but 0 of the 2 "
                          "registered nodes have that many");
}

TEST_CASE("GPU shares take GPUs no other job holds, and a job's old place is free again only "
          "when its very GPUs are") {
  const NodeOffer g{"g", 16, {0, 1, 2}};
  core::TrainingSpec one_gpu;
  one_gpu.gpus_per_node = 1;
  one_gpu.device = core::Device::kGpu;
  NodeUse use;
  use.holds["g"].push_back(NodeHold{1, false, 1, {0}});
  use.holds["g"].push_back(NodeHold{2, false, 4, {2}});
  const NodeOffer left = use.free_part(g);
  CHECK(left.cores == 11);
  CHECK(left.gpus == std::vector<uint32_t>{1});
  const NodePlacement at = place_on(one_gpu, left);
  CHECK(at.gpu);
  CHECK(at.gpus == std::vector<uint32_t>{1});
  CHECK(at.cores == 1);
  CHECK(at.workers == 1);
  CHECK(use.fits(g, demand_of(one_gpu)));
  core::TrainingSpec two_gpus = one_gpu;
  two_gpus.gpus_per_node = 2;
  CHECK_FALSE(use.fits(g, demand_of(two_gpus)));
  // Job 1 lost g and comes back (a rejoin, a resume): GPU 0 is free again only if no one took it.
  const NodeHold back = hold_of(1, Json{{"name", "g"}, {"cores", 1}, {"gpus", {0}}});
  use.holds["g"].erase(use.holds["g"].begin());
  CHECK(use.room_for(g, back));
  use.holds["g"].push_back(NodeHold{3, false, 1, {0}});
  CHECK_FALSE(use.room_for(g, back));
  // An entry without cores (a release before shares) holds the whole node.
  CHECK(hold_of(4, Json{{"name", "g"}, {"gpus", {0, 1}}}).whole);
}

TEST_CASE("two jobs with cores_per_node start on the same nodes, each sent its cores") {
  FakeClock clock;
  DaemonConfig config;
  const std::string dir = temp_dir();
  JobStore store(dir);
  Membership members(clock.fn());
  members.admit(node("a", 10));
  members.admit(node("b", 20));
  Scheduler scheduler;
  StatsStore stats(dir + "/stats.db");
  TrainingJobs training(config, store, members, scheduler, stats, [](JobRecord&) {}, [] {});
  std::vector<JobRecord*> jobs;
  for (const char* name : {"x", "y", "z"}) {
    JobRecord r;
    r.name = name;
    r.owner = "alice";
    r.spec_text = std::string(kSpec) + "  cores_per_node: 2\n";
    jobs.push_back(&store.add(r));
    scheduler.enqueue(jobs.back()->id, "alice");
  }
  CHECK(training.start(*jobs[0], node_use(store, scheduler.running_ids())) ==
        StartOutcome::kStarted);
  CHECK(training.start(*jobs[1], node_use(store, scheduler.running_ids())) ==
        StartOutcome::kStarted);
  CHECK(jobs[1]->nodes == std::vector<std::string>{"a", "b"});
  CHECK(jobs[1]->members[0].value("cores", 0) == 2);
  const NodeUse use = node_use(store, scheduler.running_ids());
  const std::vector<uint64_t> on_a = use.jobs_on("a");
  CHECK(std::set<uint64_t>(on_a.begin(), on_a.end()) ==
        std::set<uint64_t>{jobs[0]->id, jobs[1]->id});
  CHECK(training.start(*jobs[2], use) == StartOutcome::kWaitsForBusy);
  // Each node's Start names its cores: the node computes on that many threads.
  const auto& frames = members.entry("a").outbox;
  REQUIRE_FALSE(frames.empty());
  JobMessageIn in;
  REQUIRE(read_job_message(frames.back(), in));
  REQUIRE(in.kind == JobKind::Start);
  CHECK(in.start.members[0].cores == 2);
  // A share no node has (over training.cores_per_node's bound) is not a Start a node takes.
  in.start.members[0].cores = kMaxShareCores + 1;
  JobMessageIn refused;
  CHECK_FALSE(read_job_message(start_frame(jobs[0]->id, in.start), refused));
}

TEST_CASE("an elastic share takes a joining node for its share, not the whole node") {
  FakeClock clock;
  DaemonConfig config;
  const std::string dir = temp_dir();
  JobStore store(dir);
  Membership members(clock.fn());
  members.admit(node("a", 10));  // 4 cores each
  members.admit(node("b", 20));
  Scheduler scheduler;
  StatsStore stats(dir + "/stats.db");
  TrainingJobs training(config, store, members, scheduler, stats, [](JobRecord&) {}, [] {});
  auto add = [&](const char* name, const std::string& training_keys) -> JobRecord& {
    JobRecord r;
    r.name = name;
    r.owner = "alice";
    r.spec_text = std::string(kSpec) + training_keys;
    JobRecord& job = store.add(r);
    scheduler.enqueue(job.id, "alice");
    return job;
  };
  JobRecord& big = add("big", "  nodes: 1\n  cores_per_node: 3\n");
  REQUIRE(training.start(big, node_use(store, scheduler.running_ids())) == StartOutcome::kStarted);
  JobRecord& elastic = add("elastic", "  nodes: {min: 1, max: 2}\n  cores_per_node: 2\n");
  REQUIRE(training.start(elastic, node_use(store, scheduler.running_ids())) ==
          StartOutcome::kStarted);
  CHECK(elastic.nodes == std::vector<std::string>{"b"});  // a has 1 core left
  members.admit(node("c", 30));
  training.on_registered(members.entry("c"), scheduler.running_ids());
  REQUIRE(elastic.nodes == std::vector<std::string>{"b", "c"});
  CHECK(elastic.members[1].value("cores", 0) == 2);
  const NodeUse use = node_use(store, scheduler.running_ids());
  REQUIRE(use.holds.at("c").size() == 1);
  CHECK_FALSE(use.holds.at("c")[0].whole);
  CHECK(use.free_part({"c", 4, {}}).cores == 2);  // room for another share beside it
}

TEST_CASE("a job its owner's node limit holds back waits without holding the queue") {
  FakeClock clock;
  DaemonConfig config;
  config.limits.defaults.nodes = 1;
  const std::string dir = temp_dir();
  JobStore store(dir);
  Membership members(clock.fn());
  for (const auto& [name, id] : {std::pair<std::string, uint32_t>{"a", 10}, {"b", 20},
                                 {"c", 30}, {"d", 40}})
    members.admit(node(name, id));
  Scheduler scheduler;
  StatsStore stats(dir + "/stats.db");
  TrainingJobs training(config, store, members, scheduler, stats, [](JobRecord&) {}, [] {});
  JobRecord r;
  r.name = "t";
  r.owner = "bob";
  r.spec_text = std::string(kSpec) + "  nodes: 1\n";
  JobRecord& job = store.add(r);
  scheduler.enqueue(job.id, "bob");
  NodeUse use = whole_on({{"a", 99}, {"b", 99}, {"c", 98}, {"d", 97}});
  use.held_by_owner = {{"bob", 1}};  // his other job holds c; every node is busy
  // Waiting for his own limit, not for busy nodes: the jobs queued after it may pass (it
  // would keep its place, holding them, were it waiting for the busy nodes).
  CHECK(training.start(job, use) == StartOutcome::kWaits);
  CHECK_THAT(job.log.back(), Catch::Contains("bob's running jobs hold 1 nodes of the 1 they may"));
  use.holds.erase("c");
  use.held_by_owner.clear();  // that job ended
  CHECK(training.start(job, use) == StartOutcome::kStarted);
  CHECK(job.nodes == std::vector<std::string>{"c"});
  // Every node (`all`) is more than a node limit allows: refused at submit, naming it.
  core::TrainingSpec all;
  CHECK_THROWS_WITH(training.refuse_over_limits(all, "bob"),
                    Catch::Contains("asks for every node (training.nodes: all)"));
  CHECK_NOTHROW(training.refuse_over_limits(all, kClusterKeyHolder));
}

// ---- TrainingJobs: the reports move a job; the result guard ----

// Records what TrainingJobs asks of where NCCL ids are made.
struct RecordedIds : NcclIds {
  std::vector<std::string>* calls;
  explicit RecordedIds(std::vector<std::string>* c) : calls(c) {}
  std::vector<uint8_t> make(uint64_t job, std::string*) override {
    calls->push_back("make " + std::to_string(job));
    return std::vector<uint8_t>(128, 7);
  }
  void release(uint64_t job) override { calls->push_back("release " + std::to_string(job)); }
};

struct TrainingFixture {
  FakeClock clock;
  DaemonConfig config;
  std::string dir = temp_dir();
  JobStore store{dir};
  Membership members{clock.fn()};
  Scheduler scheduler;
  StatsStore stats{dir + "/stats.db"};
  std::vector<JobState> closed;
  std::vector<std::string> nccl_calls;
  TrainingJobs training{config, store, members, scheduler, stats,
                        [this](JobRecord& job) {
                          closed.push_back(job.state);
                          scheduler.ended(job.id);
                        },
                        [] {}, std::make_unique<RecordedIds>(&nccl_calls)};
  JobRecord* job = nullptr;

  // `training`: lines added to kSpec's training section; `gpus`: each node has one.
  explicit TrainingFixture(int nodes, const std::string& training_lines = "",
                           bool gpus = false) {
    for (int i = 0; i < nodes; ++i) {
      NodeRegistration n = node("node-" + std::to_string(i), 100 + i);
      if (gpus) n.gpus.push_back({0, "H100", 80ull << 30});
      members.admit(n);
    }
    JobRecord r;
    r.name = "t";
    r.mode = training_lines.empty() ? "gradient_sharing" : "allreduce";
    r.spec_text = kSpec + training_lines;
    job = &store.add(r);
    scheduler.enqueue(job->id, "alice");
    training.start(*job, NodeUse{});
  }
  uint64_t part_of(const std::string& n) { return job->parts.at(n); }
  // A finished node's result: its applied updates and a parameter sample.
  void finish(const std::string& n, int64_t messages, uint64_t digest,
              std::vector<float> sample = {1.f, 2.f, 3.f}) {
    ResultReport r;
    r.rank = uint32_t(std::stoi(n.substr(5)));
    r.applied = ResultReport::Applied{messages, digest, -1};
    r.params_sample = std::move(sample);
    r.classes = -1;  // no chance check
    training.on_report(*job, members.entry(n), report(job->id, r, part_of(n)));
  }
};

TEST_CASE("a training job starts on its nodes with a Start each, and succeeds when every node "
          "applied the same updates") {
  TrainingFixture f(3);
  REQUIRE(f.job->state == JobState::kRunning);
  for (int i = 0; i < 3; ++i)
    CHECK(kinds(f.members.entry("node-" + std::to_string(i))) ==
          std::vector<JobKind>{JobKind::Start});
  f.finish("node-0", 500, 0xabc);
  f.finish("node-1", 500, 0xabc);
  CHECK(f.closed.empty());  // node-2 has not finished
  f.finish("node-2", 500, 0xabc);
  REQUIRE(f.closed == std::vector<JobState>{JobState::kSucceeded});
  CHECK(f.job->result["applied_updates"].size() == 3);
}

TEST_CASE("a GPU allreduce job's NCCL id is made as it starts and released when it ends") {
  TrainingFixture f(2, "  mode: allreduce\n  device: gpu\n", true);
  REQUIRE(f.job->state == JobState::kRunning);
  const std::string id = std::to_string(f.job->id);
  REQUIRE(f.nccl_calls == std::vector<std::string>{"make " + id});
  CHECK_THAT(f.job->log.back(), Catch::Contains("the nodes sum over NCCL between them"));
  // One node fails, the other stops for it: the job ends, and the id's bootstrap with it.
  FailedReport failed;
  failed.error = "out of memory";
  f.training.on_report(*f.job, f.members.entry("node-0"),
                       report(f.job->id, failed, f.part_of("node-0")));
  FailedReport cancelled;
  cancelled.error = "cancelled";
  cancelled.cancelled = true;
  f.training.on_report(*f.job, f.members.entry("node-1"),
                       report(f.job->id, cancelled, f.part_of("node-1")));
  CHECK(f.closed == std::vector<JobState>{JobState::kFailed});
  CHECK(f.nccl_calls == std::vector<std::string>{"make " + id, "release " + id});
}

TEST_CASE("a CPU job makes no NCCL id") {
  TrainingFixture f(2, "  mode: allreduce\n");
  REQUIRE(f.job->state == JobState::kRunning);
  CHECK(f.nccl_calls.empty());
}

TEST_CASE("the result guard fails a job whose node applied an update twice, naming the node") {
  TrainingFixture f(3);
  f.finish("node-0", 500, 0xabc);
  f.finish("node-1", 501, 0xdef);  // one more, another digest: applied twice
  f.finish("node-2", 500, 0xabc);
  REQUIRE(f.closed == std::vector<JobState>{JobState::kFailed});
  INFO(f.job->error);
  CHECK(f.job->error.find("node-1 applied 501 updates") != std::string::npos);
  CHECK(f.job->error.find("the other 2 nodes 500") != std::string::npos);
  CHECK(f.job->error.find("node-0 applied") == std::string::npos);
}

TEST_CASE("the result guard fails a job whose replicas disagree, naming the farthest node") {
  TrainingFixture f(3);
  f.finish("node-0", 500, 0xabc);
  f.finish("node-1", 500, 0xabc, {1.f, 2.f, 3.5f});
  f.finish("node-2", 500, 0xabc);
  REQUIRE(f.closed == std::vector<JobState>{JobState::kFailed});
  INFO(f.job->error);
  CHECK(f.job->error.find("the replicas disagree") != std::string::npos);
  CHECK(f.job->error.find("node-1") != std::string::npos);
}

TEST_CASE("one node's failure stops the job on every other node and fails it by name") {
  TrainingFixture f(3);
  for (int i = 0; i < 3; ++i) f.members.entry("node-" + std::to_string(i)).outbox.clear();
  f.training.on_report(*f.job, f.members.entry("node-1"),
                       report(f.job->id, FailedReport{1, "out of memory", "use fewer workers"},
                              f.part_of("node-1")));
  CHECK(kinds(f.members.entry("node-0")) == std::vector<JobKind>{JobKind::Cancel});
  CHECK(kinds(f.members.entry("node-2")) == std::vector<JobKind>{JobKind::Cancel});
  CHECK(kinds(f.members.entry("node-1")).empty());
  f.training.on_report(*f.job, f.members.entry("node-0"),
                       report(f.job->id, FailedReport{0, "cancelled", "", true},
                              f.part_of("node-0")));
  f.training.on_report(*f.job, f.members.entry("node-2"),
                       report(f.job->id, FailedReport{2, "cancelled", "", true},
                              f.part_of("node-2")));
  REQUIRE(f.closed == std::vector<JobState>{JobState::kFailed});
  CHECK(f.job->error == "node-1: out of memory");
  CHECK(f.job->fix == "use fewer workers");
}

TEST_CASE("a report of an earlier part of a node does not count") {
  TrainingFixture f(2);
  ResultReport r;
  r.applied = ResultReport::Applied{1, 1, -1};
  f.training.on_report(*f.job, f.members.entry("node-0"),
                       report(f.job->id, r, f.part_of("node-0") + 1));
  CHECK(f.job->results.empty());
}

// ---- RequestHandler ----

TEST_CASE("requests: an unknown job is named, a queued job is cancelled off the queue, an ended "
          "one is left as it ended") {
  FakeClock clock;
  DaemonConfig config;
  const std::string dir = temp_dir();
  JobStore store(dir);
  Membership members(clock.fn());
  Scheduler scheduler;
  StatsStore stats(dir + "/stats.db");
  TrainingJobs training(config, store, members, scheduler, stats, [](JobRecord&) {}, [] {});
  TaskJobs tasks(config, store, members, scheduler, [](JobRecord&) {});
  int started = 0;
  RequestHandler requests(store, members, scheduler, training, tasks, [&] { ++started; },
                          [] { return Json::object(); });
  // The reply frame's fields (read while the frame lives).
  struct Reply {
    bool ok = false;
    std::string error;
    Json body;
  };
  auto reply = [](const std::vector<uint8_t>& frame) {
    const auto* r = daemon::read_control_frame(frame).body_as_Reply();
    REQUIRE(r);
    Reply out;
    out.ok = r->ok();
    if (r->error()) out.error = r->error()->str();
    if (r->ok() && r->body()) out.body = Json::parse(r->body()->str());
    return out;
  };
  const Reply unknown = reply(requests.answer(client_request(RequestKind::Status, 42)));
  CHECK_FALSE(unknown.ok);
  CHECK(unknown.error == "no job 000000000000002a on this controller");
  // Who asks: the controller sets it from the connection (alice's credential here).
  auto as_alice = [](ClientRequest r) {
    r.who = Requester{"alice", false};
    return r;
  };
  ClientRequest submit = as_alice(client_request(RequestKind::Submit));
  submit.spec = kSpec;
  REQUIRE(reply(requests.answer(submit)).ok);
  CHECK(started == 1);
  REQUIRE(scheduler.offer_order().size() == 1);
  const uint64_t id = scheduler.offer_order()[0];
  CHECK(store.find(id)->owner == "alice");
  REQUIRE(reply(requests.answer(as_alice(client_request(RequestKind::Cancel, id)))).ok);
  CHECK(store.find(id)->state == JobState::kCancelled);
  CHECK_FALSE(scheduler.queued(id));
  const Reply again = reply(requests.answer(as_alice(client_request(RequestKind::Cancel, id))));
  REQUIRE(again.ok);
  CHECK(again.body.value("already_ended", false));
  ClientRequest bad = submit;
  bad.spec = "name: [";
  CHECK_FALSE(reply(requests.answer(bad)).ok);
  CHECK(store.size() == 1);  // nothing kept of a refused submission
}

}  // namespace dtrain::daemon
