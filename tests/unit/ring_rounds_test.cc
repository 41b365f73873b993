// Ring all-reduce rounds that survive a lost node (core/collective/ring_rounds.h), between
// threads: N nodes run consecutive rounds; one node goes silent after its k-th message, for
// every k of a round and the next, and is then declared lost to every survivor at once. Every
// round ends on every survivor with the same bits, the sum over the members the round reports
// (the lost node counted by all survivors or by none), within float rounding of a sum in double.
// The same with each step's segment cut into several parts, and with two nodes lost at different
// points; a result from outside a round's view is not taken; what is held for later rounds is
// bounded. Round ids have gaps, as the daemon's do.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/collective/ring_allreduce.h"
#include "core/collective/ring_rounds.h"
#include "core/util/error.h"

using namespace dtrain;

namespace {

float value_of(uint32_t node, int64_t round, int64_t i) {
  return float((node + 1) * 0.37 + round * 1.5 + double((i * 7919 + node * 31) % 101) / 17.0);
}

// N nodes, messages delivered by one thread (as a network would, never from inside the
// sender's call), in order or, `shuffled`, in any order (the mesh sends a step's parts on
// different lanes). A node's messages after its budget are dropped: it went silent, and the
// survivors are told at once.
class Network {
 public:
  // `part_values`: the most values a part of a step carries (RingWire::part_values).
  // `bf16`: the parts travel as bf16 (RingWire::bf16, no exact values).
  explicit Network(int nodes, int64_t part_values = core::kRingPartValues, bool shuffled = false,
                   bool bf16 = false)
      : shuffled_(shuffled), shuffle_(uint32_t(nodes * 7919 + part_values)) {
    for (int i = 0; i < nodes; ++i) live_.push_back(uint32_t(i));
    for (int i = 0; i < nodes; ++i) posts_.emplace_back(new Post(*this, uint32_t(i)));
    for (int i = 0; i < nodes; ++i) {
      rounds_.emplace_back(new core::RingRounds(uint32_t(i), *posts_[size_t(i)]));
      core::RingWire wire;
      wire.part_values = part_values;
      wire.bf16 = bf16;
      rounds_.back()->set_wire(wire);
    }
    courier_ = std::thread([this] { deliver(); });
  }
  ~Network() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    courier_.join();
  }
  core::RingRounds& node(int i) { return *rounds_[size_t(i)]; }
  core::RingRounds::Members live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }
  // Node `silent` sends `budget` more messages, then none (several nodes may be silenced).
  void silence_after(uint32_t silent, int budget) {
    std::lock_guard<std::mutex> lock(mutex_);
    budgets_[silent] = budget;
  }
  bool silenced() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [node, budget] : budgets_)
      if (budget >= 0) return false;
    return !budgets_.empty();
  }

 private:
  struct Post : core::RingPost {
    Post(Network& net, uint32_t self) : net(net), self(self) {}
    void send_segment(uint32_t to, int64_t round, const core::RingRounds::Members& members,
                      int step, const float* values, int64_t n) override {
      std::vector<float> v(values, values + n);
      net.send(self, [=, v = std::move(v)](core::RingRounds& r) mutable {
        r.on_segment(self, round, members, step, std::move(v));
      }, to);
    }
    void send_result(const core::RingRounds::Members& to, int64_t round,
                     const core::RingRounds::Members& members, const float* values,
                     int64_t n) override {
      for (uint32_t member : to) {
        std::vector<float> v(values, values + n);
        net.send(self, [=, v = std::move(v)](core::RingRounds& r) mutable {
          r.on_result(self, round, members, std::move(v));
        }, member);
      }
    }
    Network& net;
    uint32_t self;
  };
  void send(uint32_t from, std::function<void(core::RingRounds&)> call, uint32_t to) {
    bool lost_now = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto silent = budgets_.find(from);
      if (silent != budgets_.end()) {
        int& budget = silent->second;
        if (budget < 0) return;
        if (budget-- == 0) {  // this message is the first it never sends
          live_.erase(std::find(live_.begin(), live_.end(), from));
          lost_now = true;
        }
      }
      if (!lost_now) queue_.push_back({to, std::move(call)});
    }
    cv_.notify_all();
    if (lost_now)
      for (uint32_t s : live()) rounds_[s]->members_changed();
  }
  void deliver() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      auto next = queue_.begin();
      if (shuffled_) next += std::uniform_int_distribution<size_t>(0, queue_.size() - 1)(shuffle_);
      auto item = std::move(*next);
      queue_.erase(next);
      lock.unlock();
      item.second(*rounds_[item.first]);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<uint32_t, std::function<void(core::RingRounds&)>>> queue_;
  core::RingRounds::Members live_;
  std::vector<std::unique_ptr<Post>> posts_;
  std::vector<std::unique_ptr<core::RingRounds>> rounds_;
  std::map<uint32_t, int> budgets_;
  bool stop_ = false;
  const bool shuffled_;
  std::mt19937 shuffle_;
  std::thread courier_;
};

