// Ring all-reduce (core/collective/ring_allreduce.h) between threads: for 2 to 7 ranks and
// buffers of every awkward size (empty, shorter than the ring, one past it, odd), every rank ends
// with the same bits, within float rounding of a sum in double, with each step's segment whole or
// in parts; each rank sends 2 (R - 1) / R of the buffer; a part goes on as soon as it is added;
// a part of the wrong size is refused by step and part.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "core/collective/ring_allreduce.h"
#include "core/util/error.h"

using namespace dtrain;

namespace {

// Every rank's inbox, keyed by step: what the previous rank sent it.
class ThreadRing {
 public:
  explicit ThreadRing(int ranks) : inbox_(size_t(ranks)), sent_(size_t(ranks), 0) {}

  class Links : public core::RingLinks {
   public:
    Links(ThreadRing& ring, int rank) : ring_(ring), rank_(rank) {}
    void send_next(int part, const float* values, int64_t n) override {
      ring_.deliver(rank_, part, std::vector<float>(values, values + n));
    }
    core::RingPart receive_previous(int part) override { return ring_.take(rank_, part); }

   private:
    ThreadRing& ring_;
    int rank_;
  };

  int64_t sent(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return sent_[size_t(rank)];
  }
  // What rank `rank` did, in order: +1 + p for sending part p, -1 - p for receiving it.
  std::vector<int> events(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_[rank];
  }
  // Part numbers sent again before the first was taken (a ring sends each part once).
  int repeats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return repeats_;
  }

  // A test's corruption of what rank `from` sends (none by default).
  std::function<void(std::vector<float>&)> tamper = [](std::vector<float>&) {};

 private:
  void deliver(int from, int step, std::vector<float> values) {
    std::lock_guard<std::mutex> lock(mutex_);
    tamper(values);
    sent_[size_t(from)] += int64_t(values.size());
    events_[from].push_back(1 + step);
    auto& box = inbox_[(size_t(from) + 1) % inbox_.size()];
    if (box.count(step)) ++repeats_;  // a part number sent twice, the first not yet taken
    box[step] = std::move(values);
    arrived_.notify_all();
  }
  std::vector<float> take(int rank, int step) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& box = inbox_[size_t(rank)];
    if (!arrived_.wait_for(lock, std::chrono::seconds(10), [&] { return box.count(step) > 0; }))
      throw std::runtime_error("rank " + std::to_string(rank) + " waited 10 s for step " +
                               std::to_string(step));
    std::vector<float> v = std::move(box[step]);
    box.erase(step);
    events_[rank].push_back(-1 - step);
    return v;
  }

  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<std::map<int, std::vector<float>>> inbox_;
  std::vector<int64_t> sent_;
  std::map<int, std::vector<int>> events_;
  int repeats_ = 0;
};

// Runs the all-reduce on every rank's buffer, one thread each; the first error of any rank.
std::string all_reduce(std::vector<std::vector<float>>& buffers, ThreadRing& ring,
                       const core::RingWire& wire = {}) {
  const int ranks = int(buffers.size());
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ThreadRing::Links links(ring, r);
      try {
        core::ring_allreduce(buffers[size_t(r)].data(), int64_t(buffers[size_t(r)].size()), r,
                             ranks, links, wire);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) return e;
  if (ring.repeats() > 0) return "a part number was sent twice";
  return "";
}

}  // namespace

TEST_CASE("segments cover the buffer once, the first n % R one longer") {
  for (int64_t n : {0, 1, 5, 6, 7, 1001})
    for (int ranks = 1; ranks <= 7; ++ranks) {
      int64_t next = 0;
      for (int i = 0; i < ranks; ++i) {
        const core::RingSegment s = core::ring_segment(n, ranks, i);
        CHECK(s.begin == next);
        CHECK(s.size() == n / ranks + (i < n % ranks ? 1 : 0));
        next = s.end;
      }
      CHECK(next == n);
    }
}

