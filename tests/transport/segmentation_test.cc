// UDP segmentation offload in the endpoint (transport/endpoint/datagram_batch.h): which
// datagrams leave together as one GSO send, that messages arrive whole with it on or off at
// either end, that a coalesced (GRO) run is cut back into datagrams each judged on its own, and
// that the credit a link offers fits the receive buffer the kernel granted. Real sockets on
// loopback, ports bound to 0; every wait has a deadline and says what it waited for.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "transport/endpoint/datagram_batch.h"
#include "transport/endpoint/endpoint.h"
#include "tests/transport/loopback.h"
#include "tests/skip.h"
#include "tests/transport/received_messages.h"
#include "tests/wait_for.h"

using namespace dtrain::transport;
using namespace std::chrono_literals;
using dtrain::testing::wait_for;
using Received = dtrain::testing::ReceivedMessages;

namespace {

constexpr uint64_t kJob = 7;

std::vector<std::pair<size_t, size_t>> firsts_and_counts(const std::vector<SegmentRun>& runs) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const SegmentRun& r : runs) out.push_back({r.first, r.count});
  return out;
}

EndpointConfig config(uint32_t node, bool segmentation) {
  EndpointConfig c;
  c.node_id = node;
  c.key.fill(3);
  c.heartbeat_interval = 100ms;
  c.peer_timeout = 3000ms;
  c.segmentation = segmentation;
  return c;
}

// `count` datagrams of `size` bytes of junk to `port` on loopback in one GSO send; false (and
// why) when the kernel refuses it.
bool send_gso(uint16_t port, size_t count, size_t size, std::string* why) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in to = dtrain::testing::loopback(port);
  std::vector<uint8_t> junk(count * size, 'X');
  iovec iov{junk.data(), junk.size()};
  alignas(cmsghdr) char control[kSegmentControlBytes];
  msghdr m{};
  m.msg_name = &to;
  m.msg_namelen = sizeof to;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  set_segment_size(m, control, size);
  const ssize_t sent = ::sendmsg(fd, &m, 0);
  if (sent < 0 && why) *why = std::strerror(errno);
  ::close(fd);
  return sent >= 0;
}

// Whether this kernel takes UDP GSO sends at all (the endpoint quietly sends datagram by
// datagram where it does not).
bool kernel_takes_gso() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in here = dtrain::testing::loopback(0);
  socklen_t len = sizeof here;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&here), sizeof here) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&here), &len) == 0;
  const bool takes = bound && send_gso(ntohs(here.sin_port), 2, 100, nullptr);
  ::close(fd);
  return takes;
}

// Node 1 (`a`) sends to node 2 (`b`), which runs the job and records what arrives.
void connect(Endpoint& a, Endpoint& b, Received& at_b) {
  b.add_job(kJob);
  a.add_peer(2, "127.0.0.1", b.port());
  b.add_peer(1, "127.0.0.1", a.port());
  a.start([](Delivery&&) {});
  b.start(at_b.handler());
}

std::vector<uint8_t> pattern(size_t size, uint64_t seed) {
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = uint8_t((i * 131 + seed * 7919) >> 3);
  return out;
}

}  // namespace

TEST_CASE("datagrams to one peer leave in runs of equal segments, a shorter one ending a run") {
  const size_t full = 1400;
  // Peer 0: five full and a short one; peer 1: two full; peer 0 again: one.
  const std::vector<size_t> sizes = {full, full, full, full, full, 300, full, full, 64};
  const std::vector<size_t> to = {0, 0, 0, 0, 0, 0, 1, 1, 0};
  CHECK(firsts_and_counts(segment_runs(sizes, to, true)) ==
        std::vector<std::pair<size_t, size_t>>{{0, 6}, {6, 2}, {8, 1}});
  CHECK(segment_runs(sizes, to, true)[0].segment == full);
  // Off: one datagram per message.
  CHECK(segment_runs(sizes, to, false).size() == sizes.size());
  // A larger datagram after a full one starts a new run; so does one after a short one.
  CHECK(firsts_and_counts(segment_runs({800, 800, 1400, 200, 200}, {0, 0, 0, 0, 0}, true)) ==
        std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 2}, {4, 1}});
  // Runs stop at kMaxSegments datagrams and at kMaxRunBytes.
  const std::vector<size_t> many(100, 100), same(100, 0);
  const auto capped = segment_runs(many, same, true);
  REQUIRE(capped.size() == 2);
  CHECK(capped[0].count == kMaxSegments);
  const std::vector<size_t> big(60, 1408), one(60, 0);
  const auto by_bytes = segment_runs(big, one, true);
  CHECK(by_bytes[0].count == kMaxRunBytes / 1408);
  for (const SegmentRun& r : by_bytes) CHECK(r.count * 1408 <= kMaxRunBytes);
}

TEST_CASE("messages arrive whole and once with segmentation on or off at either end") {
  if (!kernel_takes_gso())
    DTRAIN_SKIP("this kernel refuses UDP GSO: segmentation would be off at both ends");
  for (const auto& [a_on, b_on] : {std::pair{true, true}, {true, false}, {false, true}}) {
    INFO("sender segmentation " << a_on << ", receiver " << b_on);
    Endpoint a(config(1, a_on)), b(config(2, b_on));
    Received at_b;
    connect(a, b, at_b);
    // Sizes that end on a full chunk, one byte past it, and several runs long.
    const size_t c = a.chunk_payload();
    const std::vector<size_t> sizes = {1, c, c + 1, 46 * c, 46 * c + 7, 3 << 20};
    for (size_t m = 0; m < sizes.size(); ++m)
      REQUIRE(a.send(2, kJob, 1, m, std::make_shared<const std::vector<uint8_t>>(pattern(sizes[m], m))));
    REQUIRE(wait_for([&] { return at_b.count() == sizes.size(); }, 20s, "every message at node 2"));
    std::lock_guard<std::mutex> lock(at_b.mutex);
    CHECK(at_b.deliveries == int(sizes.size()));
    for (size_t m = 0; m < sizes.size(); ++m) CHECK(at_b.messages[m] == pattern(sizes[m], m));
  }
}

