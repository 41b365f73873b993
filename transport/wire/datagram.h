#pragma once
// One datagram on the data channel (wire version 5):
//   0  "DT" | version | flags | sender node (u32) | receiver node (u32) |
//      lane (u8) | lanes (u8) | reserved (u16, 0)
//   16 boot id (u64) | counter (u64)
//   32 the body: a chunk (flags bit 1), or a FlatBuffers Envelope (transport/schema/data.fbs:
//      acks, NAKs, heartbeats), 8-byte aligned
//   .. 16-byte tag over everything before it (transport/security/authenticator.h)
// flags: bit 0 set = the tag is AES-256-GCM, clear = XChaCha20-Poly1305; bit 1 set = the body
// is a chunk; the other bits are 0.
// A chunk's body, every field fixed (48 bytes, then the chunk's data to the tag):
//   0  job id (u64) | link sequence number (u64, > 0) | message id (u64)
//   24 link epoch (u32) | origin node (u32) | index (u32) | count (u32)
//   40 the message's total bytes (u32) | bytes of every chunk but the last (u32)
// (A FlatBuffers table of the same fields took 112 bytes of each 1,408-byte datagram.)
// lane: which of the sender's `lanes` I/O threads sent it (docs/architecture/transport.md,
// "Lanes"); the receiving kernel steers it to the socket of the same lane by this byte, at payload
// offset 12. All integers little-endian. The receiver is under the tag: a datagram captured on its
// way to one node and replayed at another is refused there (version 1 had no receiver, and another
// node's replay window had never seen it). parse_datagram() checks the size, magic, version and
// tag before the FlatBuffers verifier runs, and the verifier before anything reads the Envelope;
// the receiver and the boot id are the endpoint's checks (they need its state). Unknown flag
// bits are malformed (before the tag).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/schema/data_generated.h"
#include "transport/security/authenticator.h"
#include "transport/wire/wire_version.h"

namespace dtrain::transport {

constexpr size_t kLaneOffset = 12;  // the lane byte; the lane count follows it
constexpr uint8_t kMaxLanes = 16;
constexpr uint8_t kFlagAes256Gcm = 1;
constexpr uint8_t kFlagChunk = 2;
constexpr size_t kChunkFieldBytes = 48;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kDefaultMaxDatagram = 1408;  // fits a 1500-byte MTU with IPv6 + UDP headers
// What a datagram leaves of the link's MTU: IPv6 and UDP headers (48) and room to spare.
constexpr size_t kMtuOverhead = 1500 - kDefaultMaxDatagram;
// The datagram for a link's MTU (data.mtu): a multiple of 8, so that each datagram of a
// coalesced receive run starts aligned (lane.h) and is read in place.
constexpr size_t datagram_for_mtu(size_t mtu) { return (mtu - kMtuOverhead) / 8 * 8; }
static_assert(datagram_for_mtu(1500) == kDefaultMaxDatagram, "the default fits a 1500-byte MTU");
// The largest MTU a data channel is given (data.mtu: jumbo frames reach 9,216 bytes on most
// switches) and so the largest datagram any node sends. Every node takes datagrams up to it,
// whatever its own size (the controller still has every node of a cluster use one size: a
// message's chunks must all be one size where a relay's catch-up completes another's part).
constexpr size_t kLargestMtu = 9216;
constexpr size_t kSmallestMtu = 1280;  // IPv6's least MTU, the least data.mtu
constexpr size_t kLargestDatagram = datagram_for_mtu(kLargestMtu);
// IPv4 and UDP headers around a datagram on the wire (the data channel binds IPv4 addresses).
constexpr size_t kIpv4UdpHeaders = 28;
constexpr size_t kMinDatagram = kHeaderBytes + 8 + kTagBytes;

struct DatagramHeader {
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t boot_id = 0;
  uint64_t counter = 0;
  Aead aead = Aead::kXChaCha20Poly1305;  // which tag (flags bit 0)
  uint8_t lane = 0;   // < lanes
  uint8_t lanes = 1;  // the sender's, 1 .. kMaxLanes
  bool chunk = false;  // flags bit 1: the body is a chunk (ChunkFields, then its data)

