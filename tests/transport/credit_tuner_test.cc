// The credit a receiver offers one peer: the base on short links whatever arrives, doubling
// each round trip while a long link's sender uses all of it, settling at twice what the line
// delivers a round trip, halved by a loss, never past the receive buffer's cap; and the pacer
// that spreads a long link's sends.
#include <catch2/catch.hpp>

#include <chrono>

#include "transport/reliability/credit_tuner.h"
#include "transport/reliability/pacer.h"

using namespace dtrain::transport;
using namespace std::chrono_literals;

namespace {

constexpr size_t kBase = 512 << 10;
constexpr size_t kCap = 8 << 20;

// `bytes` taken in `chunks` equal pieces spread over `span`, from `start`; returns the end.
CreditTuner::Clock::time_point take(CreditTuner& t, CreditTuner::Clock::time_point start,
                                    std::chrono::microseconds span, size_t bytes,
                                    int chunks = 128) {
  for (int i = 0; i < chunks; ++i) t.took(bytes / size_t(chunks), start + span * i / chunks);
  return start + span;
}

}  // namespace

TEST_CASE("a short link keeps the base credit however fast its peer sends") {
  CreditTuner t(kBase, kCap);
  t.round_trip(200us);
  auto now = CreditTuner::Clock::now();
  for (int rtt = 0; rtt < 50; ++rtt) now = take(t, now, 200us, 4 << 20);
  CHECK(t.credit() == kBase);
  CHECK_FALSE(t.capped());
}

TEST_CASE("a loaded process's slow answers do not make a short link long") {
  CreditTuner t(kBase, kCap);
  t.round_trip(150us);
  t.round_trip(30ms);  // a heartbeat answered late: the line itself is still 150 us
  auto now = CreditTuner::Clock::now();
  for (int rtt = 0; rtt < 50; ++rtt) now = take(t, now, 30ms, 4 << 20);
  CHECK(t.credit() == kBase);
}

TEST_CASE("a long link's credit doubles each round trip its sender fills it, up to the cap") {
  CreditTuner t(kBase, kCap);
  t.round_trip(50ms);
  auto now = CreditTuner::Clock::now();
  size_t expected = kBase;
  for (int rtt = 0; rtt < 4; ++rtt) {
    now = take(t, now, 50ms, t.credit());  // the sender is held by the credit
    t.took(0, now);                        // the round trip is over
    expected *= 2;
    INFO("round trip " << rtt);
    CHECK(t.credit() == expected);
  }
  CHECK_FALSE(t.capped());
  now = take(t, now, 50ms, t.credit());
  t.took(0, now);
  CHECK(t.credit() == kCap);
  CHECK(t.capped());
}

TEST_CASE("a long link's credit settles at twice what the line delivers a round trip") {
  CreditTuner t(kBase, 64 << 20);
  t.round_trip(50ms);
  auto now = CreditTuner::Clock::now();
  constexpr size_t kLinePerRtt = 3 << 20;  // 60 MB/s across 50 ms
  for (int rtt = 0; rtt < 20; ++rtt) {
    now = take(t, now, 50ms, std::min(t.credit(), kLinePerRtt));
    t.took(0, now);
  }
  CHECK(t.credit() == 2 * kLinePerRtt);
  CHECK_FALSE(t.capped());
}

TEST_CASE("a peer that starts over starts from the base again") {
  CreditTuner t(kBase, kCap);
  t.round_trip(50ms);
  auto now = CreditTuner::Clock::now();
  now = take(t, now, 50ms, 2 << 20);
  t.took(0, now);
  REQUIRE(t.credit() == 4 << 20);
  t.reset();
  CHECK(t.credit() == kBase);
}

TEST_CASE("a loss halves a long link's credit, which then grows by the base a round trip") {
  CreditTuner t(kBase, 64 << 20);
  t.round_trip(50ms);
  auto now = CreditTuner::Clock::now();
  for (int rtt = 0; rtt < 4; ++rtt) {
    now = take(t, now, 50ms, t.credit());
    t.took(0, now);
  }
  REQUIRE(t.credit() == 8 << 20);
  // The sender's burst of 8 MiB overflowed a queue on the way: a gap, NAKed.
  t.lost();
  t.lost();  // the same burst's tail, NAKed at the next tick: one loss
  CHECK(t.credit() == 4 << 20);
  now = take(t, now, 50ms, 4 << 20);
  t.took(0, now);  // the round trip with the loss ends: no growth in it
  CHECK(t.credit() == 4 << 20);
  for (int rtt = 1; rtt <= 3; ++rtt) {
    now = take(t, now, 50ms, t.credit());
    t.took(0, now);
    INFO("round trip " << rtt << " after the loss");
    CHECK(t.credit() == (4 << 20) + size_t(rtt) * kBase);
  }
  CHECK_FALSE(t.capped());
}

TEST_CASE("a short link's gaps leave its credit alone") {
  CreditTuner t(kBase, kCap);
  t.round_trip(300us);
  t.lost();
  CHECK(t.credit() == kBase);
}

TEST_CASE("the pacer lets a burst go at once, then its rate, and nothing is held when off") {
  Pacer off;
  const auto t0 = Pacer::Clock::now();
  CHECK(off.take(100 << 20, t0));

  Pacer p;
  p.set(1e6, 10000);  // 1 MB/s after 10 kB
  CHECK(p.take(10000, t0));
  CHECK_FALSE(p.take(1000, t0));
  CHECK_FALSE(p.take(1000, t0 + 500us));  // 500 bytes refilled
  CHECK(p.take(1000, t0 + 1001us));
  // A long idle refills no more than the burst.
  CHECK(p.take(10000, t0 + 10s));
  CHECK_FALSE(p.take(100, t0 + 10s));
}
