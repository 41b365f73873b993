#include "transport/wire/datagram.h"

#include <cstring>
#include <stdexcept>

#include "transport/schema/vector_alignment.h"

namespace dtrain::transport {
namespace {

template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);  // x86-64 and arm64 are little-endian, as the wire is
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Frame-level checks the verifier cannot know: 64-bit vectors aligned
// (schema/vector_alignment.h).
bool frame_is_sane(const wire::Envelope& e) {
  // A union's type without its table passes the verifier (found by the fuzzer).
  if (e.frame() == nullptr) return false;
  switch (e.frame_type()) {
    case wire::Frame::Nak:
      return e.frame_as_Nak()->missing() != nullptr && elements_aligned(e.frame_as_Nak()->missing());
    case wire::Frame::Ack: {
      const auto* r = e.frame_as_Ack()->received();
      return r == nullptr || (r->size() % 2 == 0 && elements_aligned(r));
    }
    case wire::Frame::Heartbeat:
      return true;
    default:
      return false;
  }
}

// A chunk's fields: its index within its count, and no more bytes claimed than its chunks can
// carry, nor in it than its message has.
bool read_chunk(const uint8_t* body, size_t body_len, size_t max_datagram, ParsedDatagram& out) {
  if (body_len < kChunkFieldBytes) return false;
  ChunkFields& f = out.chunk;
  f.job_id = get<uint64_t>(body);
  f.link_seq = get<uint64_t>(body + 8);
  f.message_id = get<uint64_t>(body + 16);
  f.link_epoch = get<uint32_t>(body + 24);
  f.origin = get<uint32_t>(body + 28);
  f.index = get<uint32_t>(body + 32);
  f.count = get<uint32_t>(body + 36);
  f.total_bytes = get<uint32_t>(body + 40);
  f.chunk_bytes = get<uint32_t>(body + 44);
  out.chunk_data = body + kChunkFieldBytes;
  out.chunk_size = body_len - kChunkFieldBytes;
  return f.link_seq > 0 && f.count > 0 && f.index < f.count &&
         uint64_t(f.total_bytes) <= uint64_t(f.count) * max_datagram &&
         out.chunk_size <= f.total_bytes;
}

}  // namespace

void put_chunk_fields(const ChunkFields& f, uint8_t* out) {
  put<uint64_t>(out, f.job_id);
  put<uint64_t>(out + 8, f.link_seq);
  put<uint64_t>(out + 16, f.message_id);
  put<uint32_t>(out + 24, f.link_epoch);
  put<uint32_t>(out + 28, f.origin);
  put<uint32_t>(out + 32, f.index);
  put<uint32_t>(out + 36, f.count);
  put<uint32_t>(out + 40, f.total_bytes);
  put<uint32_t>(out + 44, f.chunk_bytes);
}

const char* drop_reason_name(DropReason reason) {
  switch (reason) {
    case DropReason::kTooShort: return "too_short";
    case DropReason::kOversized: return "oversized";
    case DropReason::kBadMagic: return "bad_magic";
    case DropReason::kWrongVersion: return "wrong_version";
    case DropReason::kBadTag: return "bad_tag";
    case DropReason::kReplayed: return "replayed";
    case DropReason::kMalformed: return "malformed";
    case DropReason::kUnknownPeer: return "unknown_peer";
    case DropReason::kUnknownJob: return "unknown_job";
    case DropReason::kInjected: return "injected";
    case DropReason::kWrongReceiver: return "wrong_receiver";
    case DropReason::kStaleBoot: return "stale_boot";
    case DropReason::kNoRoom: return "no_room";
    case DropReason::kWrongLane: return "wrong_lane";
    case DropReason::kCount: break;
  }
  return "?";
}

void seal_datagram(const DatagramHeader& header, const uint8_t* body, size_t body_len,
                   const Authenticator& auth, std::vector<uint8_t>& out,
                   const BodySplice& splice) {
  const TagContext context = frame_datagram(header, body, body_len, auth, out, splice);
  auth.seal(out.data(), kHeaderBytes + body_len, context);
}