struct RoundOutcome {
  std::vector<float> values;
  core::RingRounds::Members members;
  bool done = false;
};

// Every node runs `rounds` rounds of n values; returns each node's outcome per round (the
// silent node's are left undone: it is stopped by cancel()).
std::vector<std::vector<RoundOutcome>> run_rounds(Network& net, int nodes, int rounds, int64_t n,
                                                  const std::set<uint32_t>& silent) {
  std::vector<std::vector<RoundOutcome>> out(static_cast<size_t>(nodes),
                                             std::vector<RoundOutcome>(static_cast<size_t>(rounds)));
  std::vector<std::thread> threads;
  for (int node = 0; node < nodes; ++node)
    threads.emplace_back([&, node] {
      for (int r = 0; r < rounds; ++r) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value_of(uint32_t(node), r, i);
        try {
          // Ids increase with gaps, as the daemon's do (the epoch in the high bits).
          auto members = net.node(node).sum(v.data(), n, (int64_t(r) << 32) + r,
                                            [&] { return net.live(); }, std::chrono::seconds(20));
          out[size_t(node)][size_t(r)] = {v, members, true};
        } catch (const core::UserError&) {
          return;  // a silent node, cancelled
        }
      }
    });
  // The silent nodes never finish (or do without the others): stop them once the rest did.
  for (int node = 0; node < nodes; ++node)
    if (!silent.count(uint32_t(node))) threads[size_t(node)].join();
  for (uint32_t node : silent) {
    net.node(int(node)).cancel();
    threads[node].join();
  }
  return out;
}

void check_round(const std::vector<std::vector<RoundOutcome>>& out, int round, int64_t n,
                 const std::set<uint32_t>& silent) {
  const RoundOutcome* first = nullptr;
  for (size_t node = 0; node < out.size(); ++node) {
    if (silent.count(uint32_t(node))) continue;
    const RoundOutcome& o = out[node][size_t(round)];
    INFO("node " << node << " round " << round);
    REQUIRE(o.done);
    if (!first) first = &o;
    REQUIRE(o.members == first->members);
    REQUIRE(o.values == first->values);  // bit-identical
  }
  for (int64_t i = 0; i < n; ++i) {
    double expected = 0.0;
    for (uint32_t m : first->members) expected += value_of(m, round, i);
    REQUIRE(std::fabs(first->values[size_t(i)] - expected) <= 1e-5 * (1.0 + std::fabs(expected)));
  }
}

}  // namespace

TEST_CASE("ring rounds without a loss sum over every node, for 2 to 7 nodes and odd sizes") {
  for (int nodes = 2; nodes <= 7; ++nodes)
    for (int64_t n : {int64_t(1), int64_t(nodes - 1), int64_t(nodes + 1), int64_t(1001)})
      for (int64_t part_values : {core::kRingPartValues, int64_t(17)}) {
        INFO(nodes << " nodes, " << n << " values, parts of at most " << part_values);
        Network net(nodes, part_values);
        auto out = run_rounds(net, nodes, 3, n, {});
        for (int r = 0; r < 3; ++r) {
          check_round(out, r, n, {});
          REQUIRE(out[0][size_t(r)].members.size() == size_t(nodes));
        }
      }
}

TEST_CASE("an exact round is not rounded for a bf16 wire; the job's rounds are") {
  // Counts past bf16's 256 (the epoch end's check of the replicas: MeshExchange::replicas_agree).
  constexpr int kNodes = 3;
  for (bool exact : {true, false}) {
    Network net(kNodes, core::kRingPartValues, false, /*bf16=*/true);
    std::vector<std::vector<float>> values(kNodes, std::vector<float>(5));
    std::vector<std::thread> threads;
    for (int i = 0; i < kNodes; ++i)
      threads.emplace_back([&, i] {
        for (int k = 0; k < 5; ++k) values[size_t(i)][size_t(k)] = float(100 + k);
        net.node(i).sum(values[size_t(i)].data(), 5, 1, [&net] { return net.live(); },
                        std::chrono::seconds(20), exact);
      });
    for (auto& t : threads) t.join();
    INFO((exact ? "exact" : "the job's bf16 wire"));
    for (int i = 0; i < kNodes; ++i) {
      CHECK(values[size_t(i)] == values[0]);  // the same bits everywhere, either way
      // 300 + 3k: 303, 306 and 309 are not bf16s (between 256 and 512 bf16 steps by 2).
      bool all_exact = true;
      for (int k = 0; k < 5; ++k) all_exact &= values[size_t(i)][size_t(k)] == float(300 + 3 * k);
      CHECK(all_exact == exact);
    }
  }
}

