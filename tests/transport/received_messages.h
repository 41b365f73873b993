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

}  // namespace dtrain::testing
