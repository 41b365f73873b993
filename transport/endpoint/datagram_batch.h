#pragma once
// Datagrams leave in batches through one sendmmsg call (a system call per datagram costs more
// than the protocol). The endpoint fills the next slot in place (a datagram is sealed straight
// into it: no copy on the common path) and flushes before each of its handlers returns.
//
// With segmentation (UDP GSO, Linux 4.18+), consecutive datagrams of one size to one peer leave
// as one message that the kernel cuts into datagrams (`segment_runs`): the send path's cost is
// paid once per run instead of once per datagram, and the bytes on the wire are the same
// datagrams. A kernel or device that refuses it turns it off for good and the batch goes out
// datagram by datagram.
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <cstdint>
#include <vector>

#include "transport/endpoint/peer_counters.h"
#include "transport/endpoint/tag_workers.h"
#include "transport/security/authenticator.h"

// Linux's UDP offload options (older C libraries' netinet/udp.h lacks them).
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace dtrain::transport {

// The control bytes of a segmented send (cmsghdr-aligned).
constexpr size_t kSegmentControlBytes = CMSG_SPACE(sizeof(uint16_t));
// Makes `h` a GSO send of `segment`-byte datagrams (the last may be shorter); `control` holds
// its cmsg and must outlive the send.
void set_segment_size(msghdr& h, char (&control)[kSegmentControlBytes], uint16_t segment);
// The control bytes a receive needs for the coalesced-run cmsg.
constexpr size_t kCoalescedControlBytes = CMSG_SPACE(sizeof(int));
// A received message's segment size from its UDP_GRO cmsg; 0: one datagram, not a run.
size_t coalesced_segment_size(const msghdr& h);

// One message of a GSO send: datagrams [first, first + count), each `segment` bytes but the
// last, which may be shorter.
struct SegmentRun {
  size_t first = 0;
  size_t count = 0;
  size_t segment = 0;
};

// The runs a batch leaves in: consecutive datagrams to the same destination, at most
// kMaxSegments of them and kMaxRunBytes in all; a datagram shorter than the run's first ends it.
// Without `segmentation` every run is one datagram.
constexpr size_t kMaxSegments = 64;      // the kernel's UDP_MAX_SEGMENTS before Linux 6.9
constexpr size_t kMaxRunBytes = 65000;   // an IPv4/IPv6 datagram's payload limit, with room
std::vector<SegmentRun> segment_runs(const std::vector<size_t>& sizes,
                                     const std::vector<size_t>& destinations, bool segmentation);

class DatagramBatch {
 public:
  static constexpr size_t kMax = 64;

  explicit DatagramBatch(bool segmentation = true) : segmentation_(segmentation) {}

  // The next slot, addressed; fill it, then commit(). `counters` (may be null) counts it as sent.
  std::vector<uint8_t>& next(const asio::ip::udp::endpoint& to, PeerCounters* counters);
  void commit(int fd);  // flushes when the batch is full
  // commit() for a slot whose last kTagBytes are still to be sealed under `context`
  // (frame_datagram): flush() seals every such slot first, on the workers of set_tagging().
  void commit_untagged(int fd, const TagContext& context);
  // Who seals untagged slots: `auth`'s keys (looked up on the flushing thread), `workers` beside
  // it. Both must outlive the batch's last flush.
  void set_tagging(const Authenticator* auth, TagWorkers* workers) {
    auth_ = auth;
    workers_ = workers;
  }
  // Hands every committed datagram to the kernel. A full socket buffer is a loss like any
  // other: NAKs repair it.
  void flush(int fd);
  // Whether runs still leave as GSO sends (false once the kernel refused one).
  bool segmentation() const { return segmentation_; }
  void set_segmentation(bool on) { segmentation_ = on; }

 private:
  // Sends every run it can; false when the kernel refused a segmented one (then `first_unsent`
  // is the first datagram of that run). A run refused for another reason is skipped (counted
  // as not sent); a full socket buffer ends the batch (a loss like any other: NAKs repair it).
  bool send_runs(int fd, const std::vector<SegmentRun>& runs, size_t& first_unsent);
  void seal_untagged();

  struct Untagged {
    size_t slot;
    TagContext context;
  };

  bool segmentation_;
  const Authenticator* auth_ = nullptr;
  TagWorkers* workers_ = nullptr;
  std::vector<Untagged> untagged_;
  std::vector<const Authenticator::Keys*> keys_;  // untagged_'s, while they are sealed
  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<asio::ip::udp::endpoint> to_;
  std::vector<PeerCounters*> counters_;
  size_t size_ = 0;
};

}  // namespace dtrain::transport
