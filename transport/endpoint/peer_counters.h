#pragma once
// What an endpoint counts per peer (and for unknown senders): traffic, reliability events,
// drops by reason, queues and the smoothed round trip. Served by /metrics and `status --json`.
#include <array>
#include <cstdint>

#include "transport/wire/datagram.h"

namespace dtrain::transport {

struct PeerCounters {
  uint64_t datagrams_in = 0, bytes_in = 0, datagrams_out = 0, bytes_out = 0;
  uint64_t messages_in = 0, messages_out = 0;
  uint64_t naks_sent = 0, naks_received = 0, retransmits = 0, credit_stalls = 0;
  uint64_t duplicates = 0;
  uint64_t queued_bytes = 0, in_flight_bytes = 0;  // towards this peer, now
  uint64_t credit_offered = 0;  // what this node's acks offer the peer now (CreditTuner)
  std::array<uint64_t, static_cast<size_t>(DropReason::kCount)> drops{};
  double rtt_us = 0;  // smoothed; 0 until the first heartbeat echo
  bool lost = false;
  Aead aead = Aead::kXChaCha20Poly1305;  // the tags of what we send this peer now

  // Another lane's counters of the same peer (transport/endpoint/lane.h): traffic, drops and
  // queues add up; the peer is lost if any lane says so; the round trip is the slowest lane's.
  void add_lane(const PeerCounters& c) {
    datagrams_in += c.datagrams_in, bytes_in += c.bytes_in;
    datagrams_out += c.datagrams_out, bytes_out += c.bytes_out;
    messages_in += c.messages_in, messages_out += c.messages_out;
    naks_sent += c.naks_sent, naks_received += c.naks_received;
    retransmits += c.retransmits, credit_stalls += c.credit_stalls;
    duplicates += c.duplicates;
    queued_bytes += c.queued_bytes, in_flight_bytes += c.in_flight_bytes;
    credit_offered += c.credit_offered;
    for (size_t r = 0; r < drops.size(); ++r) drops[r] += c.drops[r];
    rtt_us = rtt_us > c.rtt_us ? rtt_us : c.rtt_us;
    lost = lost || c.lost;
  }
  void drop(DropReason reason) { ++drops[static_cast<size_t>(reason)]; }
  uint64_t dropped(DropReason reason) const { return drops[static_cast<size_t>(reason)]; }
};

}  // namespace dtrain::transport
