#pragma once
// Datagrams leave in batches through one sendmmsg call (a system call per datagram costs more
// than the protocol). The endpoint fills the next slot in place (a datagram is sealed straight
// into it: no copy on the common path) and flushes before each of its handlers returns.
#include <asio.hpp>
#include <cstdint>
#include <vector>

#include "transport/endpoint/peer_counters.h"

namespace dtrain::transport {

class DatagramBatch {
 public:
  static constexpr size_t kMax = 64;

  // The next slot, addressed; fill it, then commit(). `counters` (may be null) counts it as sent.
  std::vector<uint8_t>& next(const asio::ip::udp::endpoint& to, PeerCounters* counters);
  void commit(int fd);  // flushes when the batch is full
  // Hands every committed datagram to the kernel. A full socket buffer is a loss like any
  // other: NAKs repair it.
  void flush(int fd);

 private:
  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<asio::ip::udp::endpoint> to_;
  std::vector<PeerCounters*> counters_;
  size_t size_ = 0;
};

}  // namespace dtrain::transport