TEST_CASE("rounds of large vectors go on past the bound on held values: taken ones are let go") {
  // Every part waits in the held segments until its round takes it: 12 rounds of 2 steps of
  // 2^19 values each (4 parts a step) pass through 3 times kMinHeldValues. Counted as still
  // held, they would have filled the bound and the later rounds would wait for parts dropped
  // (a cluster test's job once hung at its 14th step so).
  const int64_t n = int64_t(1) << 20;
  REQUIRE(12 * n > 2 * core::RingRounds::kMinHeldValues);
  Network net(2);
  auto out = run_rounds(net, 2, 12, n, {});
  for (int r = 0; r < 12; ++r) REQUIRE(out[0][size_t(r)].done);
  check_round(out, 11, n, {});
}

// A node silent after each `stride`-th of its first `2 * per_round` messages in turn, for 2 to
// 5 nodes.
static void silent_after_any_message(int64_t n, int64_t part_values, int stride = 1,
                                     bool shuffled = false) {
  for (int nodes : {2, 3, 4, 5}) {
    const int parts = core::ring_parts(n, nodes, part_values);
    // Messages a node sends in a round without a loss: every part of every step.
    const int per_round = 2 * (nodes - 1) * parts;
    for (int budget = 0; budget <= 2 * per_round; budget += stride) {
      const uint32_t silent = uint32_t(budget % nodes);
      INFO(nodes << " nodes, " << parts << " parts a step, node " << silent << " silent after "
                 << budget << " messages");
      Network net(nodes, part_values, shuffled);
      net.silence_after(silent, budget);
      auto out = run_rounds(net, nodes, 4, n, {silent});
      REQUIRE(net.silenced());
      for (int r = 0; r < 4; ++r) check_round(out, r, n, {silent});
      // Once the loss is known the rounds go on without it.
      REQUIRE(out[(silent + 1) % nodes][3].members.size() == size_t(nodes - 1));
    }
  }
}

TEST_CASE("a node silent after any message of a round: the survivors agree on every round") {
  silent_after_any_message(37, core::kRingPartValues);
}

TEST_CASE("the same with each step's segment in parts: the survivors agree on every round") {
  // 37 values in parts of at most 4: 2 to 5 parts a step.
  REQUIRE(core::ring_parts(37, 3, 4) == 4);
  silent_after_any_message(37, 4);
}

TEST_CASE("the most parts a step, delivered in any order: the survivors agree on every round") {
  // Parts of one value: ring_max_parts a step (64 for 2 nodes, 16 for 5), the most a round
  // holds early, and again for the rounds begun anew without the silent node.
  REQUIRE(core::ring_parts(1000, 2, 1) == core::ring_max_parts(2));
  REQUIRE(core::ring_parts(1000, 5, 1) == core::ring_max_parts(5));
  silent_after_any_message(1000, 1, 5, true);
}

namespace {

// One node's RingRounds driven by hand: what it sends is recorded, nothing is delivered.
struct Recorder : core::RingPost {
  void send_segment(uint32_t, int64_t, const core::RingRounds::Members&, int, const float*,
                    int64_t) override {}
  void send_result(const core::RingRounds::Members& to, int64_t, const core::RingRounds::Members&,
                   const float*, int64_t) override {
    results += int(to.size());
  }
  int results = 0;
};

const core::RingRounds::Members kTwo = {1, 2};

}  // namespace

// Five nodes; one goes silent after a messages, another after b more of its own: the second
// loss can come while the survivors are still recovering from the first.
static void two_silent(int64_t part_values, bool shuffled) {
  const int nodes = 5;
  const int64_t n = 23;
  const int per_round = 2 * (nodes - 1) * core::ring_parts(n, nodes, part_values);
  for (int a = 0; a <= per_round; a += 2)
    for (int b = a; b <= a + per_round; b += 3) {
      const uint32_t first = uint32_t(a % nodes), second = uint32_t((a + 2) % nodes);
      INFO("node " << first << " silent after " << a << " messages, node " << second
                   << " after " << b << "; parts of at most " << part_values);
      Network net(nodes, part_values, shuffled);
      net.silence_after(first, a);
      net.silence_after(second, b);
      auto out = run_rounds(net, nodes, 4, n, {first, second});
      REQUIRE(net.silenced());
      for (int r = 0; r < 4; ++r) check_round(out, r, n, {first, second});
    }
}

TEST_CASE("two nodes silent at different messages: the survivors agree on every round") {
  two_silent(core::kRingPartValues, false);
}