TEST_CASE("every rank ends with the same bits, the sum within float rounding") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int ranks = 2; ranks <= 7; ++ranks)
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(ranks - 1), int64_t(ranks),
                      int64_t(ranks + 1), int64_t(1000), int64_t(1001), int64_t(4099)})
      for (int64_t part_values : {core::kRingPartValues, int64_t(1), int64_t(100)}) {
        INFO(ranks << " ranks, " << n << " values, parts of at most " << part_values);
        core::RingWire wire;
        wire.part_values = part_values;
        std::vector<std::vector<float>> buffers(static_cast<size_t>(ranks),
                                                std::vector<float>(static_cast<size_t>(n)));
        std::vector<double> sum(static_cast<size_t>(n), 0.0);
        std::vector<double> magnitude(static_cast<size_t>(n), 0.0);
        for (auto& b : buffers)
          for (int64_t i = 0; i < n; ++i) {
            b[size_t(i)] = normal(rng) * float(1 + i % 13);
            sum[size_t(i)] += b[size_t(i)];
            magnitude[size_t(i)] += std::fabs(b[size_t(i)]);
          }
        ThreadRing ring(ranks);
        REQUIRE(all_reduce(buffers, ring, wire) == "");
        for (int r = 1; r < ranks; ++r)
          CHECK(std::memcmp(buffers[0].data(), buffers[size_t(r)].data(), size_t(n) * 4) == 0);
        int64_t off = 0;
        for (int64_t i = 0; i < n; ++i)
          off += std::fabs(buffers[0][size_t(i)] - sum[size_t(i)]) >
                 1e-6 * magnitude[size_t(i)] + 1e-30;
        CHECK(off == 0);
        // Each rank sent 2 (R - 1) segments: 2 (R - 1) / R of the buffer, give or take the
        // segments' one extra element.
        for (int r = 0; r < ranks; ++r) {
          const double share = double(ring.sent(r)) / double(std::max<int64_t>(n, 1));
          if (n >= 1000) CHECK(std::fabs(share - 2.0 * (ranks - 1) / ranks) < 0.01);
        }
      }
}

TEST_CASE("a segment of the wrong size is refused, naming the step") {
  std::vector<std::vector<float>> buffers(3, std::vector<float>(30, 1.f));
  ThreadRing ring(3);
  ring.tamper = [](std::vector<float>& v) { v.push_back(0.f); };  // one value too many
  CHECK_THAT(all_reduce(buffers, ring),
             Catch::Contains("ring all-reduce step 1, part 1 of 1: 11 values arrived where 10 "
                             "were due"));
}

TEST_CASE("a part of the wrong size in a step of parts is refused, naming the part") {
  std::vector<std::vector<float>> buffers(3, std::vector<float>(30, 1.f));
  ThreadRing ring(3);
  ring.tamper = [](std::vector<float>& v) { v.push_back(0.f); };
  core::RingWire wire;
  wire.part_values = 4;  // segments of 10: parts of 4, 3 and 3
  CHECK_THAT(all_reduce(buffers, ring, wire),
             Catch::Contains("ring all-reduce step 1, part 1 of 3: 5 values arrived where 4 "
                             "were due"));
}

TEST_CASE("a part goes on as soon as it has arrived and been added: the ring is a pipeline") {
  // Three ranks, segments of 100 in parts of 10: each rank sends its own segment's ten parts,
  // then every part it receives (but the last step's) is sent on before the next is taken.
  const int ranks = 3, parts = 10;
  std::vector<std::vector<float>> buffers(ranks, std::vector<float>(300, 1.f));
  ThreadRing ring(ranks);
  core::RingWire wire;
  wire.part_values = 10;
  REQUIRE(core::ring_parts(300, ranks, 10) == parts);
  REQUIRE(all_reduce(buffers, ring, wire) == "");
  const int steps = 2 * (ranks - 1);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    std::vector<int> expected;
    for (int p = 0; p < parts; ++p) expected.push_back(1 + p);
    for (int p = 0; p < steps * parts; ++p) {
      expected.push_back(-1 - p);
      if (p + parts < steps * parts) expected.push_back(1 + p + parts);
    }
    CHECK(ring.events(r) == expected);
  }
  CHECK(buffers[0] == std::vector<float>(300, 3.f));
}