TEST_CASE("nodes of different datagram sizes (data.mtu) take each other's messages whole") {
  // Jumbo frames at one end (9000: 8,904-byte datagrams) or both, the largest at one end, the
  // least MTU at the other (IPv6's 1280); loopback carries them all. (A daemon's controller
  // has every node of a cluster use one data.mtu; the transport takes any mix point to point.)
  // With segmentation off each datagram arrives in its own receive slot, which must hold the
  // largest any node sends.
  const std::vector<std::pair<size_t, size_t>> mtus = {
      {9000, 1500}, {1500, 9000}, {9000, 9000}, {kLargestMtu, 1280}};
  for (bool segmentation : {true, false}) {
    for (const auto& [mtu_a, mtu_b] : mtus) {
      INFO("MTU " << mtu_a << " at node 1, " << mtu_b << " at node 2, segmentation "
                  << segmentation);
      EndpointConfig ca = config(1, segmentation), cb = config(2, segmentation);
      ca.max_datagram = datagram_for_mtu(mtu_a);
      cb.max_datagram = datagram_for_mtu(mtu_b);
      Endpoint a(ca), b(cb);
      Received at_a, at_b;
      dtrain::testing::connect_both_ways(a, at_a, b, at_b, kJob);
      CHECK(a.chunk_payload() == ca.max_datagram - kHeaderBytes - kTagBytes - kChunkFieldBytes);
      const std::vector<size_t> sizes = {1, a.chunk_payload() + 1, 5 * b.chunk_payload() + 3,
                                         3 << 20};
      for (size_t m = 0; m < sizes.size(); ++m) {
        const auto bytes = std::make_shared<const std::vector<uint8_t>>(pattern(sizes[m], m));
        REQUIRE(a.send(2, kJob, 1, m, bytes));
        REQUIRE(b.send(1, kJob, 2, m, bytes));
      }
      REQUIRE(wait_for([&] { return at_b.count() == sizes.size(); }, 20s, "every message at 2"));
      REQUIRE(wait_for([&] { return at_a.count() == sizes.size(); }, 20s, "every message at 1"));
      for (Received* r : {&at_a, &at_b}) {
        std::lock_guard<std::mutex> lock(r->mutex);
        CHECK(r->deliveries == int(sizes.size()));
        for (size_t m = 0; m < sizes.size(); ++m) CHECK(r->messages[m] == pattern(sizes[m], m));
      }
      // Nothing was refused as too long at either end.
      CHECK(a.counters()[Endpoint::kUnknownSender].dropped(DropReason::kOversized) == 0);
      CHECK(b.counters()[Endpoint::kUnknownSender].dropped(DropReason::kOversized) == 0);
    }
  }
}

TEST_CASE("a datagram size past the largest any node takes is refused, naming data.mtu") {
  EndpointConfig c = config(1, true);
  c.max_datagram = kLargestDatagram + 1;
  REQUIRE_THROWS_WITH(Endpoint(c), Catch::Contains("data.mtu") &&
                                       Catch::Contains(std::to_string(kLargestDatagram)));
  c.max_datagram = kLargestDatagram;
  Endpoint largest(c);
  CHECK(largest.chunk_payload() == kLargestDatagram - kHeaderBytes - kTagBytes - kChunkFieldBytes);
}

TEST_CASE("a coalesced run is cut back into datagrams, each judged on its own") {
  Endpoint b(config(2, true));
  b.start([](Delivery&&) {});
  // Three 1001-byte datagrams (not a multiple of 8: the second and third start unaligned) in
  // one GSO send, which the receiving socket takes whole.
  std::string why;
  if (!send_gso(b.port(), 3, 1001, &why))
    DTRAIN_SKIP("this kernel refuses UDP GSO (" << why << "): nothing to cut apart");
  const auto bad_magic = [&] {
    return b.counters()[Endpoint::kUnknownSender].dropped(DropReason::kBadMagic);
  };
  REQUIRE(wait_for([&] { return bad_magic() >= 3; }, 5s, "three datagrams refused for their magic"));
  std::this_thread::sleep_for(100ms);
  CHECK(bad_magic() == 3);  // one per datagram, not one for the run
}

TEST_CASE("the credit a link offers fits the receive buffer the kernel granted") {
  EndpointConfig small = config(2, true);
  small.receive_buffer_bytes = 100 * 1024;
  small.credit_window = 512 * 1024;
  Endpoint b(small), a(config(1, true));
  CHECK(b.credit_window() == 100 * 1024);
  // Over that smaller credit, messages still arrive whole.
  Received at_b;
  connect(a, b, at_b);
  for (uint64_t id = 0; id < 4; ++id)
    REQUIRE(a.send(2, kJob, 1, id, std::make_shared<const std::vector<uint8_t>>(pattern(1 << 20, id))));
  REQUIRE(wait_for([&] { return at_b.count() == 4; }, 20s, "4 messages over a 100 KB credit"));
  std::lock_guard<std::mutex> lock(at_b.mutex);
  for (uint64_t id = 0; id < 4; ++id) CHECK(at_b.messages[id] == pattern(1 << 20, id));
}
