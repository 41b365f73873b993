// mode allreduce's sums between GPU nodes over NCCL (daemon/node/node_collective_path.h), with
// three nodes' MeshExchanges in one process on a fake mesh and a fake NCCL among them: the sums
// go over NCCL while it works on every node; a failure on one node (its call failing after the
// others finished theirs, or a call that never completes) sends every node to the mesh's ring
// for that step and after, with the same sums everywhere; a node that cannot form the
// communicator keeps every node on the mesh; a node lost mid-call leaves the survivors on the
// ring without it; a node to leave (one admitted later) ends it.
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <tuple>
#include <map>
#include <thread>

#include "core/collective/round_ids.h"
#include "core/train/message_bus.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/node/node_collective_path.h"
#include "tests/unit/fake_mesh.h"

using namespace dtrain;
using namespace dtrain::daemon;
using namespace dtrain::testing;

namespace {

constexpr int kNodes = 3;
constexpr int64_t kValues = 1001;

// NCCL among the three nodes: each call leaves its values for its call number; once every rank
// left them, each gets their sum in rank order plus kNcclMark (so that a sum NCCL made is told
// from the ring's). A rank told to fail at a call fails there, having left its values (the
// others finish) or not (they wait until they give up); one that dies also leaves the mesh.
constexpr float kNcclMark = 0.5f;

struct Failure {
  int rank = -1, call = -1;
  bool leaves_values = true;
  bool dies = false;
};

class FakeNccl {
 public:
  explicit FakeNccl(Failure failure = Failure(), int refusing_rank = -1, int ranks = kNodes)
      : failure_(failure), refusing_rank_(refusing_rank), ranks_(ranks) {}

  class Rank : public kernels::NodeCollective {
   public:
    Rank(FakeNccl& nccl, int rank) : nccl_(nccl), rank_(rank) {}
    std::string name() const override { return "fake nccl between 3 nodes"; }
    void all_reduce_sum(float* values, int64_t n, const kernels::GiveUp& give_up) override {
      const int call = calls_++;
      ++nccl_.calls[rank_];
      nccl_.sum(rank_, call, values, n, give_up);
    }

   private:
    FakeNccl& nccl_;
    const int rank_;
    int calls_ = 0;
  };

  NodeCollectivePath::Open opener(int rank) {
    return [this, rank](const kernels::GiveUp&,
                        std::string* why) -> std::unique_ptr<kernels::NodeCollective> {
      if (rank == refusing_rank_) {
        *why = "no libnccl.so.2 on this fake node";
        return nullptr;
      }
      return std::make_unique<Rank>(*this, rank);
    };
  }
  std::atomic<int> calls[kNodes] = {0, 0, 0};
  std::atomic<int> gave_up[kNodes] = {0, 0, 0};  // calls given up while waiting for a rank
  std::function<void(int rank)> on_death;         // a dying rank's
  int dying_rank() const { return failure_.dies ? failure_.rank : -1; }

 private:
  void sum(int rank, int call, float* values, int64_t n, const kernels::GiveUp& give_up) {
    const bool fails = rank == failure_.rank && call == failure_.call;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!fails || failure_.leaves_values)
      left_[call][rank] = std::vector<float>(values, values + n);
    changed_.notify_all();
    if (fails) {
      // Dying after its part: only once the others have left theirs, so that they finish.
      if (failure_.dies && failure_.leaves_values)
        changed_.wait_for(lock, std::chrono::seconds(10),
                          [&] { return left_[call].size() >= size_t(ranks_); });
      lock.unlock();
      if (failure_.dies && on_death) on_death(rank);
      throw std::runtime_error("fake NCCL: the link to rank 0 went down");
    }
    while (left_[call].size() < size_t(ranks_)) {
      changed_.wait_for(lock, std::chrono::milliseconds(10));
      if (left_[call].size() < size_t(ranks_) && give_up()) {
        ++gave_up[rank];
        throw std::runtime_error("given up");
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      float s = 0.f;
      for (const auto& [r, v] : left_[call]) s += v[size_t(i)];
      values[i] = s + kNcclMark;
    }
  }