TEST_CASE("parts a step: enough for the part size, bounded so a round's parts stay few") {
  CHECK(core::ring_parts(0, 3, core::kRingPartValues) == 1);
  CHECK(core::ring_parts(3 * core::kRingPartValues, 3, core::kRingPartValues) == 1);
  CHECK(core::ring_parts(3 * core::kRingPartValues + 1, 3, core::kRingPartValues) == 2);
  CHECK(core::ring_parts(1000, 1, 1) == 1);
  for (int ranks = 2; ranks <= 4096; ranks = ranks * 3 / 2 + 1) {
    INFO(ranks << " ranks");
    const int most = core::ring_max_parts(ranks);
    CHECK(most >= 1);
    CHECK(core::ring_parts(int64_t(1) << 40, ranks, 1) == most);
    // A round's parts stay within the bound (up to 65 ranks; past that, one part a step).
    if (ranks <= 65) CHECK(2 * (ranks - 1) * most <= core::kMaxRingPartsARound);
    else CHECK(most == 1);
  }
}

TEST_CASE("bf16 on the wire: the same bits everywhere, bf16 values, exact counts at the end") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t n = 1001, exact_from = n - 2;  // a gradient, then two counts
  for (int64_t part_values : {core::kRingPartValues, int64_t(50)})
    for (int ranks = 2; ranks <= 7; ++ranks) {
      INFO(ranks << " ranks, parts of at most " << part_values);
      std::vector<std::vector<float>> buffers(static_cast<size_t>(ranks),
                                              std::vector<float>(static_cast<size_t>(n)));
      std::vector<double> sum(static_cast<size_t>(n), 0.0), magnitude(static_cast<size_t>(n), 0.0);
      for (int r = 0; r < ranks; ++r) {
        std::vector<float>& b = buffers[size_t(r)];
        for (int64_t i = 0; i < exact_from; ++i) b[size_t(i)] = normal(rng) * float(1 + i % 13);
        b[size_t(n - 2)] = float(257 + r);  // no bf16 holds 257 and up (9 bits and more)
        b[size_t(n - 1)] = float(r % 2);
        for (int64_t i = 0; i < n; ++i) {
          sum[size_t(i)] += b[size_t(i)];
          magnitude[size_t(i)] += std::fabs(b[size_t(i)]);
        }
      }
      ThreadRing ring(ranks);
      int64_t not_bf16 = 0;  // values sent that a bf16 would not hold
      ring.tamper = [&not_bf16](std::vector<float>& v) {
        for (float x : v) not_bf16 += core::all_bf16(&x, 1) ? 0 : 1;
      };
      REQUIRE(all_reduce(buffers, ring, core::RingWire{true, n - exact_from, part_values}) == "");
      for (int r = 1; r < ranks; ++r)
        CHECK(std::memcmp(buffers[0].data(), buffers[size_t(r)].data(), size_t(n) * 4) == 0);
      CHECK(core::all_bf16(buffers[0].data(), exact_from));
      // Each rank's partial sum is rounded once a hop and the whole sum once more: at most a
      // half unit of bf16's 8 bits of precision of the magnitude each time.
      int64_t off = 0;
      for (int64_t i = 0; i < exact_from; ++i)
        off += std::fabs(buffers[0][size_t(i)] - sum[size_t(i)]) >
               double(ranks) * std::ldexp(1.0, -8) * magnitude[size_t(i)];
      CHECK(off == 0);
      CHECK(buffers[0][size_t(n - 2)] == float(sum[size_t(n - 2)]));  // exact
      CHECK(buffers[0][size_t(n - 1)] == float(sum[size_t(n - 1)]));
      // Only the counts went as fp32: the last segment is sent 2 (R - 1) times, two counts each.
      CHECK(not_bf16 <= 4 * (ranks - 1));
      CHECK(not_bf16 > 0);
    }
}
