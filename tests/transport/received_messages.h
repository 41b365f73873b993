#pragma once
// What an endpoint delivered in a transport test: each message's bytes by message id, and how
// many deliveries there were (more than messages: one arrived twice).
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "transport/endpoint/endpoint.h"

namespace dtrain::testing {

struct ReceivedMessages {
  std::mutex mutex;
  std::map<uint64_t, std::vector<uint8_t>> messages;
  int deliveries = 0;

  transport::Endpoint::MessageHandler handler() {
    return [this](transport::Delivery&& d) {
      std::lock_guard<std::mutex> lock(mutex);
      ++deliveries;
      messages[d.message_id] = std::move(d.bytes);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages.size();
  }
};

// Nodes 1 (`a`) and 2 (`b`) on loopback, each running `job` and recording what arrives.
inline void connect_both_ways(transport::Endpoint& a, ReceivedMessages& at_a,
                              transport::Endpoint& b, ReceivedMessages& at_b, uint64_t job) {
  a.add_job(job);
  b.add_job(job);
  a.add_peer(2, "127.0.0.1", b.port());
  b.add_peer(1, "127.0.0.1", a.port());
  a.start(at_a.handler());
  b.start(at_b.handler());
}

}  // namespace dtrain::testing
