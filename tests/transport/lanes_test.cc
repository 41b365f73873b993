// Lanes (transport/endpoint/lane.h): several I/O threads per endpoint, each with a socket on the
// one port, with real sockets on loopback (ports bound to 0 and read back):
// - messages of every size cross both ways exactly once and intact, each handed over on its
//   lane's thread, and the kernel steers every datagram to its own lane's socket; every lane
//   carries traffic, and no two datagrams on the wire share a counter (the tags' nonce);
// - a node with another lane count is refused on every datagram, and counted as wrong_lane;
// - a peer that goes silent is reported lost once, not once per lane, and can be added back;
// - a link that stops being acknowledged on one lane is lost on every lane (their queues are
//   dropped at once), and a new silence after the peer is heard again is reported again;
// - a port already held (another endpoint's lanes) is refused, not joined;
// - lanes draw their counters (the tags' nonces) from disjoint blocks.
// Every wait has a deadline and says what it was waiting for.
#include <catch2/catch.hpp>

#include <asio.hpp>
#include <atomic>
#include <cstring>
#include <functional>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/transport/udp_tap.h"
#include "tests/wait_for.h"
#include "transport/endpoint/endpoint.h"
#include "transport/endpoint/lane.h"

using namespace dtrain::transport;
using namespace std::chrono_literals;
using dtrain::testing::UdpTap;
using dtrain::testing::wait_for;