  TagContext tag_context() const { return {sender, receiver, boot_id, counter, aead}; }
};

// A chunk's fields (the body's first kChunkFieldBytes; its data follows them).
struct ChunkFields {
  uint64_t job_id = 0;
  uint64_t link_seq = 0;  // > 0: chunks are delivered reliably
  uint64_t message_id = 0;
  uint32_t link_epoch = 0;
  uint32_t origin = 0;     // the node that created the message
  uint32_t index = 0;      // 0 .. count - 1
  uint32_t count = 0;
  uint32_t total_bytes = 0;  // of the whole message
  uint32_t chunk_bytes = 0;  // of every chunk but the last
};
// The fields into out[0, kChunkFieldBytes).
void put_chunk_fields(const ChunkFields& fields, uint8_t* out);

// Why a datagram was dropped; counted per peer.
enum class DropReason : int {
  kTooShort,
  kOversized,
  kBadMagic,
  kWrongVersion,
  kBadTag,
  kReplayed,
  kMalformed,     // failed the FlatBuffers verifier or a field check
  kUnknownPeer,
  kUnknownJob,
  kInjected,      // the fault injector's own drops
  kWrongReceiver, // sealed for another node: a replay from elsewhere
  kStaleBoot,     // from a boot of the peer that is not (or no longer) the one it may use
  kNoRoom,        // reassembly or relay room is short: not acknowledged, the sender repeats it
  kWrongLane,     // another lane's, or from a node with another lane count (data.lanes)
  kCount
};
const char* drop_reason_name(DropReason reason);

// A run of a body's bytes left unwritten, to be copied from `from` as the datagram is framed: a
// chunk's data then goes from its message into the datagram in one copy. len 0: none.
struct BodySplice {
  size_t offset = 0;  // into the body
  size_t len = 0;
  const uint8_t* from = nullptr;
};

// header + body + tag into `out` (resized); the body is a finished FlatBuffer, or a chunk's
// (header.chunk), `splice` the bytes of it still to be filled in.
void seal_datagram(const DatagramHeader& header, const uint8_t* body, size_t body_len,
                   const Authenticator& auth, std::vector<uint8_t>& out,
                   const BodySplice& splice = {});
// seal_datagram without the tag: header + body into `out` (resized, the tag's 16 bytes left for
// Authenticator::seal_with); returns what the tag is to be made of.
TagContext frame_datagram(const DatagramHeader& header, const uint8_t* body, size_t body_len,
                          const Authenticator& auth, std::vector<uint8_t>& out,
                          const BodySplice& splice = {});

struct ParsedDatagram {
  DatagramHeader header;
  const wire::Envelope* envelope = nullptr;  // not a chunk: points into the datagram's bytes
  ChunkFields chunk;                         // header.chunk: its fields...
  const uint8_t* chunk_data = nullptr;       // ...and its data, in the datagram's bytes
  size_t chunk_size = 0;
  uint32_t link_epoch() const { return header.chunk ? chunk.link_epoch : envelope->link_epoch(); }
};

// What is known of a datagram's tag before parse_datagram: a batch's tags may be checked on
// several threads first (transport/endpoint/tag_workers.h).
enum class TagVerdict : uint8_t { kUnchecked, kHeld, kFailed };

// The header's checks that come before the tag (size, magic, version, flags); false and
// `reason` when one fails.
bool read_header(const uint8_t* data, size_t len, size_t max_datagram, DatagramHeader& out,
                 DropReason& reason);

// Returns false and sets `reason` for anything malformed, oversized, forged or from another
// version. Replay is the caller's check (it needs per-peer state). `tag`: the verdict of a
// check made already under the same header (kUnchecked: auth checks it here).
bool parse_datagram(const uint8_t* data, size_t len, size_t max_datagram,
                    const Authenticator& auth, ParsedDatagram& out, DropReason& reason,
                    TagVerdict tag = TagVerdict::kUnchecked);

}  // namespace dtrain::transport