TEST_CASE("the same with parts delivered in any order: the survivors agree on every round") {
  REQUIRE(core::ring_parts(23, 5, 2) == 3);  // 23 values in parts of at most 2: 3 a step
  two_silent(2, true);
}

TEST_CASE("a segment from a member that is not the ring's previous one is not taken") {
  Recorder post;
  core::RingRounds rounds(1, post);
  // Ring 0 -> 1 -> 2 -> 0: node 1 hears only from 0. A segment "from 2" is dropped, so the
  // round waits and then names whom it waited for.
  rounds.on_segment(2, 0, {0, 1, 2}, 0, std::vector<float>(1, 5.f));
  std::vector<float> v(3, 1.f);
  REQUIRE_THROWS_WITH(rounds.sum(v.data(), 3, 0, [] { return core::RingRounds::Members{0, 1, 2}; },
                                 std::chrono::milliseconds(50)),
                      Catch::Contains("from node id 0"));
}

TEST_CASE("a round's result from a member outside the round's view is not taken") {
  // Node 1 sums with node 2 alone; node 3 (lost to node 1) had finished the round counting
  // everyone and sends its result. Taken, node 1 would end the round unlike node 2, which sums
  // over {1, 2} with it: node 1 must finish over {1, 2} from node 2's segments instead.
  Recorder post;
  core::RingRounds rounds(1, post);
  rounds.on_result(3, 7, {1, 2, 3}, {100.f, 100.f});
  // Node 2's parts of the ring {1, 2}: its value of segment 1 (step 1 of 2), then its whole sum
  // of segment 0 (step 2).
  rounds.on_segment(2, 7, kTwo, 0, std::vector<float>{20.f});
  rounds.on_segment(2, 7, kTwo, 1, std::vector<float>{13.f});
  std::vector<float> v = {3.f, 4.f};
  const auto counted = rounds.sum(v.data(), 2, 7, [] { return kTwo; }, std::chrono::seconds(5));
  CHECK(counted == kTwo);
  CHECK(v == std::vector<float>{13.f, 24.f});
}

TEST_CASE("a usable result is not pushed out by a later one from outside the view") {
  // Node 2 finished the round over {1, 2} and sends node 1 its result; then node 3, dropped by
  // both, sends its own. Node 1 takes node 2's, and says whose values it holds.
  Recorder post;
  core::RingRounds rounds(1, post);
  rounds.on_result(2, 9, kTwo, {5.f, 6.f});
  rounds.on_result(3, 9, {1, 2, 3}, {100.f, 100.f});
  std::vector<float> v = {1.f, 1.f};
  const auto counted = rounds.sum(v.data(), 2, 9, [] { return kTwo; }, std::chrono::seconds(5));
  CHECK(counted == kTwo);
  CHECK(v == std::vector<float>{5.f, 6.f});
}

TEST_CASE("before its first round a node holds parts as large as the sums it expects") {
  // Two nodes and a model past the bound's floor: the other node's first part (half the sum)
  // arrives before this node starts. Told the sums' size, it holds it; the round completes.
  const int64_t n = 2 * core::RingRounds::kMinHeldValues + 2;
  Recorder post;
  core::RingRounds rounds(1, post);
  rounds.expect_values(n);
  core::RingWire whole_steps;  // one part a step, as the two below
  whole_steps.part_values = n;
  rounds.set_wire(whole_steps);
  rounds.on_segment(2, 0, kTwo, 0, std::vector<float>(size_t(n / 2), 2.f));
  rounds.on_segment(2, 0, kTwo, 1, std::vector<float>(size_t(n / 2), 3.f));
  std::vector<float> v(static_cast<size_t>(n), 1.f);
  REQUIRE(rounds.sum(v.data(), n, 0, [] { return kTwo; }, std::chrono::seconds(5)) == kTwo);
  CHECK(v.front() == 3.f);  // segment 0: node 2's whole sum
  CHECK(v.back() == 3.f);   // segment 1: 1 + node 2's 2
}

TEST_CASE("segments held for a later round are bounded; what passes the bound is dropped") {
  Recorder post;
  core::RingRounds rounds(1, post);
  // A part larger than all that may be held: dropped, so the round waits for it (kept, it would
  // have been refused for its size instead).
  rounds.on_segment(2, 4, kTwo, 0,
                    std::vector<float>(size_t(core::RingRounds::kMinHeldValues) + 1, 1.f));
  std::vector<float> v = {1.f, 2.f};
  REQUIRE_THROWS_WITH(rounds.sum(v.data(), 2, 4, [] { return kTwo; },
                                 std::chrono::milliseconds(50)),
                      Catch::Contains("waited 50 ms for part 1 from node id 2"));
}
