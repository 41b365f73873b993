#pragma once
// mode allreduce's ring on the job's mesh (docs/architecture/daemon.md, "The mesh exchange"): the
// parts of each step's ring all-reduce go point to point (MeshPort::send_to), never relayed, as
// RingSegment and RingResult payloads. MeshExchange::sum_over_nodes and the handling of those
// payloads are in mesh_ring.cc.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/collective/ring_rounds.h"
#include "daemon/node/mesh_exchange.h"

namespace dtrain::daemon {

class MeshExchange::RingPostOnMesh : public core::RingPost {
 public:
  RingPostOnMesh(MeshExchange& exchange);
  void send_segment(uint32_t to, int64_t round, const std::vector<uint32_t>& members, int step,
                    const float* values, int64_t n) override;
  // Sent from a network handler: queued without waiting, one payload for every member.
  void send_result(const std::vector<uint32_t>& to, int64_t round,
                   const std::vector<uint32_t>& members, const float* values,
                   int64_t n) override;
  uint64_t bytes_sent() const { return bytes_; }

 private:
  bool send(uint32_t to, const PayloadBytes& bytes, bool wait);
  MeshExchange& exchange_;
  // The member a part of this round could not be sent to: the round's other parts for it are
  // not sent (each would wait out the deadline again); it is lost, or the round times out.
  std::mutex unsent_mutex_;
  int64_t unsent_round_ = -1;
  uint32_t unsent_to_ = 0;
  // From the clock at start, like the mesh's ids: a restarted node's must not repeat its old
  // process's (the receivers' reassemblers would take them for repeats).
  std::atomic<uint64_t> next_id_;
  // Counted apart from the exchange's own (under its publish lock, which a send of the
  // training thread holds while it waits for the link: a network handler must not wait on it).
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace dtrain::daemon