namespace {

constexpr uint64_t kJob = 11;

EndpointConfig config(uint32_t node, size_t lanes) {
  EndpointConfig c;
  c.node_id = node;
  c.key.fill(5);
  c.lanes = lanes;
  c.heartbeat_interval = 100ms;
  c.peer_timeout = 1500ms;
  return c;
}

// A message's bytes follow from its id, so the receiver can check every byte.
std::vector<uint8_t> pattern(uint64_t id) {
  std::vector<uint8_t> bytes(1 + (id * 7919) % 300000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 31 + id);
  return bytes;
}

struct Inbox {
  std::mutex mutex;
  std::map<uint64_t, int> seen;  // by message id
  std::set<std::thread::id> threads;
  size_t corrupt = 0;
  Endpoint::MessageHandler handler() {
    return [this](Delivery&& d) {
      std::lock_guard<std::mutex> lock(mutex);
      ++seen[d.message_id];
      threads.insert(std::this_thread::get_id());
      if (d.bytes != pattern(d.message_id)) ++corrupt;
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return seen.size();
  }
};

// Nodes 1 (a) and 2 (b), peers of each other, both running kJob.
void connect(Endpoint& a, Inbox& at_a, Endpoint& b, Inbox& at_b) {
  for (Endpoint* e : {&a, &b}) e->add_job(kJob);
  a.add_peer(2, "127.0.0.1", b.port());
  b.add_peer(1, "127.0.0.1", a.port());
  a.start(at_a.handler());
  b.start(at_b.handler());
}

// The lane and counter of each datagram a tap captured (header bytes 12 and 24-31).
std::vector<std::pair<uint8_t, uint64_t>> lanes_and_counters(UdpTap& tap) {
  std::vector<std::pair<uint8_t, uint64_t>> out;
  for (const auto& d : tap.captured()) {
    if (d.size() < 32) continue;
    uint64_t counter;
    std::memcpy(&counter, d.data() + 24, 8);
    out.emplace_back(d[kLaneOffset], counter);
  }
  return out;
}

uint64_t drops(Endpoint& e, uint32_t peer, DropReason reason) {
  return e.counters()[peer].dropped(reason);
}

}  // namespace

TEST_CASE("three lanes carry messages both ways, each once and intact, on their own threads") {
  Endpoint a(config(1, 3)), b(config(2, 3));
  REQUIRE(a.lanes() == 3);
  Inbox at_a, at_b;
  connect(a, at_a, b, at_b);
  UdpTap wire(b.port());  // a's datagrams to b go through it (steered again at b's port)
  a.add_peer(2, "127.0.0.1", wire.port());
  constexpr uint64_t kMessages = 60;
  std::thread from_b([&] {
    for (uint64_t id = 0; id < kMessages; ++id)
      b.send(1, kJob, 2, id, std::make_shared<const std::vector<uint8_t>>(pattern(id)));
  });
  for (uint64_t id = 0; id < kMessages; ++id)
    REQUIRE(a.send(2, kJob, 1, id, std::make_shared<const std::vector<uint8_t>>(pattern(id))));
  from_b.join();
  const bool all = wait_for(
      [&] { return at_a.count() == kMessages && at_b.count() == kMessages; }, 20s,
      "60 messages each way");
  CHECK(at_a.count() == kMessages);  // how many did arrive, if not all
  CHECK(at_b.count() == kMessages);
  REQUIRE(all);
  for (Inbox* in : {&at_a, &at_b}) {
    std::lock_guard<std::mutex> lock(in->mutex);
    for (auto& [id, n] : in->seen) REQUIRE(n == 1);
    REQUIRE(in->corrupt == 0);
    // Ids 0..59 fall on all three lanes, and each lane hands over on its own I/O thread.
    REQUIRE(in->threads.size() == 3);
  }
  // Steered by the lane byte: no datagram reached another lane's socket.
  REQUIRE(drops(a, 2, DropReason::kWrongLane) == 0);
  REQUIRE(drops(b, 1, DropReason::kWrongLane) == 0);
  REQUIRE(wait_for([&] { return a.idle() && b.idle(); }, 5s, "both endpoints to be idle"));
  const PeerCounters c = a.counters()[2];
  REQUIRE(c.messages_out == kMessages);
  REQUIRE(c.messages_in == kMessages);
  REQUIRE(!c.lost);
  // On the wire: all three lanes carried a's datagrams, and no counter was used twice.
  std::set<uint8_t> lanes;
  std::set<uint64_t> counters;
  const auto seen = lanes_and_counters(wire);
  for (auto [lane, counter] : seen) {
    lanes.insert(lane);
    REQUIRE(counters.insert(counter).second);
  }
  REQUIRE(lanes == std::set<uint8_t>{0, 1, 2});
  REQUIRE(seen.size() > 3 * kMessages);
}

TEST_CASE("a node with another lane count is refused, and counted as wrong_lane") {
  Endpoint a(config(1, 2)), b(config(2, 1));
  Inbox at_a, at_b;
  connect(a, at_a, b, at_b);
  REQUIRE(a.send(2, kJob, 1, 0, std::make_shared<const std::vector<uint8_t>>(pattern(0))));
  REQUIRE(a.send(2, kJob, 1, 1, std::make_shared<const std::vector<uint8_t>>(pattern(1))));
  REQUIRE(b.send(1, kJob, 2, 0, std::make_shared<const std::vector<uint8_t>>(pattern(0))));
  // Both lanes' datagrams (chunks and heartbeats) are refused at b, and b's at a.
  REQUIRE(wait_for([&] { return drops(b, 1, DropReason::kWrongLane) >= 4; }, 5s,
                   "b to refuse a's datagrams of both lanes as wrong_lane"));
  REQUIRE(wait_for([&] { return drops(a, 2, DropReason::kWrongLane) >= 2; }, 5s,
                   "a to refuse b's datagrams as wrong_lane"));
  REQUIRE(at_a.count() == 0);
  REQUIRE(at_b.count() == 0);
}

TEST_CASE("a silent peer is reported lost once over all lanes, and can be added back") {
  Endpoint a(config(1, 3));
  std::atomic<int> losses{0};
  a.add_job(kJob);
  Inbox at_a;
  auto b = std::make_unique<Endpoint>(config(2, 3));
  b->add_job(kJob);
  a.add_peer(2, "127.0.0.1", b->port());
  b->add_peer(1, "127.0.0.1", a.port());
  a.start(at_a.handler(), [&](uint32_t peer) {
    if (peer == 2) ++losses;
  });
  Inbox at_b;
  b->start(at_b.handler());
  for (uint64_t id = 0; id < 3; ++id)
    REQUIRE(b->send(1, kJob, 2, id, std::make_shared<const std::vector<uint8_t>>(pattern(id))));
  REQUIRE(wait_for([&] { return at_a.count() == 3; }, 5s, "b's messages on three lanes"));
  b.reset();  // silent from now on, on every lane
  REQUIRE(wait_for([&] { return losses.load() >= 1; }, 5s, "a to declare b lost"));
  std::this_thread::sleep_for(500ms);  // every lane's timer has run out by now
  REQUIRE(losses.load() == 1);
  REQUIRE(a.counters()[2].lost);
  // b comes back (a new boot on a new port): every lane of the link lives again.
  Endpoint b2(config(2, 3));
  b2.add_job(kJob);
  Inbox at_b2;
  a.add_peer(2, "127.0.0.1", b2.port());
  b2.add_peer(1, "127.0.0.1", a.port());
  b2.start(at_b2.handler());
  for (uint64_t id = 10; id < 13; ++id)
    REQUIRE(a.send(2, kJob, 1, id, std::make_shared<const std::vector<uint8_t>>(pattern(id))));
  REQUIRE(wait_for([&] { return at_b2.count() == 3; }, 5s, "a's messages to b's second boot"));
  REQUIRE(!a.counters()[2].lost);
  REQUIRE(losses.load() == 1);
}

TEST_CASE("a link unacknowledged on one lane is lost on all; a new silence is reported again") {
  Endpoint a(config(1, 3)), b(config(2, 3));
  std::atomic<int> losses{0};
  for (Endpoint* e : {&a, &b}) e->add_job(kJob);
  // Between a and b: the chunks of lanes 0 and 1 (datagrams of more than 300 bytes) are lost;
  // heartbeats and acks pass, so neither side hears silence.
  UdpTap wire(b.port(),
              [](const uint8_t* d, size_t len) { return len > 300 && d[kLaneOffset] < 2; });
  a.add_peer(2, "127.0.0.1", wire.port());
  b.add_peer(1, "127.0.0.1", a.port());
  Inbox at_a, at_b;
  a.start(at_a.handler(), [&](uint32_t peer) {
    if (peer == 2) ++losses;
  });
  b.start(at_b.handler());
  auto message = [](uint64_t id) {
    return std::make_shared<const std::vector<uint8_t>>(pattern(id));
  };
  const auto first = std::chrono::steady_clock::now();
  REQUIRE(a.send(2, kJob, 1, 1, message(1)));  // lane 1: unacknowledged from now
  std::this_thread::sleep_for(1300ms);
  REQUIRE(a.send(2, kJob, 1, 3, message(3)));  // lane 0: unacknowledged from 1.3 s on
  REQUIRE(wait_for([&] { return losses.load() >= 1; }, 5s, "a to declare b lost (lane 1)"));
  // Lane 1's timer ran out first (the peer timeout is 1.5 s); lane 0's would at 2.8 s, but
  // lane 0 was told, and dropped what it had in flight with lane 1.
  REQUIRE(std::chrono::steady_clock::now() - first < 2600ms);
  std::this_thread::sleep_for(100ms);
  const PeerCounters after = a.counters()[2];
  REQUIRE(after.in_flight_bytes == 0);
  REQUIRE(after.queued_bytes == 0);
  std::this_thread::sleep_for(1500ms);  // past lane 0's own deadline: nothing more to report
  REQUIRE(losses.load() == 1);
  // b's heartbeats are heard on every lane again: the next silence is a new one.
  REQUIRE(wait_for([&] { return !a.counters()[2].lost; }, 3s, "a to hear b again"));
  REQUIRE(a.send(2, kJob, 1, 4, message(4)));  // lane 1 again
  REQUIRE(wait_for([&] { return losses.load() >= 2; }, 5s, "a to report the second silence"));
  REQUIRE(at_b.count() == 0);
}

TEST_CASE("a port held by another endpoint's lanes is refused, not shared") {
  Endpoint a(config(1, 2));
  for (size_t lanes : {1, 2}) {
    EndpointConfig c = config(3, lanes);
    c.port = a.port();
    // Joining a's group (the kernel would allow it, same user) would steal a's datagrams.
    REQUIRE_THROWS_WITH(Endpoint(c), Catch::Contains("cannot bind UDP 127.0.0.1:" +
                                                      std::to_string(a.port())));
  }
}

TEST_CASE("lanes draw their counters from disjoint blocks") {
  LaneShared shared(1 << 20);
  std::vector<std::vector<uint64_t>> drawn(4);
  std::vector<std::thread> lanes;
  for (auto& mine : drawn)
    lanes.emplace_back([&shared, &mine] {
      for (int i = 0; i < 2000; ++i) mine.push_back(shared.next_block());
    });
  for (auto& t : lanes) t.join();
  std::set<uint64_t> starts;
  for (auto& mine : drawn)
    for (uint64_t start : mine) {
      REQUIRE(start % LaneShared::kCounterBlock == 0);
      REQUIRE(starts.insert(start).second);
    }
  // Blocks of kCounterBlock from distinct starts on one grid never overlap.
  REQUIRE(starts.size() == 8000);
}
