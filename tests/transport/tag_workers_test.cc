// Tags sealed and checked on several threads (transport/endpoint/tag_workers.h): the fork-join
// runs every item once and returns only when all are done; a batch's untagged slots leave with
// tags any node can check, also when the key cache starts over while they are looked up; and
// endpoints with tag workers deliver every message whole and once, to and from endpoints
// without them, while a forged datagram under a cached key is still refused. Real sockets on
// loopback, ports bound to 0; every wait has a deadline and says what it waited for.
#include <catch2/catch.hpp>

#include "tests/skip.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <thread>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "transport/endpoint/datagram_batch.h"
#include "transport/endpoint/endpoint.h"
#include "transport/endpoint/tag_workers.h"
#include "transport/wire/datagram.h"
#include "tests/loopback_udp.h"
#include "tests/transport/loopback.h"
#include "tests/transport/received_messages.h"
#include "tests/wait_for.h"

using namespace dtrain::transport;
using namespace std::chrono_literals;
using dtrain::testing::wait_for;
using Received = dtrain::testing::ReceivedMessages;

namespace {

constexpr uint64_t kJob = 7;

ClusterKey key_of(uint8_t fill) {
  ClusterKey k;
  k.fill(fill);
  return k;
}

EndpointConfig config(uint32_t node, size_t tag_threads) {
  EndpointConfig c;
  c.node_id = node;
  c.key = key_of(3);
  c.heartbeat_interval = 100ms;
  c.peer_timeout = 3000ms;
  c.tag_threads = tag_threads;
  return c;
}

std::vector<uint8_t> pattern(size_t size, uint64_t seed) {
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = uint8_t((i * 131 + seed * 7919) >> 3);
  return out;
}


// A UDP socket on loopback to receive what a DatagramBatch sends.
using Sink = dtrain::testing::LoopbackUdp;

}  // namespace

TEST_CASE("the tag workers run every item exactly once and return when all are done") {
  for (size_t threads : {0, 1, 3}) {
    TagWorkers workers(threads, "test-tag");
    CHECK(workers.threads() == threads);
    for (size_t n : {0, 1, 2, 63, 64, 1000}) {
      INFO(threads << " workers, " << n << " items");
      for (int round = 0; round < 200; ++round) {
        // On the caller's stack: the workers must be done with it when run() returns.
        std::vector<std::atomic<int>> calls(n);
        for (auto& c : calls) c = 0;
        workers.run(n, [&](size_t i) { calls[i].fetch_add(1, std::memory_order_relaxed); });
        size_t wrong = 0;
        for (auto& c : calls) wrong += c.load() != 1;
        REQUIRE(wrong == 0);
      }
    }
  }
}