TagContext frame_datagram(const DatagramHeader& header, const uint8_t* body, size_t body_len,
                          const Authenticator& auth, std::vector<uint8_t>& out,
                          const BodySplice& splice) {
  // A node without AES-256-GCM tags with XChaCha20-Poly1305 whatever it was asked, and says so.
  DatagramHeader h = header;
  if (!auth.aes_gcm()) h.aead = Aead::kXChaCha20Poly1305;
  out.resize(kHeaderBytes + body_len + kTagBytes);
  uint8_t* p = out.data();
  p[0] = 'D';
  p[1] = 'T';
  p[2] = kWireVersion;
  p[3] = uint8_t((h.aead == Aead::kAes256Gcm ? kFlagAes256Gcm : 0) | (h.chunk ? kFlagChunk : 0));
  put<uint32_t>(p + 4, h.sender);
  put<uint32_t>(p + 8, h.receiver);
  p[kLaneOffset] = h.lane;
  p[kLaneOffset + 1] = h.lanes;
  put<uint16_t>(p + 14, 0);
  put<uint64_t>(p + 16, h.boot_id);
  put<uint64_t>(p + 24, h.counter);
  if (splice.len == 0) {
    std::memcpy(p + kHeaderBytes, body, body_len);
  } else {
    // The builder's bytes around the splice, and the splice from where it really is.
    const size_t after = splice.offset + splice.len;
    if (after > body_len) throw std::logic_error("frame_datagram: splice past the body's end");
    std::memcpy(p + kHeaderBytes, body, splice.offset);
    std::memcpy(p + kHeaderBytes + splice.offset, splice.from, splice.len);
    std::memcpy(p + kHeaderBytes + after, body + after, body_len - after);
  }
  // Zeros until sealed, not the slot's previous tag: a slot that left unsealed would fail
  // closed either way, but obviously so.
  std::memset(p + kHeaderBytes + body_len, 0, kTagBytes);
  return h.tag_context();
}

bool read_header(const uint8_t* data, size_t len, size_t max_datagram, DatagramHeader& out,
                 DropReason& reason) {
  if (len < kMinDatagram) {
    reason = DropReason::kTooShort;
    return false;
  }
  if (len > max_datagram) {
    reason = DropReason::kOversized;
    return false;
  }
  if (data[0] != 'D' || data[1] != 'T') {
    reason = DropReason::kBadMagic;
    return false;
  }
  if (data[2] != kWireVersion) {
    reason = DropReason::kWrongVersion;
    return false;
  }
  if ((data[3] & ~(kFlagAes256Gcm | kFlagChunk)) != 0) {
    reason = DropReason::kMalformed;
    return false;
  }
  const uint8_t lane = data[kLaneOffset], lanes = data[kLaneOffset + 1];
  if (lanes == 0 || lanes > kMaxLanes || lane >= lanes || get<uint16_t>(data + 14) != 0) {
    reason = DropReason::kMalformed;
    return false;
  }
  out.lane = lane;
  out.lanes = lanes;
  out.aead = (data[3] & kFlagAes256Gcm) ? Aead::kAes256Gcm : Aead::kXChaCha20Poly1305;
  out.chunk = (data[3] & kFlagChunk) != 0;
  out.sender = get<uint32_t>(data + 4);
  out.receiver = get<uint32_t>(data + 8);
  out.boot_id = get<uint64_t>(data + 16);
  out.counter = get<uint64_t>(data + 24);
  return true;
}

bool parse_datagram(const uint8_t* data, size_t len, size_t max_datagram,
                    const Authenticator& auth, ParsedDatagram& out, DropReason& reason,
                    TagVerdict tag) {
  if (!read_header(data, len, max_datagram, out.header, reason)) return false;
  const size_t signed_len = len - kTagBytes;
  const bool held = tag == TagVerdict::kUnchecked
                        ? auth.verify(data, signed_len, out.header.tag_context())
                        : tag == TagVerdict::kHeld;
  if (!held) {
    reason = DropReason::kBadTag;
    return false;
  }
  const uint8_t* body = data + kHeaderBytes;
  const size_t body_len = signed_len - kHeaderBytes;
  if (out.header.chunk) {
    if (read_chunk(body, body_len, max_datagram, out)) return true;
    reason = DropReason::kMalformed;
    return false;
  }
  // FlatBuffers needs 4-byte alignment of the buffer's start to verify and read it safely.
  if (reinterpret_cast<uintptr_t>(body) % 4 != 0) {
    reason = DropReason::kMalformed;
    return false;
  }
  flatbuffers::Verifier verifier(body, body_len, /*max_depth=*/8, /*max_tables=*/64);
  if (!wire::VerifyEnvelopeBuffer(verifier)) {
    reason = DropReason::kMalformed;
    return false;
  }
  out.envelope = wire::GetEnvelope(body);
  if (!frame_is_sane(*out.envelope)) {
    reason = DropReason::kMalformed;
    return false;
  }
  return true;
}

}  // namespace dtrain::transport