  const Failure failure_;
  const int refusing_rank_, ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, std::map<int, std::vector<float>>> left_;
};

// Node n's value i at step s: (n + 1)(s + 1) + i / 4, so that every sum is exact.
float value(int n, int s, int64_t i) { return float((n + 1) * (s + 1)) + float(i) / 4.f; }

// Each node sums `steps` steps; returns each node's sums.
std::vector<std::vector<std::vector<float>>> run_steps(FakeNccl& nccl, int steps,
                                                       milliseconds deadline) {
  // spdlog's registry is made on its first use, in code ThreadSanitizer does not see: made here,
  // before the nodes' threads log, its making is not reported as a race between them.
  spdlog::info("{} steps on three nodes", steps);
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex;
  for (uint32_t id = 1; id <= kNodes; ++id) {
    ex.push_back(std::make_unique<MeshExchange>(1, id, members(kNodes), deadline));
    mesh.join(id, *ex.back());
    ex.back()->expect_sums_of(kValues);
    ex.back()->use_node_collective(nccl.opener(int(id - 1)), {1, 2, 3});
  }
  // A dying node's process is gone: the mesh loses it at once, and the others declare it lost
  // a while later (their peer timeout), while they wait in NCCL or in the vote.
  std::vector<std::thread> losses;
  nccl.on_death = [&](int rank) {
    const uint32_t id = uint32_t(rank + 1);
    mesh.cut(id);
    losses.emplace_back([&ex, id] {
      std::this_thread::sleep_for(milliseconds(300));
      for (uint32_t other = 1; other <= kNodes; ++other)
        if (other != id) ex[other - 1]->on_loss(id);
    });
  };
  std::vector<std::vector<std::vector<float>>> sums(kNodes);
  std::vector<std::string> errors(kNodes);
  std::vector<std::thread> nodes;
  for (int n = 0; n < kNodes; ++n)
    nodes.emplace_back([&, n] {
      try {
        for (int s = 0; s < steps; ++s) {
          std::vector<float> v(kValues);
          for (int64_t i = 0; i < kValues; ++i) v[size_t(i)] = value(n, s, i);
          ex[size_t(n)]->sum_over_nodes(v.data(), kValues, core::step_round_id(0, s));
          sums[size_t(n)].push_back(v);
        }
      } catch (const std::exception& e) {  // a node that died: its ring's wait ends so
        errors[size_t(n)] = e.what();
      }
    });
  for (std::thread& t : nodes) t.join();
  for (std::thread& t : losses) t.join();
  for (int n = 0; n < kNodes; ++n) {  // only a node that died may have failed
    INFO("node " << n + 1 << ": " << errors[size_t(n)]);
    CHECK((errors[size_t(n)].empty() || (nccl.dying_rank() == n)));
  }
  return sums;
}

// One step's sum on each of `nodes` at once (node n's values value(n, 0, i)), each on a thread
// of its own: each node's sums, or what it threw.
struct StepSums {
  std::vector<std::vector<float>> sums;
  std::vector<std::string> errors;
};
StepSums step_on(const std::vector<MeshExchange*>& nodes, int64_t epoch) {
  StepSums out{std::vector<std::vector<float>>(nodes.size(), std::vector<float>(kValues)),
               std::vector<std::string>(nodes.size())};
  std::vector<std::thread> threads;
  for (size_t n = 0; n < nodes.size(); ++n)
    threads.emplace_back([&, n] {
      for (int64_t i = 0; i < kValues; ++i) out.sums[n][size_t(i)] = value(int(n), 0, i);
      try {
        nodes[n]->sum_over_nodes(out.sums[n].data(), kValues, core::step_round_id(epoch, 0));
      } catch (const std::exception& e) {
        out.errors[n] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return out;
}

// Every node of `nodes` has `steps` sums, each the exact sum over `summed` nodes' values, plus
// kNcclMark for the first `over_nccl` steps (NCCL's) and not after (the ring's).
void check_sums(const std::vector<std::vector<std::vector<float>>>& sums, int steps,
                int over_nccl, const std::vector<int>& nodes = {0, 1, 2},
                std::function<std::vector<int>(int step)> summed = nullptr) {
  for (int n : nodes) {
    REQUIRE(sums[size_t(n)].size() == size_t(steps));
    for (int s = 0; s < steps; ++s) {
      INFO("node " << n + 1 << ", step " << s + 1);
      const std::vector<int> from = summed ? summed(s) : std::vector<int>{0, 1, 2};
      const std::vector<float>& v = sums[size_t(n)][size_t(s)];
      bool exact = true;
      for (int64_t i = 0; i < kValues; ++i) {
        float want = 0.f;
        for (int m : from) want += value(m, s, i);
        exact = exact && v[size_t(i)] == want + (s < over_nccl ? kNcclMark : 0.f);
      }
      CHECK(exact);
    }
  }
}

}  // namespace

TEST_CASE("NCCL between nodes: every step's sum goes over it while it works on every node",
          "[nccl_between_nodes]") {
  FakeNccl nccl;
  const auto sums = run_steps(nccl, 4, milliseconds(5000));
  check_sums(sums, 4, 4);
  for (int n = 0; n < kNodes; ++n) CHECK(nccl.calls[n] == 4);
}

TEST_CASE("NCCL between nodes: one node's failed call sends every node to the mesh, then and "
          "after", "[nccl_between_nodes]") {
  // Node 2's third call fails after it left its values: nodes 1 and 3 finish theirs, yet every
  // node sums the third step again over the mesh (from its own values, not NCCL's sum).
  FakeNccl nccl(Failure{1, 2, true});
  const auto sums = run_steps(nccl, 5, milliseconds(5000));
  check_sums(sums, 5, 2);
  for (int n = 0; n < kNodes; ++n) CHECK(nccl.calls[n] == 3);
}

TEST_CASE("NCCL between nodes: a call that never completes is given up, and the step goes on "
          "over the mesh", "[nccl_between_nodes]") {
  FakeNccl nccl(Failure{2, 1, false});  // node 3's second call fails without leaving its values
  const auto sums = run_steps(nccl, 3, milliseconds(6000));
  check_sums(sums, 3, 1);
  for (int n = 0; n < kNodes; ++n) CHECK(nccl.calls[n] == 2);
  CHECK(nccl.gave_up[0] == 1);  // nodes 1 and 2 gave up waiting for node 3's part
  CHECK(nccl.gave_up[1] == 1);
}

TEST_CASE("NCCL between nodes: a node lost during a call: the survivors sum that step and the "
          "rest over the ring, without it", "[nccl_between_nodes]") {
  // Node 3 dies in its second call before leaving its values: nodes 1 and 2 give up once it is
  // declared lost, vote, and sum the step over the ring of the two of them.
  FakeNccl nccl(Failure{2, 1, false, true});
  const auto sums = run_steps(nccl, 4, milliseconds(6000));
  check_sums(sums, 4, 1, {0, 1}, [](int step) {
    return step == 0 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
  });
  for (int n = 0; n < 2; ++n) {  // a survivor that heard of the loss first did not call
    CHECK(nccl.calls[n] >= 1);
    CHECK(nccl.calls[n] <= 2);
  }
}

TEST_CASE("NCCL between nodes: a node lost after its part: the survivors keep NCCL's sum, which "
          "counts it, then go on over the ring", "[nccl_between_nodes]") {
  // Node 3 leaves its values in its second call and dies: nodes 1 and 2 finish that call, and
  // vote with node 3 still in the vote's view until it is declared lost; both keep the sum.
  FakeNccl nccl(Failure{2, 1, true, true});
  const auto sums = run_steps(nccl, 4, milliseconds(6000));
  check_sums(sums, 4, 2, {0, 1}, [](int step) {
    return step < 2 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
  });
}

TEST_CASE("NCCL between nodes: a node that cannot form the communicator keeps every node on "
          "the mesh", "[nccl_between_nodes]") {
  FakeNccl nccl(Failure(), 2);
  const auto sums = run_steps(nccl, 3, milliseconds(5000));
  check_sums(sums, 3, 0);
  for (int n = 0; n < kNodes; ++n) CHECK(nccl.calls[n] == 0);
}

TEST_CASE("NCCL between nodes: leaving (a node admitted) and a lost member end the path by name",
          "[nccl_between_nodes]") {
  FakeNccl nccl;
  std::vector<std::string> lines;
  bool gone = false;
  int opened = 0;
  NodeCollectivePath::Exchange seam;
  seam.vote = [](float mine, int64_t) { return mine; };  // alone
  seam.member_gone = [&] { return gone; };
  seam.log = [&](const std::string& line) { lines.push_back(line); };
  auto open = [&](const kernels::GiveUp&,
                  std::string*) -> std::unique_ptr<kernels::NodeCollective> {
    ++opened;
    return std::make_unique<FakeNccl::Rank>(nccl, 0);
  };
  SECTION("leave") {
    NodeCollectivePath path(open, {1, 2, 3}, seam, milliseconds(1000));
    path.leave("node-4 joined the job");
    std::vector<float> v(4, 1.f);
    CHECK_FALSE(path.sum(v.data(), 4, 7));
    CHECK(v == std::vector<float>(4, 1.f));
    CHECK_FALSE(path.on());
    CHECK(opened == 0);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] ==
          "the sums between nodes go over the mesh from here on: node-4 joined the job");
  }
  SECTION("a member lost before it formed") {
    gone = true;
    NodeCollectivePath path(open, {1, 2, 3}, seam, milliseconds(1000));
    std::vector<float> v(4, 1.f);
    CHECK_FALSE(path.sum(v.data(), 4, 7));
    CHECK(opened == 0);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("a node of the job was lost before it did") != std::string::npos);
  }
}

