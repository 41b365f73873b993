// The endpoint's data-plane defences and room rules, with real sockets on loopback in one
// process (ports bound to 0 and read back):
// - a datagram captured on its way to one node and replayed at another is refused and counted;
// - a datagram from an older boot of a peer is refused, announced or not;
// - a chunk refused by reassembly for want of room is sent again, not lost;
// - a relay backlog towards a peer that takes nothing stays bounded (chunks to be relayed are
//   not taken meanwhile), and once that peer is declared lost everything still arrives.
// Every wait has a deadline and says what it was waiting for.
#include <catch2/catch.hpp>

#include "tests/skip.h"

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "transport/endpoint/endpoint.h"
#include "tests/transport/udp_tap.h"
#include "tests/wait_for.h"

using namespace dtrain::transport;
using namespace std::chrono_literals;
using dtrain::testing::wait_for;

namespace {

constexpr uint64_t kJob = 7;

EndpointConfig config(uint32_t node) {
  EndpointConfig c;
  c.node_id = node;
  c.key.fill(3);
  c.heartbeat_interval = 100ms;
  c.peer_timeout = 3000ms;
  return c;
}

// What one endpoint delivered, by (origin, message id).
struct Inbox {
  std::mutex mutex;
  std::map<std::pair<uint32_t, uint64_t>, int> seen;
  Endpoint::MessageHandler handler() {
    return [this](Delivery&& d) {
      std::lock_guard<std::mutex> lock(mutex);
      ++seen[{d.origin, d.message_id}];
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return seen.size();
  }
  bool each_once(size_t expected) {
    std::lock_guard<std::mutex> lock(mutex);
    if (seen.size() != expected) return false;
    for (auto& [key, n] : seen)
      if (n != 1) return false;
    return true;
  }
};

uint64_t drops(Endpoint& e, uint32_t peer, DropReason reason) {
  return e.counters()[peer].dropped(reason);
}

Endpoint::Bytes payload(size_t size, uint8_t fill) {
  return std::make_shared<const std::vector<uint8_t>>(size, fill);
}

using Tap = dtrain::testing::UdpTap;

}  // namespace

TEST_CASE("a datagram captured towards one node is refused at another, and counted") {
  Endpoint a(config(1)), c(config(3));
  Tap tap;  // stands for node 2: what node 1 sends it, sealed for node 2, is recorded
  Inbox at_c;
  a.add_job(kJob);
  c.add_job(kJob);
  a.add_peer(2, "127.0.0.1", tap.port());
  a.add_peer(3, "127.0.0.1", c.port());
  c.add_peer(1, "127.0.0.1", a.port());
  a.start([](Delivery&&) {});
  c.start(at_c.handler());
  REQUIRE(a.send(2, kJob, 1, 100, payload(5000, 1)));
  REQUIRE(wait_for([&] { return tap.captured().size() >= 4; }, 5s, "node 1's chunks to node 2"));
  const auto captured = tap.captured();
  for (const auto& d : captured) tap.replay(d, c.port());
  REQUIRE(wait_for([&] { return drops(c, 1, DropReason::kWrongReceiver) >= captured.size(); }, 5s,
                   "node 3 to count every replayed datagram as wrong_receiver"));
  REQUIRE(at_c.count() == 0);
  REQUIRE(drops(c, 1, DropReason::kReplayed) == 0);  // refused for the receiver, not by chance
  // The same sender's own datagrams to node 3 are taken.
  REQUIRE(a.send(3, kJob, 1, 101, payload(5000, 2)));
  REQUIRE(wait_for([&] { return at_c.count() == 1; }, 5s, "node 1's message to node 3"));
}

TEST_CASE("datagrams from an older boot of a peer are refused, announced or not") {
  Endpoint b(config(2));
  Inbox at_b;
  b.add_job(kJob);
  b.start(at_b.handler());
  Tap tap(b.port());  // between the first boot of node 1 and node 2: records and forwards
  std::vector<std::vector<uint8_t>> first_boot;
  {
    Endpoint a1(config(1));
    a1.add_peer(2, "127.0.0.1", tap.port());
    b.add_peer(1, "127.0.0.1", a1.port());
    a1.start([](Delivery&&) {});
    REQUIRE(a1.send(2, kJob, 1, 1, payload(3000, 1)));
    REQUIRE(wait_for([&] { return at_b.count() == 1; }, 5s, "the first boot's message"));
    first_boot = tap.captured();
  }
  // Node 1 restarts (a new boot): its datagrams are taken, and the first boot's are refused.
  Endpoint a2(config(1));
  a2.add_peer(2, "127.0.0.1", b.port());
  b.add_peer(1, "127.0.0.1", a2.port());
  a2.start([](Delivery&&) {});
  REQUIRE(a2.send(2, kJob, 1, 2, payload(3000, 2)));
  REQUIRE(wait_for([&] { return at_b.count() == 2; }, 5s, "the second boot's message"));
  for (const auto& d : first_boot) tap.replay(d, b.port());
  REQUIRE(wait_for([&] { return drops(b, 1, DropReason::kStaleBoot) >= first_boot.size(); }, 5s,
                   "node 2 to count every datagram of node 1's first boot as stale_boot"));
  // Once the controller announces a boot, every other boot is refused, newer ones too.
  b.announce_boot(1, a2.boot_id() ^ 1);
  REQUIRE(a2.send(2, kJob, 1, 3, payload(3000, 3)));
  REQUIRE(wait_for([&] { return drops(b, 1, DropReason::kStaleBoot) > first_boot.size(); }, 5s,
                   "node 2 to refuse a boot other than the announced one"));
  b.announce_boot(1, a2.boot_id());
  REQUIRE(wait_for([&] { return at_b.count() == 3; }, 5s,
                   "the message of the announced boot (sent again)"));
  REQUIRE(at_b.each_once(3));
}

// Three nodes exchange three rounds of messages; node 1 runs without AES-256-GCM (as a CPU
// without AES-NI would). Calls check(n1, n2, n3) with every message delivered once.
template <class Check>
void three_nodes_one_without_aes_gcm(Check check) {
  EndpointConfig c1 = config(1);
  c1.allow_aes256gcm = false;
  Endpoint n1(c1), n2(config(2)), n3(config(3));
  std::vector<Endpoint*> all{&n1, &n2, &n3};
  Inbox inbox[3];
  for (Endpoint* a : all) {
    a->add_job(kJob);
    for (Endpoint* b : all)
      if (a != b) a->add_peer(b->node_id(), "127.0.0.1", b->port());
  }
  for (int i = 0; i < 3; ++i) all[i]->start(inbox[i].handler());
  uint64_t id = 0;
  for (int round = 0; round < 3; ++round) {  // the first round may leave before any heartbeat
    for (Endpoint* a : all)
      for (Endpoint* b : all)
        if (a != b) REQUIRE(a->send(b->node_id(), kJob, a->node_id(), ++id, payload(20000, 9)));
    REQUIRE(wait_for([&] { return inbox[0].count() + inbox[1].count() + inbox[2].count() == id; },
                     10s, "every message of round " + std::to_string(round)));
    std::this_thread::sleep_for(150ms);  // past a heartbeat interval
  }
  for (int i = 0; i < 3; ++i) REQUIRE(inbox[i].each_once(size_t(id / 3)));
  check(n1, n2, n3);
}

TEST_CASE("a node without AES-256-GCM is spoken to with XChaCha20-Poly1305; nothing is refused") {
  three_nodes_one_without_aes_gcm([](Endpoint& n1, Endpoint& n2, Endpoint& n3) {
    REQUIRE(n2.counters()[1].aead == Aead::kXChaCha20Poly1305);
    REQUIRE(n3.counters()[1].aead == Aead::kXChaCha20Poly1305);
    REQUIRE(n1.counters()[2].aead == Aead::kXChaCha20Poly1305);
    // A tag that fails is counted before its sender is trusted: under the unknown sender. Node
    // 1 was never sent an AES-256-GCM datagram it could not check.
    for (Endpoint* a : {&n1, &n2, &n3})
      REQUIRE(drops(*a, Endpoint::kUnknownSender, DropReason::kBadTag) == 0);
  });
}

TEST_CASE("nodes that both accept AES-256-GCM agree on it through their heartbeats") {
  if (!Authenticator(ClusterKey{}, false).aes_gcm())
    DTRAIN_SKIP("this CPU has no AES-256-GCM (no AES-NI/CLMUL)");
  three_nodes_one_without_aes_gcm([](Endpoint&, Endpoint& n2, Endpoint& n3) {
    REQUIRE(n2.counters()[3].aead == Aead::kAes256Gcm);
    REQUIRE(n3.counters()[2].aead == Aead::kAes256Gcm);
  });
}

TEST_CASE("chunks refused by reassembly for want of room are sent again, not lost") {
  EndpointConfig cb = config(2);
  cb.reassembly_bytes = 150 * 1000;  // room for one of the 100 KB messages at a time
  // A small window keeps each sender's first burst well inside node 2's socket buffer.
  EndpointConfig c1 = config(1), c3 = config(3);
  c1.credit_window = c3.credit_window = 32 * 1024;
  Endpoint b(cb), a1(c1), a3(c3);
  Inbox at_b;
  b.add_job(kJob);
  for (Endpoint* a : {&a1, &a3}) {
    a->add_peer(2, "127.0.0.1", b.port());
    b.add_peer(a->node_id(), "127.0.0.1", a->port());
    a->start([](Delivery&&) {});
  }
  for (uint64_t m = 1; m <= 12; ++m)
    for (Endpoint* a : {&a1, &a3})
      REQUIRE(a->send(2, kJob, a->node_id(), m, payload(100 * 1000, uint8_t(m))));
  // Node 2 reads nothing until the first chunks of both senders wait in its socket: whichever
  // message it takes first holds 100 KB, so the other finds no room. Left to timing, one sender
  // could finish before the other began and the refusal would never happen (it once did not).
  auto in_flight = [](Endpoint& a) { return a.counters()[2].in_flight_bytes > 0; };
  REQUIRE(wait_for([&] { return in_flight(a1) && in_flight(a3); }, 10s,
                   "both senders' first chunks on their way to node 2"));
  b.start(at_b.handler());
  REQUIRE(wait_for([&] { return at_b.count() == 24; }, 30s, "all 24 messages at node 2"));
  REQUIRE(at_b.each_once(24));
  // The path under test ran: chunks were refused for room, and came again.
  REQUIRE(drops(b, 1, DropReason::kNoRoom) + drops(b, 3, DropReason::kNoRoom) > 0);
  REQUIRE(drops(b, 1, DropReason::kMalformed) + drops(b, 3, DropReason::kMalformed) == 0);
}

TEST_CASE("a relay backlog towards a peer that takes nothing stays bounded") {
  EndpointConfig cb = config(2);
  cb.relay_queue_bytes = 512 * 1024;
  cb.peer_timeout = 2000ms;
  Endpoint b(cb), a(config(1));
  Tap dead;  // node 3: never acknowledges, never answers
  Inbox at_b;
  b.add_job(kJob);
  a.add_peer(2, "127.0.0.1", b.port());
  b.add_peer(1, "127.0.0.1", a.port());
  b.add_peer(3, "127.0.0.1", dead.port());
  a.start([](Delivery&&) {});
  // Node 2 relays everything from node 1 on to node 3, as a mesh relay does.
  b.start([&](Delivery&& d) {
    auto bytes = std::make_shared<const std::vector<uint8_t>>(d.bytes);
    b.send(3, d.job_id, d.origin, d.message_id, bytes, 0ms, Endpoint::SendKind::kRelay);
    at_b.handler()(std::move(d));
  });
  for (uint64_t m = 1; m <= 40; ++m) REQUIRE(a.send(2, kJob, 1, m, payload(100 * 1000, 1), 30s));
  size_t most_towards_3 = 0;
  bool lost = false;
  REQUIRE(wait_for(
      [&] {
        auto c = b.counters();
        if (!c[3].lost)
          most_towards_3 = std::max<size_t>(most_towards_3, c[3].queued_bytes + c[3].in_flight_bytes);
        lost = lost || c[3].lost;
        return at_b.count() == 40;
      },
      30s, "all 40 messages at node 2 (node 3 declared lost on the way)"));
  REQUIRE(lost);
  REQUIRE(at_b.each_once(40));
  // Bounded: the cap plus the one message whose last chunk was taken under it, not 40 messages
  // (4 MB). A relay sent from a handler on the I/O thread is queued at once, so its bytes count
  // before the next chunk is taken. (When relays were posted, the I/O thread finished its
  // receive batch first: with coalesced receives that let several messages complete under the
  // cap, 970,848 bytes.)
  INFO("largest relay backlog towards node 3: " << most_towards_3 << " bytes");
  REQUIRE(most_towards_3 < 512 * 1024 + 120 * 1000);
  REQUIRE(drops(b, 1, DropReason::kNoRoom) > 0);
}

// MeshNode's quick-restart path: from on_lost (the I/O thread) it adds the lost peer back and
// relays the messages it may have missed at once. The relay must find the peer alive: were
// add_peer queued behind the send, the send would see a lost link and drop the message.
TEST_CASE("a peer added back from on_lost gets what is relayed to it at once") {
  EndpointConfig ca = config(1);
  ca.peer_timeout = 300ms;
  Endpoint a(ca), b(config(2));
  Tap silent;  // where node 2 first seems to be: it never answers, so node 1 declares it lost
  // Node 2's heartbeats go to a tap too: had they reached node 1, node 1 would hear its peer
  // and declare nothing lost until node 2 gave up on it first (its 3 s timeout).
  Tap elsewhere;
  Inbox at_b;
  b.add_job(kJob);
  b.add_peer(1, "127.0.0.1", elsewhere.port());
  a.add_peer(2, "127.0.0.1", silent.port());
  std::atomic<int> losses{0};
  std::atomic<int> queued{-1};  // -1 until the handler's send returned, then 1 taken or 0 not
  a.start([](Delivery&&) {},
          [&](uint32_t peer) {
            if (peer != 2 || losses++ > 0) return;
            a.add_peer(2, "127.0.0.1", b.port());  // back, at its real address
            queued = a.send(2, kJob, 1, 500, payload(20 * 1000, 5), 0ms,
                            Endpoint::SendKind::kRelay) ? 1 : 0;
          });
  b.start(at_b.handler());
  // The loss is counted before the handler adds the peer back and sends: wait for the send.
  REQUIRE(wait_for([&] { return queued.load() >= 0; }, 5s,
                   "node 1 to declare node 2 lost and relay to it from on_lost"));
  REQUIRE(queued == 1);
  REQUIRE(wait_for([&] { return at_b.count() == 1; }, 5s, "the relayed message at node 2"));
  REQUIRE(at_b.each_once(1));
}
