// The delay line's queue (tools/delay_line/frame_queue.h): frames come out after the delay, in
// arrival order, and a frame past the byte bound is dropped and counted.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

#include "tools/delay_line/frame_queue.h"

using dtrain::tools::FrameQueue;
using std::chrono::microseconds;

namespace {

const FrameQueue::Clock::time_point t0{};

std::vector<uint8_t> frame(uint8_t tag, size_t size) { return std::vector<uint8_t>(size, tag); }

}  // namespace

TEST_CASE("a frame is held for the delay, then released in arrival order") {
  FrameQueue q(microseconds(25000), 1 << 20);
  const auto a = frame(1, 60), b = frame(2, 1500);
  REQUIRE(q.push(a.data(), a.size(), t0));
  REQUIRE(q.push(b.data(), b.size(), t0 + microseconds(1000)));
  CHECK(q.bytes() == 1560);
  CHECK_FALSE(q.due(t0 + microseconds(24999)));
  CHECK(q.wait(t0 + microseconds(5000), microseconds(200000)) == microseconds(20000));
  REQUIRE(q.due(t0 + microseconds(25000)));
  CHECK(q.front() == a);
  q.pop();
  CHECK_FALSE(q.due(t0 + microseconds(25999)));  // b arrived 1 ms later
  REQUIRE(q.due(t0 + microseconds(26000)));
  CHECK(q.front() == b);
  q.pop();
  CHECK(q.bytes() == 0);
  CHECK(q.wait(t0, microseconds(200000)) == microseconds(200000));  // empty: the idle wait
}

TEST_CASE("no delay: a frame is due at once") {
  FrameQueue q(microseconds(0), 1 << 20);
  const auto a = frame(3, 100);
  REQUIRE(q.push(a.data(), a.size(), t0));
  CHECK(q.due(t0));
  CHECK(q.wait(t0, microseconds(200000)) == microseconds(0));
}

TEST_CASE("a frame that would pass the byte bound is dropped and counted") {
  FrameQueue q(microseconds(1000), 3000);
  const auto big = frame(4, 1500);
  CHECK(q.push(big.data(), big.size(), t0));
  CHECK(q.push(big.data(), big.size(), t0));
  CHECK_FALSE(q.push(big.data(), big.size(), t0));
  CHECK(q.dropped() == 1);
  CHECK(q.bytes() == 3000);
  q.pop();  // room again
  CHECK(q.push(big.data(), big.size(), t0));
  CHECK(q.dropped() == 1);
}
