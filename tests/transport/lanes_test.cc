// Lanes (transport/endpoint/lane.h): several I/O threads per endpoint, each with a socket on the
// one port, with real sockets on loopback (ports bound to 0 and read back):
// - messages of every size cross both ways exactly once and intact, each handed over on its
//   lane's thread, and the kernel steers every datagram to its own lane's socket;
// - a node with another lane count is refused on every datagram, and counted as wrong_lane;
// - a peer that goes silent is reported lost once, not once per lane, and can be added back;
// - lanes draw their counters (the tags' nonces) from disjoint blocks.
// Every wait has a deadline and says what it was waiting for.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/wait_for.h"
#include "transport/endpoint/endpoint.h"
#include "transport/endpoint/lane.h"

using namespace dtrain::transport;
using namespace std::chrono_literals;
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

uint64_t drops(Endpoint& e, uint32_t peer, DropReason reason) {
  return e.counters()[peer].dropped(reason);
}

}  // namespace

TEST_CASE("three lanes carry messages both ways, each once and intact, on their own threads") {
  Endpoint a(config(1, 3)), b(config(2, 3));
  REQUIRE(a.lanes() == 3);
  Inbox at_a, at_b;
  connect(a, at_a, b, at_b);
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
