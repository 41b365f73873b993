// The pieces of in-node sharing: the message bus delivers to everyone but the sender, exactly
// once; the replica comparison catches a single lost message element.
#include <catch2/catch.hpp>

#include <thread>

#include "core/train/message_bus.h"
#include "core/train/replica_agreement.h"

using namespace dtrain::core;

TEST_CASE("the bus delivers each message to every other worker exactly once, in order") {
  MessageBus bus(3);
  for (int k = 0; k < 5; ++k) {
    auto m = std::make_shared<EncodedMessage>();
    m->id = k;
    bus.publish(k % 3, m);
  }
  auto external = std::make_shared<EncodedMessage>();
  external->id = 99;
  bus.publish(-1, external);  // from another node: every worker gets it
  for (int w = 0; w < 3; ++w) {
    std::vector<Delivery> got = bus.take(w);
    std::vector<uint64_t> ids;
    for (auto& d : got) {
      ids.push_back(d.message->id);
      CHECK(d.device_words == nullptr);  // no GPU sharing on this bus
    }
    std::vector<uint64_t> expected;
    for (uint64_t k = 0; k < 5; ++k)
      if (int(k % 3) != w) expected.push_back(k);
    expected.push_back(99);
    REQUIRE(ids == expected);
    REQUIRE(bus.take(w).empty());
    REQUIRE(bus.pending(w) == 0);
  }
}

TEST_CASE("concurrent publishers lose nothing") {
  const int workers = 4, per_worker = 5000;
  MessageBus bus(workers);
  std::vector<std::thread> threads;
  std::vector<int64_t> received(workers, 0);
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (int k = 0; k < per_worker; ++k) {
        bus.publish(w, std::make_shared<EncodedMessage>());
        if (k % 7 == 0) received[w] += static_cast<int64_t>(bus.take(w).size());
      }
    });
  for (auto& t : threads) t.join();
  for (int w = 0; w < workers; ++w) {
    received[w] += static_cast<int64_t>(bus.take(w).size());
    REQUIRE(received[w] == int64_t(workers - 1) * per_worker);
  }
}

TEST_CASE("replica comparison: rounding passes, one lost element of tau does not") {
  const int64_t n = 1000;
  std::vector<float> a(n), b(n), c(n);
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] = c[i] = 0.01f * float(i % 17) - 0.05f;
  b[10] = std::nextafter(b[10], 1.f);  // one ulp: float rounding
  c[123] -= 1e-3f;                     // a message element of tau = 1e-3 applied twice
  ReplicaAgreement close = compare_replicas({a.data(), b.data()}, n);
  REQUIRE(close.replicas == 2);
  REQUIRE(close.max_abs_diff < 1e-8);
  REQUIRE(close.relative_diff < 1e-7);
  ReplicaAgreement lost = compare_replicas({a.data(), b.data(), c.data()}, n);
  REQUIRE(lost.replicas == 3);
  REQUIRE(lost.worst_index == 123);
  REQUIRE(lost.max_abs_diff == Approx(1e-3).epsilon(1e-3));
  REQUIRE(lost.relative_diff > 1e-5);
}