// Two items: one the caller takes waits (up to 5 s) until a worker has run an item, so it ends
// at once only if a worker takes part. Returns whether one did (workers may take both items).
bool a_worker_took_part(TagWorkers& workers) {
  const auto caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  workers.run(2, [&](size_t) {
    if (std::this_thread::get_id() != caller) {
      ++elsewhere;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (elsewhere == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100us);
  });
  return elsewhere >= 1;
}

TEST_CASE("the workers take items beside the caller, and are counted") {
  TagWorkers workers(1, "test-tag");
  CHECK(workers.items_by_workers() == 0);
  REQUIRE(a_worker_took_part(workers));
  CHECK(workers.items_by_workers() >= 1);
  CHECK(workers.items_by_workers() <= 2);
  TagWorkers none(0, "test-tag");
  none.run(10, [](size_t) {});
  CHECK(none.items_by_workers() == 0);  // without workers the caller runs them all
}

TEST_CASE("the batches shared with the workers are counted, with their items") {
  TagWorkers workers(2, "test-tag");
  workers.run(1, [](size_t) {});  // one item: the caller alone, nothing shared
  CHECK(workers.batches_shared() == 0);
  CHECK(workers.items_shared() == 0);
  workers.run(16, [](size_t) {});
  workers.run(40, [](size_t) {});
  CHECK(workers.batches_shared() == 2);
  CHECK(workers.items_shared() == 56);
  TagWorkers none(0, "test-tag");
  none.run(10, [](size_t) {});
  CHECK(none.batches_shared() == 0);
}

TEST_CASE("the tag workers sleep between bursts and wake for the next one") {
  TagWorkers workers(2, "test-tag");
  for (int burst = 0; burst < 3; ++burst) {
    INFO("burst " << burst);
    std::this_thread::sleep_for(5ms);  // longer than the workers spin: they are asleep
    CHECK(a_worker_took_part(workers));
  }
}

TEST_CASE("a batch's untagged slots leave sealed, also when the key cache starts over") {
  Authenticator sender(key_of(5), false, true, 1);
  Authenticator receiver(key_of(5), false, true, 2);
  TagWorkers workers(2, "test-tag");
  Sink sink;
  const asio::ip::udp::endpoint to(asio::ip::make_address("127.0.0.1"), sink.port);
  const Aead aead = sender.aes_gcm() ? Aead::kAes256Gcm : Aead::kXChaCha20Poly1305;
  // Fill the sender's key cache to just under where it starts over (4096 keys), so that the
  // batch's own lookups clear it half way.
  const int kBatch = int(DatagramBatch::kMax) - 1;  // flushed by hand below
  for (uint64_t boot = 1; boot <= 4096 - kBatch / 2; ++boot) sender.seal_key({1, 2, boot, 1, aead});
  const uint64_t before = sender.cache_generation();
  DatagramBatch batch(false);
  batch.set_tagging(&sender, &workers);
  std::vector<std::vector<uint8_t>> bodies;
  for (int i = 0; i < kBatch; ++i) {
    bodies.push_back(pattern(8 * (10 + i), i));
    // A new boot each: kBatch keys the cache has not seen.
    const DatagramHeader h{1, 2, 100000 + uint64_t(i), uint64_t(i + 1), aead};
    batch.commit_untagged(sink.fd, frame_datagram(h, bodies.back().data(), bodies.back().size(),
                                                  sender, batch.next(to, nullptr)));
  }
  batch.flush(sink.fd);
  CHECK(sender.cache_generation() != before);  // it did start over during the lookups
  for (int i = 0; i < kBatch; ++i) {
    const std::vector<uint8_t> d = sink.next();
    REQUIRE(d.size() == kHeaderBytes + bodies[i].size() + kTagBytes);
    DatagramHeader h;
    DropReason reason;
    REQUIRE(read_header(d.data(), d.size(), 65000, h, reason));
    CHECK(h.counter == uint64_t(i + 1));
    CHECK(receiver.verify(d.data(), d.size() - kTagBytes, h.tag_context()));
    CHECK(std::equal(bodies[i].begin(), bodies[i].end(), d.begin() + kHeaderBytes));
  }
}

TEST_CASE("a link that switches AEAD within one batch: every slot sealed under its own") {
  // The first datagrams of a link go out with XChaCha20-Poly1305; once the peer's heartbeat
  // says it accepts AES-256-GCM the next ones use that, possibly in the same batch. One cache
  // entry holds both keys (it used to be reset, under slots still to be sealed: an abort).
  Authenticator sender(key_of(5), false, true, 1);
  if (!sender.aes_gcm())
    DTRAIN_SKIP("this CPU has no AES-NI: AES-256-GCM cannot be used, nothing to switch to");
  Authenticator receiver(key_of(5), false, true, 2);
  TagWorkers workers(2, "test-tag");
  Sink sink;
  const asio::ip::udp::endpoint to(asio::ip::make_address("127.0.0.1"), sink.port);
  DatagramBatch batch(false);
  batch.set_tagging(&sender, &workers);
  const std::vector<uint8_t> body = pattern(1000, 3);
  for (uint64_t i = 1; i <= 6; ++i) {
    const Aead aead = i <= 3 ? Aead::kXChaCha20Poly1305 : Aead::kAes256Gcm;
    batch.commit_untagged(sink.fd, frame_datagram({1, 2, 77, i, aead}, body.data(), body.size(),
                                                  sender, batch.next(to, nullptr)));
  }
  batch.flush(sink.fd);
  for (uint64_t i = 1; i <= 6; ++i) {
    const std::vector<uint8_t> d = sink.next();
    DatagramHeader h;
    DropReason reason;
    REQUIRE(read_header(d.data(), d.size(), 65000, h, reason));
    CHECK(h.counter == i);
    CHECK(h.aead == (i <= 3 ? Aead::kXChaCha20Poly1305 : Aead::kAes256Gcm));
    CHECK(receiver.verify(d.data(), d.size() - kTagBytes, h.tag_context()));
  }
}

TEST_CASE("endpoints with tag workers deliver every message whole and once, to and from others") {
  const size_t kSizes[] = {1, 1400, 46 * 1400 + 7, 3 << 20};
  for (const auto& [a_threads, b_threads] :
       {std::pair<size_t, size_t>{2, 2}, {2, 0}, {0, 2}, {1, 1}}) {
    INFO("tag threads: sender " << a_threads << ", receiver " << b_threads);
    Endpoint a(config(1, a_threads)), b(config(2, b_threads));
    Received at_a, at_b;
    dtrain::testing::connect_both_ways(a, at_a, b, at_b, kJob);
    // Both ways at once, so each endpoint seals and checks in the same batches.
    for (uint64_t m = 0; m < 4; ++m) {
      REQUIRE(a.send(2, kJob, 1, m, std::make_shared<const std::vector<uint8_t>>(pattern(kSizes[m], m))));
      REQUIRE(b.send(1, kJob, 2, m, std::make_shared<const std::vector<uint8_t>>(pattern(kSizes[m], m + 9))));
    }
    REQUIRE(wait_for([&] { return at_b.count() == 4 && at_a.count() == 4; }, 20s,
                     "4 messages each way"));
    for (uint64_t m = 0; m < 4; ++m) {
      std::lock_guard<std::mutex> la(at_a.mutex), lb(at_b.mutex);
      CHECK(at_b.messages[m] == pattern(kSizes[m], m));
      CHECK(at_a.messages[m] == pattern(kSizes[m], m + 9));
    }
    CHECK(at_a.deliveries == 4);
    CHECK(at_b.deliveries == 4);
    // Tags that fail count under the unknown sender (nothing in them is trusted).
    CHECK(a.counters()[Endpoint::kUnknownSender].dropped(DropReason::kBadTag) == 0);
    CHECK(b.counters()[Endpoint::kUnknownSender].dropped(DropReason::kBadTag) == 0);
    // The workers took part (thousands of batches, each a chance), and only where there are any.
    CHECK((a.tags_on_workers() > 0) == (a_threads > 0));
    CHECK((b.tags_on_workers() > 0) == (b_threads > 0));
  }
}

TEST_CASE("with tag workers, a forged datagram under a cached key is refused") {
  // Node 1 tags with XChaCha20-Poly1305 only, so the key node 2 caches is known to be that
  // AEAD's (a forgery under the other would miss the cache and be checked by handle()).
  EndpointConfig c1 = config(1, 0);
  c1.allow_aes256gcm = false;
  Endpoint a(c1), b(config(2, 2));
  Received at_b;
  b.add_job(kJob);
  a.add_peer(2, "127.0.0.1", b.port());
  b.add_peer(1, "127.0.0.1", a.port());
  a.start([](Delivery&&) {});
  b.start(at_b.handler());
  // Real traffic first: node 2 caches the key of node 1's datagrams.
  REQUIRE(a.send(2, kJob, 1, 1, std::make_shared<const std::vector<uint8_t>>(pattern(5000, 1))));
  REQUIRE(wait_for([&] { return at_b.count() == 1; }, 5s, "node 1's first message"));
  // The same header (sender, receiver, node 1's boot, counters far ahead), tagged under another
  // key, with a body that is a valid envelope of nothing much: were a forged tag taken, it would
  // count as malformed or arrive. Sent in bursts (sendmmsg) until node 2's workers have checked
  // some of them under the cached key (with one datagram per receive the I/O thread checks it).
  Authenticator forger(key_of(4), false, /*allow_aes_gcm=*/false);
  const std::vector<uint8_t> body = pattern(64, 2);
  std::vector<std::vector<uint8_t>> forged(32);
  const uint64_t before = b.tags_on_workers();
  const auto unknown = [&] { return b.counters()[Endpoint::kUnknownSender]; };
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in to = dtrain::testing::loopback(b.port());
  uint64_t counter = 1u << 30;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (b.tags_on_workers() == before && std::chrono::steady_clock::now() < deadline) {
    mmsghdr msgs[32] = {};
    iovec iov[32];
    for (size_t i = 0; i < forged.size(); ++i) {
      seal_datagram({1, 2, a.boot_id(), ++counter, Aead::kXChaCha20Poly1305}, body.data(),
                    body.size(), forger, forged[i]);
      iov[i] = {forged[i].data(), forged[i].size()};
      msgs[i].msg_hdr.msg_name = &to;
      msgs[i].msg_hdr.msg_namelen = sizeof to;
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    ::sendmmsg(fd, msgs, 32, 0);
    std::this_thread::sleep_for(20us);
  }
  ::close(fd);
  REQUIRE(b.tags_on_workers() > before);  // else: the workers never took part in 10 s of bursts
  REQUIRE(wait_for([&] { return unknown().dropped(DropReason::kBadTag) > 0; }, 5s,
                   "forged datagrams counted as bad_tag"));
  std::this_thread::sleep_for(100ms);  // the last bursts are judged
  // Every forged datagram that was judged failed its tag: none was taken as held.
  PeerCounters u = unknown();
  uint64_t all = 0;
  for (uint64_t d : u.drops) all += d;
  CHECK(all == u.dropped(DropReason::kBadTag));
  CHECK(b.counters()[1].dropped(DropReason::kReplayed) == 0);
  CHECK(at_b.count() == 1);
  // And node 1 still gets through.
  REQUIRE(a.send(2, kJob, 1, 2, std::make_shared<const std::vector<uint8_t>>(pattern(5000, 2))));
  REQUIRE(wait_for([&] { return at_b.count() == 2; }, 5s, "node 1's second message"));
}