TEST_CASE("NCCL between nodes: a node admitted into the job sends every node to the ring, the "
          "newcomer with them", "[nccl_between_nodes]") {
  // node-1 and node-2 sum over NCCL; node-3 takes the job's vacant slot and is admitted at the
  // end of epoch 1. At the next step the two vote among themselves (the newcomer never was in
  // the communicator) to leave it, and all three sum over the ring.
  const uint32_t slot = daemon::kFirstSlotId;
  std::vector<JobMember> with_slot = members(2), with_newcomer = members(3);
  with_slot.push_back({slot, "slot-1", 1});
  FakeMesh mesh;
  FakeNccl nccl(Failure(), -1, 2);
  MeshExchange a(1, 1, with_slot, milliseconds(5000)), b(1, 2, with_slot, milliseconds(5000));
  MeshExchange c(1, 3, with_newcomer, milliseconds(5000));
  core::MessageBus bus_a(1), bus_b(1), bus_c(1);
  int rank = 0;
  for (auto [id, ex, bus] : {std::tuple{1u, &a, &bus_a}, {2u, &b, &bus_b}}) {
    mesh.join(id, *ex);
    ex->set_epochs(5);
    ex->set_vacant({slot});
    ex->attach(*bus, 64);
    ex->expect_sums_of(kValues);
    ex->use_node_collective(nccl.opener(rank++), {1, 2});
  }
  const StepSums first = step_on({&a, &b}, 0);
  CHECK(first.errors == std::vector<std::string>(2));
  CHECK(first.sums[0] == first.sums[1]);
  CHECK(first.sums[0][4] == value(0, 0, 4) + value(1, 0, 4) + kNcclMark);  // NCCL's
  // The epoch end: node-3 takes the slot, both admit it, node-1 sends it the replica.
  auto end_b = std::async(std::launch::async, [&] { return b.end_epoch(0, 0.5, 1); });
  a.end_epoch(0, 0.5, 1);
  end_b.get();
  mesh.join(3, c);
  c.set_epochs(5);
  c.set_rejoining({});
  c.attach(bus_c, 64);
  c.expect_sums_of(kValues);
  for (MeshExchange* ex : {&a, &b}) ex->on_join(slot, 3, "node-3", {3, "127.0.0.1", 9, 0});
  REQUIRE(admit_at_first_epoch_end(a, b, c, 64) == 1);
  const StepSums second = step_on({&a, &b, &c}, 1);
  CHECK(second.errors == std::vector<std::string>(3));
  CHECK(second.sums[0] == second.sums[1]);
  CHECK(second.sums[0] == second.sums[2]);
  CHECK(second.sums[0][4] == value(0, 0, 4) + value(1, 0, 4) + value(2, 0, 4));  // the ring's
  CHECK(nccl.calls[0] == 1);
  CHECK(nccl.calls[1] == 1);
  for (MeshExchange* ex : {&a, &b, &c}) ex->detach();
}

