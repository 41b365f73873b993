// Ring all-reduce rounds that survive a lost node (core/collective/ring_rounds.h), between
// threads: N nodes run consecutive rounds; one node goes silent after its k-th message, for
// every k of a round and the next, and is then declared lost to every survivor at once. Every
// round ends on every survivor with the same bits, the sum over the members the round reports
// (the lost node counted by all survivors or by none), within float rounding of a sum in double.
// Round ids have gaps between them, as the daemon's do.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/collective/ring_rounds.h"
#include "core/util/error.h"

using namespace dtrain;

namespace {

float value_of(uint32_t node, int64_t round, int64_t i) {
  return float((node + 1) * 0.37 + round * 1.5 + double((i * 7919 + node * 31) % 101) / 17.0);
}

// N nodes, messages delivered in order by one thread (as a network would, never from inside
// the sender's call). A node's messages after its budget are dropped: it went silent, and the
// survivors are told at once.
class Network {
 public:
  explicit Network(int nodes) {
    for (int i = 0; i < nodes; ++i) live_.push_back(uint32_t(i));
    for (int i = 0; i < nodes; ++i) posts_.emplace_back(new Post(*this, uint32_t(i)));
    for (int i = 0; i < nodes; ++i) rounds_.emplace_back(new core::RingRounds(uint32_t(i), *posts_[size_t(i)]));
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
  // Node `silent` sends `budget` more messages, then none.
  void silence_after(uint32_t silent, int budget) {
    std::lock_guard<std::mutex> lock(mutex_);
    silent_ = int(silent);
    budget_ = budget;
  }
  bool silenced() {
    std::lock_guard<std::mutex> lock(mutex_);
    return silent_ >= 0 && budget_ < 0;
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
    void send_result(uint32_t to, int64_t round, const core::RingRounds::Members& members,
                     const float* values, int64_t n) override {
      std::vector<float> v(values, values + n);
      net.send(self, [=, v = std::move(v)](core::RingRounds& r) mutable {
        r.on_result(self, round, members, std::move(v));
      }, to);
    }
    Network& net;
    uint32_t self;
  };
  void send(uint32_t from, std::function<void(core::RingRounds&)> call, uint32_t to) {
    bool lost_now = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (int(from) == silent_) {
        if (budget_ < 0) return;
        if (budget_-- == 0) {  // this message is the first it never sends
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
      auto item = std::move(queue_.front());
      queue_.pop_front();
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
  int silent_ = -1, budget_ = 0;
  bool stop_ = false;
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
                                                  uint32_t silent) {
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
          return;  // the silent node, cancelled
        }
      }
    });
  // The silent node never finishes (or does without the others): stop it once the rest did.
  for (int node = 0; node < nodes; ++node)
    if (uint32_t(node) != silent) threads[size_t(node)].join();
  if (silent < uint32_t(nodes)) {
    net.node(int(silent)).cancel();
    threads[silent].join();
  }
  return out;
}

void check_round(const std::vector<std::vector<RoundOutcome>>& out, int round, int64_t n,
                 uint32_t silent) {
  const RoundOutcome* first = nullptr;
  for (size_t node = 0; node < out.size(); ++node) {
    if (node == silent) continue;
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
    for (int64_t n : {int64_t(1), int64_t(nodes - 1), int64_t(nodes + 1), int64_t(1001)}) {
      INFO(nodes << " nodes, " << n << " values");
      Network net(nodes);
      auto out = run_rounds(net, nodes, 3, n, uint32_t(nodes));
      for (int r = 0; r < 3; ++r) {
        check_round(out, r, n, uint32_t(nodes));
        REQUIRE(out[0][size_t(r)].members.size() == size_t(nodes));
      }
    }
}

TEST_CASE("a node silent after any message of a round: the survivors agree on every round") {
  for (int nodes : {2, 3, 4, 5}) {
    const int per_round = 2 * (nodes - 1);  // messages a node sends in a round without a loss
    for (int budget = 0; budget <= 2 * per_round; ++budget) {
      const uint32_t silent = uint32_t(budget % nodes);
      INFO(nodes << " nodes, node " << silent << " silent after " << budget << " messages");
      Network net(nodes);
      net.silence_after(silent, budget);
      const int64_t n = 37;
      auto out = run_rounds(net, nodes, 4, n, silent);
      REQUIRE(net.silenced());
      for (int r = 0; r < 4; ++r) check_round(out, r, n, silent);
      // Once the loss is known the rounds go on without it.
      REQUIRE(out[(silent + 1) % nodes][3].members.size() == size_t(nodes - 1));
    }
  }
}

TEST_CASE("a segment from a member that is not the ring's previous one is not taken") {
  struct Count : core::RingPost {
    void send_segment(uint32_t, int64_t, const core::RingRounds::Members&, int, const float*,
                      int64_t) override {}
    void send_result(uint32_t, int64_t, const core::RingRounds::Members&, const float*,
                     int64_t) override {
      ++results;
    }
    int results = 0;
  } post;
  core::RingRounds rounds(1, post);
  // Ring 0 -> 1 -> 2 -> 0: node 1 hears only from 0. A segment "from 2" is dropped, so the
  // round waits and then names whom it waited for.
  rounds.on_segment(2, 0, {0, 1, 2}, 0, std::vector<float>(1, 5.f));
  std::vector<float> v(3, 1.f);
  REQUIRE_THROWS_WITH(rounds.sum(v.data(), 3, 0, [] { return core::RingRounds::Members{0, 1, 2}; },
                                 std::chrono::milliseconds(50)),
                      Catch::Contains("from node id 0"));
}