TEST_CASE("NCCL between nodes: a member restarted and admitted back never votes, and every node "
          "goes to the ring", "[nccl_between_nodes]") {
  // node-3's process restarts after epoch 1's last step and is admitted back at its end, under
  // its old id: its new process has no communicator, so node-1 and node-2 vote among themselves
  // to leave it, and all three sum over the ring.
  FakeMesh mesh;
  FakeNccl nccl;
  std::vector<std::unique_ptr<MeshExchange>> ex;
  std::vector<std::unique_ptr<core::MessageBus>> buses;
  for (uint32_t id = 1; id <= kNodes; ++id) {
    ex.push_back(std::make_unique<MeshExchange>(1, id, members(kNodes), milliseconds(5000)));
    buses.push_back(std::make_unique<core::MessageBus>(1));
    mesh.join(id, *ex.back());
    ex.back()->set_epochs(5);
    ex.back()->attach(*buses.back(), 64);
    ex.back()->expect_sums_of(kValues);
    ex.back()->use_node_collective(nccl.opener(int(id - 1)), {1, 2, 3});
  }
  const StepSums first = step_on({ex[0].get(), ex[1].get(), ex[2].get()}, 0);
  CHECK(first.errors == std::vector<std::string>(3));
  CHECK(first.sums[0][4] == value(0, 0, 4) + value(1, 0, 4) + value(2, 0, 4) + kNcclMark);
  MeshExchange restarted(1, 3, members(kNodes), milliseconds(5000));
  core::MessageBus bus(1);
  mesh.cut(3);
  for (int n = 0; n < 2; ++n) ex[size_t(n)]->on_rejoin(3);  // the controller says it is back
  mesh.join(3, restarted);
  restarted.set_epochs(5);
  restarted.set_rejoining({});
  restarted.attach(bus, 64);
  restarted.expect_sums_of(kValues);
  auto end_b = std::async(std::launch::async, [&] { return ex[1]->end_epoch(0, 0.5, 1); });
  ex[0]->end_epoch(0, 0.5, 1);
  end_b.get();
  REQUIRE(admit_at_first_epoch_end(*ex[0], *ex[1], restarted, 64) == 1);
  const StepSums second = step_on({ex[0].get(), ex[1].get(), &restarted}, 1);
  CHECK(second.errors == std::vector<std::string>(3));
  CHECK(second.sums[0] == second.sums[1]);
  CHECK(second.sums[0] == second.sums[2]);
  CHECK(second.sums[0][4] == value(0, 0, 4) + value(1, 0, 4) + value(2, 0, 4));  // the ring's
  for (int n = 0; n < kNodes; ++n) CHECK(nccl.calls[n] == 1);
  for (auto& e : ex) e->detach();
  restarted.detach();
}
