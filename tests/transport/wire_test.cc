// The data channel's defences, one bad datagram at a time: random bytes, truncation, a flipped
// tag, a replayed counter, another version, oversized and inconsistent frames, a chunk for an
// unknown job; plus the key file checks, the replay window, reassembly and the mesh map.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "tests/skip.h"
#include <sodium.h>

#include <fstream>
#include <random>
#include <set>

#include "tests/test_util.h"
#include "transport/endpoint/interface_select.h"
#include "transport/mesh/mesh_map.h"
#include "transport/reliability/link_receiver.h"
#include "transport/reliability/reassembler.h"
#include "transport/security/cluster_key.h"
#include "transport/security/replay_window.h"
#include "transport/transport_error.h"
#include "transport/wire/datagram.h"

using namespace dtrain::transport;

namespace {

ClusterKey test_key(uint8_t fill = 7) {
  ClusterKey k;
  k.fill(fill);
  return k;
}

// A sealed datagram carrying one chunk (sizes can be made inconsistent on purpose).
std::vector<uint8_t> chunk_datagram(const Authenticator& auth, uint64_t counter,
                                    uint32_t total_bytes = 5, uint32_t count = 1,
                                    size_t data_len = 5, uint64_t link_seq = 1,
                                    Aead aead = Aead::kXChaCha20Poly1305, uint32_t index = 0) {
  ChunkFields f;
  f.job_id = 1;
  f.index = index;
  f.link_seq = link_seq;
  f.message_id = 42;
  f.origin = 3;
  f.count = count;
  f.total_bytes = total_bytes;
  f.chunk_bytes = 1000;
  std::vector<uint8_t> body(kChunkFieldBytes + data_len, 0xAB);
  put_chunk_fields(f, body.data());
  DatagramHeader h{3, 1, 99, counter, aead};
  h.chunk = true;
  std::vector<uint8_t> out;
  seal_datagram(h, body.data(), body.size(), auth, out);
  return out;
}

// parse_datagram needs the 8-byte alignment the endpoint's receive buffer has. `out.envelope`
// points into this copy, which lives until the next parse.
bool parse(const std::vector<uint8_t>& bytes, const Authenticator& auth, DropReason& reason,
           ParsedDatagram& out) {
  static std::vector<uint64_t> aligned;
  aligned.assign((bytes.size() + 7) / 8 + 1, 0);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  return parse_datagram(reinterpret_cast<const uint8_t*>(aligned.data()), bytes.size(),
                        kDefaultMaxDatagram, auth, out, reason);
}

DropReason reject_reason(const std::vector<uint8_t>& bytes, const Authenticator& auth) {
  DropReason reason = DropReason::kCount;
  ParsedDatagram out;
  REQUIRE_FALSE(parse(bytes, auth, reason, out));
  return reason;
}

}  // namespace

TEST_CASE("a well-formed datagram parses; its fields come through") {
  Authenticator auth(test_key(), false);
  ParsedDatagram d;
  DropReason reason;
  REQUIRE(parse(chunk_datagram(auth, 1), auth, reason, d));
  REQUIRE(d.header.sender == 3);
  REQUIRE(d.header.counter == 1);
  REQUIRE(d.header.chunk);
  REQUIRE(d.envelope == nullptr);
  CHECK(d.chunk.job_id == 1);
  CHECK(d.chunk.link_seq == 1);
  CHECK(d.chunk.message_id == 42);
  CHECK(d.chunk.origin == 3);
  CHECK(d.chunk.count == 1);
  CHECK(d.chunk.total_bytes == 5);
  CHECK(d.chunk.chunk_bytes == 1000);
  CHECK(std::vector<uint8_t>(d.chunk_data, d.chunk_data + d.chunk_size) ==
        std::vector<uint8_t>(5, 0xAB));
}

TEST_CASE("a chunk's fields fill 48 bytes, in the order and at the offsets datagram.h gives") {
  ChunkFields f;
  f.job_id = 0x0102030405060708ull;
  f.link_seq = 9;
  f.message_id = 10;
  f.link_epoch = 11;
  f.origin = 12;
  f.index = 13;
  f.count = 14;
  f.total_bytes = 15;
  f.chunk_bytes = 16;
  std::vector<uint8_t> b(kChunkFieldBytes, 0xEE);
  put_chunk_fields(f, b.data());
  CHECK(b[0] == 0x08);  // little-endian
  CHECK(b[7] == 0x01);
  const std::vector<std::pair<size_t, uint8_t>> at = {{8, 9},   {16, 10}, {24, 11}, {28, 12},
                                                     {32, 13}, {36, 14}, {40, 15}, {44, 16}};
  for (auto [offset, value] : at) CHECK(int(b[offset]) == int(value));
}

// The lane frames a chunk from its fields and splices its data in from the message as the
// datagram is framed: the datagram must be the one a filled body gives.
TEST_CASE("a payload spliced in while framing gives the same datagram as a filled body") {
  Authenticator auth(test_key(), false, true, 1);
  const Aead aead = auth.aes_gcm() ? Aead::kAes256Gcm : Aead::kXChaCha20Poly1305;
  for (size_t len : {size_t(1), size_t(3), size_t(1000), size_t(1312)}) {
    std::vector<uint8_t> payload(len);
    for (size_t i = 0; i < len; ++i) payload[i] = uint8_t(i * 7 + 1);
    // Job 1, link sequence 9, message 42, link epoch 2, from node 3: its only chunk.
    const ChunkFields f{1, 9, 42, 2, 3, 0, 1, uint32_t(len), 1300};
    std::vector<uint8_t> filled(kChunkFieldBytes + len), spliced(kChunkFieldBytes + len, 0);
    put_chunk_fields(f, filled.data());
    put_chunk_fields(f, spliced.data());
    std::copy(payload.begin(), payload.end(), filled.begin() + kChunkFieldBytes);
    DatagramHeader h{3, 1, 99, 5, aead};
    h.chunk = true;
    std::vector<uint8_t> want, got;
    seal_datagram(h, filled.data(), filled.size(), auth, want);
    seal_datagram(h, spliced.data(), spliced.size(), auth, got,
                  BodySplice{kChunkFieldBytes, len, payload.data()});
    CHECK(got == want);
    ParsedDatagram d;
    DropReason reason;
    INFO("payload " << len << " bytes, datagram " << got.size());
    REQUIRE(parse(got, auth, reason, d));
    CHECK(d.chunk.link_epoch == 2);
    CHECK(std::vector<uint8_t>(d.chunk_data, d.chunk_data + d.chunk_size) == payload);
  }
  // A splice that runs past the body is a programming error, refused before anything is copied.
  std::vector<uint8_t> body(64), out;
  CHECK_THROWS_AS(frame_datagram({3, 1, 99, 6}, body.data(), body.size(), auth, out,
                                 BodySplice{60, 8, body.data()}),
                  std::logic_error);
}

TEST_CASE("bad datagrams are rejected with the reason they are counted under") {
  Authenticator auth(test_key(), false);
  const std::vector<uint8_t> good = chunk_datagram(auth, 1);

  std::vector<uint8_t> truncated(good.begin(), good.begin() + 20);
  REQUIRE(reject_reason(truncated, auth) == DropReason::kTooShort);
  std::vector<uint8_t> cut(good.begin(), good.end() - 3);
  REQUIRE(reject_reason(cut, auth) == DropReason::kBadTag);

  std::vector<uint8_t> flipped_tag = good;
  flipped_tag.back() ^= 1;
  REQUIRE(reject_reason(flipped_tag, auth) == DropReason::kBadTag);
  std::vector<uint8_t> flipped_body = good;
  flipped_body[40] ^= 0x10;
  REQUIRE(reject_reason(flipped_body, auth) == DropReason::kBadTag);

  std::vector<uint8_t> version = good;
  version[2] = 1;  // version 1 had no receiver in its header
  REQUIRE(reject_reason(version, auth) == DropReason::kWrongVersion);
  std::vector<uint8_t> magic = good;
  magic[0] = 'X';
  REQUIRE(reject_reason(magic, auth) == DropReason::kBadMagic);

  std::vector<uint8_t> huge(kDefaultMaxDatagram + 1, 0);
  REQUIRE(reject_reason(huge, auth) == DropReason::kOversized);

  // Another key (a foreign cluster) is a bad tag too.
  Authenticator other(test_key(9), false);
  REQUIRE(reject_reason(chunk_datagram(other, 1), auth) == DropReason::kBadTag);

  // Authentic but inconsistent: a message claiming 4 GB in one chunk, data longer than the
  // message, a chunk with no sequence number.
  REQUIRE(reject_reason(chunk_datagram(auth, 2, 0xFFFFFFFFu, 1), auth) == DropReason::kMalformed);
  REQUIRE(reject_reason(chunk_datagram(auth, 3, 4, 1, 5), auth) == DropReason::kMalformed);
  REQUIRE(reject_reason(chunk_datagram(auth, 4, 5, 1, 5, 0), auth) == DropReason::kMalformed);
  // A chunk past its message's count (and the largest index), no chunks at all, and a body too
  // short for a chunk's fields.
  for (uint32_t index : {1u, 0xFFFFFFFFu})
    REQUIRE(reject_reason(chunk_datagram(auth, 8, 5, 1, 5, 1, Aead::kXChaCha20Poly1305, index),
                          auth) == DropReason::kMalformed);
  REQUIRE(reject_reason(chunk_datagram(auth, 5, 0, 0, 0), auth) == DropReason::kMalformed);
  DatagramHeader h{3, 1, 99, 6};
  h.chunk = true;
  std::vector<uint8_t> body(kChunkFieldBytes - 1, 1), short_body;
  seal_datagram(h, body.data(), body.size(), auth, short_body);
  REQUIRE(reject_reason(short_body, auth) == DropReason::kMalformed);
  // A chunk read as an envelope (its flag cleared, sealed again): the verifier refuses it.
  const std::vector<uint8_t> chunk_bytes = chunk_datagram(auth, 7);
  std::vector<uint8_t> as_envelope;
  seal_datagram({3, 1, 99, 7}, chunk_bytes.data() + kHeaderBytes,
                chunk_bytes.size() - kHeaderBytes - kTagBytes, auth, as_envelope);
  REQUIRE(reject_reason(as_envelope, auth) == DropReason::kMalformed);
}

TEST_CASE("the XChaCha20-Poly1305 tag is libsodium's, over (sender, receiver, boot, counter)") {
  // The subkey is cached per link direction and boot; the tag must still be exactly the
  // one-shot XChaCha20-Poly1305 with the 24-byte nonce the header describes.
  Authenticator auth(test_key(), false, /*allow_aes_gcm=*/false);
  const std::vector<uint8_t> d = chunk_datagram(auth, 0x0102030405060708ull);
  REQUIRE(d[3] == kFlagChunk);  // flags: a chunk, XChaCha20-Poly1305
  unsigned char nonce[24];
  std::memcpy(nonce, d.data() + 4, 8);        // sender, receiver
  std::memcpy(nonce + 8, d.data() + 16, 16);  // boot id, counter
  unsigned char tag[16];
  unsigned long long tag_len = 0;
  const ClusterKey key = test_key();
  unsigned char none[1] = {0};
  crypto_aead_xchacha20poly1305_ietf_encrypt_detached(none, tag, &tag_len, none, 0, d.data(),
                                                      d.size() - kTagBytes, nullptr, nonce,
                                                      key.data());
  REQUIRE(std::memcmp(tag, d.data() + d.size() - kTagBytes, kTagBytes) == 0);
  // A second datagram of the same link (the cached subkey) is tagged the same way.
  const std::vector<uint8_t> next = chunk_datagram(auth, 9);
  ParsedDatagram out;
  DropReason reason;
  Authenticator fresh(test_key(), false, false);
  REQUIRE(parse(next, fresh, reason, out));
}

TEST_CASE("AES-256-GCM datagrams: flagged, checked, refused where not accepted") {
  Authenticator gcm(test_key(), false);
  if (!gcm.aes_gcm()) DTRAIN_SKIP("this CPU has no AES-NI/CLMUL, libsodium offers no AES-256-GCM");
  Authenticator chacha_only(test_key(), false, /*allow_aes_gcm=*/false);
  const std::vector<uint8_t> d = chunk_datagram(gcm, 5, 5, 1, 5, 1, Aead::kAes256Gcm);
  REQUIRE(d[3] == (kFlagAes256Gcm | kFlagChunk));
  ParsedDatagram out;
  DropReason reason;
  REQUIRE(parse(d, gcm, reason, out));
  REQUIRE(out.header.aead == Aead::kAes256Gcm);
  REQUIRE(out.chunk.message_id == 42);
  // A node that does not check AES-256-GCM refuses it (its sender learns from heartbeats not
  // to use it), and one that cannot make it seals XChaCha20-Poly1305 and flags that.
  REQUIRE(reject_reason(d, chacha_only) == DropReason::kBadTag);
  const std::vector<uint8_t> fallback = chunk_datagram(chacha_only, 6, 5, 1, 5, 1, Aead::kAes256Gcm);
  REQUIRE(fallback[3] == kFlagChunk);
  REQUIRE(parse(fallback, gcm, reason, out));
  // The flag is under the tag: switching the AEAD a datagram claims breaks it. Unknown flag
  // bits are malformed.
  std::vector<uint8_t> switched = d;
  switched[3] = kFlagChunk;
  REQUIRE(reject_reason(switched, gcm) == DropReason::kBadTag);
  std::vector<uint8_t> flags = d;
  flags[3] |= 0x80;
  REQUIRE(reject_reason(flags, gcm) == DropReason::kMalformed);
  // The receiver and boot are under the tag (and in the key): changed, the tag no longer
  // holds. So does another cluster key.
  for (size_t byte : {8, 16}) {
    std::vector<uint8_t> moved = d;
    moved[byte] ^= 1;
    REQUIRE(reject_reason(moved, gcm) == DropReason::kBadTag);
  }
  Authenticator other(test_key(9), false);
  REQUIRE(reject_reason(d, other) == DropReason::kBadTag);
}

TEST_CASE("the lane and lane count come through, under the tag, and are range-checked") {
  Authenticator auth(test_key(), false);
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEnvelope(fbb, wire::Frame::Heartbeat,
                                  wire::CreateHeartbeat(fbb, 1, 0, 0).Union()));
  DatagramHeader h{3, 1, 99, 7};
  h.lane = 2;
  h.lanes = 3;
  std::vector<uint8_t> d;
  seal_datagram(h, fbb.GetBufferPointer(), fbb.GetSize(), auth, d);
  // Where the receiving kernel's steering program reads it.
  REQUIRE(d[kLaneOffset] == 2);
  REQUIRE(d[kLaneOffset + 1] == 3);
  ParsedDatagram out;
  DropReason reason;
  REQUIRE(parse(d, auth, reason, out));
  REQUIRE(out.header.lane == 2);
  REQUIRE(out.header.lanes == 3);
  // Moved to another lane or count, the tag no longer holds (a datagram cannot be steered into
  // another lane's link).
  std::vector<uint8_t> moved = d;
  moved[kLaneOffset] = 1;
  REQUIRE(reject_reason(moved, auth) == DropReason::kBadTag);
  moved = d;
  moved[kLaneOffset + 1] = 4;
  REQUIRE(reject_reason(moved, auth) == DropReason::kBadTag);
  // Out of range (checked before the tag): a lane past the count, no lanes, too many lanes,
  // and the reserved bytes after them.
  for (auto [lane, lanes] : {std::pair<int, int>{3, 3}, {0, 0}, {0, kMaxLanes + 1}}) {
    std::vector<uint8_t> bad = d;
    bad[kLaneOffset] = uint8_t(lane);
    bad[kLaneOffset + 1] = uint8_t(lanes);
    REQUIRE(reject_reason(bad, auth) == DropReason::kMalformed);
  }
  std::vector<uint8_t> reserved = d;
  reserved[15] = 1;
  REQUIRE(reject_reason(reserved, auth) == DropReason::kMalformed);
}

TEST_CASE("forged datagrams between a link's honest ones do not disturb their checking") {
  for (Aead aead : {Aead::kXChaCha20Poly1305, Aead::kAes256Gcm}) {
    Authenticator sender(test_key(), false), receiver(test_key(), false);
    Authenticator forger(test_key(8), false);
    if (aead == Aead::kAes256Gcm && !receiver.aes_gcm()) continue;
    ParsedDatagram out;
    DropReason reason;
    // The forger's datagrams name the same (sender, receiver, boot) as the honest ones, before
    // and between them.
    REQUIRE(reject_reason(chunk_datagram(forger, 1, 5, 1, 5, 1, aead), receiver) ==
            DropReason::kBadTag);
    REQUIRE(parse(chunk_datagram(sender, 2, 5, 1, 5, 1, aead), receiver, reason, out));
    REQUIRE(reject_reason(chunk_datagram(forger, 3, 5, 1, 5, 1, aead), receiver) ==
            DropReason::kBadTag);
    REQUIRE(parse(chunk_datagram(sender, 4, 5, 1, 5, 1, aead), receiver, reason, out));
  }
}

TEST_CASE("random bytes, authenticated garbage and every truncation never parse") {
  Authenticator auth(test_key(), false);
  Authenticator insecure(test_key(), true);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes(rng() % 1500);
    for (auto& b : bytes) b = uint8_t(rng());
    if (bytes.size() > 4) {
      bytes[0] = 'D';
      bytes[1] = 'T';
      bytes[2] = kWireVersion;
    }
    ParsedDatagram d;
    DropReason reason;
    REQUIRE_FALSE(parse(bytes, auth, reason, d));
    // Without authentication the FlatBuffers verifier is the only guard: it must hold too.
    if (bytes.size() <= kDefaultMaxDatagram && parse(bytes, insecure, reason, d)) {
      // What parses is a checked chunk or a verified envelope.
      if (d.header.chunk)
        REQUIRE((d.chunk.index < d.chunk.count && d.chunk_size <= d.chunk.total_bytes));
      else
        REQUIRE(d.envelope != nullptr);
    }
  }
  const std::vector<uint8_t> good = chunk_datagram(auth, 1);
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> prefix(good.begin(), good.begin() + len);
    ParsedDatagram d;
    DropReason reason;
    REQUIRE_FALSE(parse(prefix, auth, reason, d));
  }
}

TEST_CASE("the replay window accepts each counter once, within its window") {
  ReplayWindow w;
  REQUIRE(w.accept(1, 5));
  REQUIRE_FALSE(w.accept(1, 5));
  REQUIRE(w.accept(1, 3));  // late but new
  REQUIRE_FALSE(w.accept(1, 3));
  REQUIRE(w.accept(1, 5000));
  REQUIRE_FALSE(w.accept(1, 5000 - ReplayWindow::kWindow));  // too old to tell: refused
  REQUIRE(w.accept(1, 4999));
  REQUIRE(w.accept(2, 1));  // the peer restarted: a new boot id starts over
  REQUIRE_FALSE(w.accept(2, 0));
}

TEST_CASE("the replay window agrees with a plain set of seen counters") {
  // Counters arrive out of order, repeated, and with jumps of up to twice the window.
  std::mt19937_64 rng(11);
  ReplayWindow w;
  std::set<uint64_t> seen;
  uint64_t highest = 0;
  for (int i = 0; i < 200000; ++i) {
    uint64_t c = highest + 1;
    switch (rng() % 4) {
      case 0: c = highest + 1 + rng() % (2 * ReplayWindow::kWindow); break;  // a jump
      case 1: c = highest - std::min<uint64_t>(highest, rng() % (ReplayWindow::kWindow + 8)); break;
      default: break;
    }
    const bool expected = c != 0 && !seen.count(c) && c + ReplayWindow::kWindow > highest;
    INFO("counter " << c << " with highest " << highest);
    REQUIRE(w.accept(1, c) == expected);
    if (expected) {
      seen.insert(c);
      highest = std::max(highest, c);
    }
  }
}

TEST_CASE("the cluster key file: missing, loose permissions, malformed, good") {
  const std::string dir = dtrain::testing::temp_dir();
  const std::string path = dir + "/cluster.key";
  REQUIRE_THROWS_WITH(load_cluster_key(path), Catch::Contains("dtraind keygen"));
  generate_cluster_key(path);
  const ClusterKey k = load_cluster_key(path);
  REQUIRE(k != ClusterKey{});
  REQUIRE_THROWS_WITH(generate_cluster_key(path), Catch::Contains("remove it first"));
  chmod(path.c_str(), 0644);
  REQUIRE_THROWS_WITH(load_cluster_key(path), Catch::Contains("chmod 600 " + path));
  chmod(path.c_str(), 0640);
  REQUIRE_THROWS_WITH(load_cluster_key(path), Catch::Contains("mode 0640"));
  const std::string bad = dir + "/bad.key";
  std::ofstream(bad) << "not hex at all\n";
  chmod(bad.c_str(), 0600);
  REQUIRE_THROWS_WITH(load_cluster_key(bad), Catch::Contains("64 hexadecimal digits"));
}

constexpr uint32_t kVia = 7;  // the link chunks come by in the reassembly tests

// Chunk `index` of message `id` (job 1, origin 2): `msg` cut into 1000-byte chunks.
ChunkView chunk_of(const std::vector<uint8_t>& msg, uint64_t id, uint32_t index) {
  ChunkView c;
  c.key = {1, 2, id};
  c.chunk_bytes = 1000;
  c.total_bytes = uint32_t(msg.size());
  c.count = uint32_t((msg.size() + 999) / 1000);
  c.index = index;
  c.data = msg.data() + index * 1000;
  c.size = std::min<size_t>(1000, msg.size() - index * 1000);
  return c;
}

TEST_CASE("reassembly: out of order, duplicates, inconsistent chunks, memory bound") {
  using namespace std::chrono_literals;
  Reassembler r(10000, 50ms);
  std::vector<uint8_t> msg(2500);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = uint8_t(i * 7);
  auto chunk = [&](uint32_t index, uint64_t id = 1) { return chunk_of(msg, id, index); };
  std::vector<uint8_t> out;
  REQUIRE(r.add(chunk(2), out, kVia) == Reassembler::Result::kIncomplete);
  REQUIRE(r.add(chunk(2), out, kVia) == Reassembler::Result::kDuplicate);
  REQUIRE(r.add(chunk(0), out, kVia) == Reassembler::Result::kIncomplete);
  REQUIRE(r.add(chunk(1), out, kVia) == Reassembler::Result::kComplete);
  REQUIRE(out == msg);
  REQUIRE(r.add(chunk(0), out, kVia) == Reassembler::Result::kDuplicate);  // delivered already
  ChunkView wrong = chunk(1, 2);
  wrong.size = 999;
  REQUIRE(r.add(wrong, out, kVia) == Reassembler::Result::kRejected);
  ChunkView greedy = chunk(0, 3);
  greedy.total_bytes = 20000;
  greedy.count = 20;
  REQUIRE(r.add(greedy, out, kVia) == Reassembler::Result::kRejected);  // over the memory bound
}

// A chunk taken was acknowledged, so its sender let it go: a partial message whose link is
// alive is never dropped for age (the rest is on its way, however long a relay backlog holds
// it); it goes when every link that fed it started over, or stayed lost past the timeout.
TEST_CASE("reassembly keeps a partial message while a link that fed it is alive") {
  using namespace std::chrono_literals;
  Reassembler r(10000, 50ms);
  std::vector<uint8_t> msg(2000, 3);
  auto chunk = [&](uint32_t index, uint64_t id) { return chunk_of(msg, id, index); };
  std::vector<uint8_t> out;
  const auto t0 = Reassembler::Clock::now();
  std::set<uint32_t> alive = {7, 8};
  auto is_alive = [&](uint32_t link) { return alive.count(link) > 0; };
  REQUIRE(r.add(chunk(0, 1), out, 7, t0) == Reassembler::Result::kIncomplete);
  REQUIRE(r.expire(t0 + 10s, is_alive) == 0);  // link 7 alive: the rest still comes
  REQUIRE(r.add(chunk(1, 1), out, 7, t0 + 10s) == Reassembler::Result::kComplete);
  REQUIRE(out == msg);

  // Fed by links 7 and 8 (a re-attachment): 7 starting over leaves it to 8.
  REQUIRE(r.add(chunk(0, 2), out, 7, t0) == Reassembler::Result::kIncomplete);
  REQUIRE(r.add(chunk(0, 2), out, 8, t0) == Reassembler::Result::kDuplicate);
  REQUIRE(r.link_restarted(7) == 0);
  REQUIRE(r.partial_messages() == 1);
  // 8 lost, but not for the timeout yet; then past it.
  alive.erase(8);
  REQUIRE(r.expire(t0 + 40ms, is_alive) == 0);
  REQUIRE(r.expire(t0 + 100ms, is_alive) == 1);
  REQUIRE(r.bytes_held() == 0);

  // Its only link started over: what it still owed will never come.
  REQUIRE(r.add(chunk(0, 3), out, 7, t0) == Reassembler::Result::kIncomplete);
  REQUIRE(r.link_restarted(8) == 0);
  REQUIRE(r.link_restarted(7) == 1);
  REQUIRE(r.bytes_held() == 0);
}

TEST_CASE("reassembly room: origins wait in turn, and no room now is not never") {
  Reassembler r(10000, std::chrono::milliseconds(1000));
  std::vector<uint8_t> bytes(1000, 1);
  // Chunk `index` of the `count` 1000-byte chunks of message `id` from `origin`.
  auto chunk = [&](uint32_t origin, uint64_t id, uint32_t count, uint32_t index = 0) {
    ChunkView c;
    c.key = {1, origin, id};
    c.index = index;
    c.count = count;
    c.total_bytes = count * 1000;
    c.chunk_bytes = 1000;
    c.data = bytes.data();
    c.size = 1000;
    return c;
  };
  using R = Reassembler::Result;
  std::vector<uint8_t> out;
  REQUIRE(r.add(chunk(1, 1, 6), out, kVia) == R::kIncomplete);  // A holds 6000
  REQUIRE(r.add(chunk(2, 1, 5), out, kVia) == R::kNoRoom);      // B waits for 5000: its turn is first
  REQUIRE(r.add(chunk(1, 2, 3), out, kVia) == R::kNoRoom);      // A is over its half, and B is ahead
  for (uint32_t i = 1; i < 6; ++i)
    REQUIRE(r.add(chunk(1, 1, 6, i), out, kVia) == (i == 5 ? R::kComplete : R::kIncomplete));
  REQUIRE(r.bytes_held() == 0);
  // Room for A's next 6000, but not with B's 5000 set aside: B waited first.
  REQUIRE(r.add(chunk(1, 3, 6), out, kVia) == R::kNoRoom);
  REQUIRE(r.add(chunk(2, 1, 5), out, kVia) == R::kIncomplete);  // B, asking again, gets its turn
  REQUIRE(r.bytes_held_for(2) == 5000);
  REQUIRE(r.add(chunk(1, 3, 6), out, kVia) == R::kNoRoom);      // 5000 + 6000 do not fit
  REQUIRE(r.add(chunk(1, 4, 4), out, kVia) == R::kIncomplete);  // A's smaller one does
  REQUIRE(r.bytes_held_for(1) == 4000);
  // Larger than the whole bound: never fits, refused for good.
  REQUIRE(r.add(chunk(3, 1, 11), out, kVia) == R::kRejected);
}

TEST_CASE("mesh maps: plain star, breadth-first tree, repair after a loss") {
  std::vector<MeshMember> m;
  for (uint32_t i = 0; i < 12; ++i) m.push_back({i, "127.0.0.1", uint16_t(1000 + i), 0});
  MeshMap plain = MeshMap::build("plain", m);
  REQUIRE(plain.children(0).size() == 11);
  REQUIRE(plain.neighbours(5) == std::vector<uint32_t>{0});
  MeshMap tree = MeshMap::build("mesh", m);
  REQUIRE(tree.children(0) == std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  REQUIRE(tree.children(1) == std::vector<uint32_t>{9, 10, 11});
  REQUIRE(tree.neighbours(1) == std::vector<uint32_t>{0, 9, 10, 11});

  std::vector<uint32_t> missed;
  MeshMap repaired = tree.without(1, &missed);
  REQUIRE(repaired.version() == tree.version() + 1);
  REQUIRE_FALSE(repaired.contains(1));
  for (uint32_t orphan : {9u, 10u, 11u}) {
    REQUIRE(repaired.contains(orphan));
    REQUIRE(repaired.find(orphan)->parent != 1);
  }
  REQUIRE(missed.size() == 11);  // node 1 relayed: everyone may have missed something
  REQUIRE(tree.without(11, &missed).version() == 2);
  REQUIRE(missed.empty());  // a leaf relayed nothing

  // Whose messages come through whom: in the star everything passes the root; in the tree a
  // node's messages reach a cousin through the parents in between.
  REQUIRE(plain.next_hop(5, 7) == 0);
  REQUIRE(plain.next_hop(5, 0) == 0);
  REQUIRE(plain.next_hop(0, 7) == 7);
  REQUIRE(tree.next_hop(9, 10) == 1);   // siblings under 1
  REQUIRE(tree.next_hop(9, 2) == 1);    // up through its parent
  REQUIRE(tree.next_hop(0, 11) == 1);   // the root reaches 11 through 1
  REQUIRE(tree.next_hop(2, 11) == 0);
  REQUIRE(tree.next_hop(1, 11) == 11);  // neighbours: direct
  REQUIRE(tree.next_hop(3, 99) == 99);  // not in the map

  MeshMap rootless = plain.without(0, &missed);
  REQUIRE(rootless.root() == 1);
  REQUIRE(rootless.children(1).size() == 10);  // plain stays a star around the new root

  // The longest way a message travels: leaf to leaf through the root in the star; in the tree
  // from 9 (under 1) to 8 (under the root) is 3 hops; one member or two neighbours.
  REQUIRE(plain.longest_path() == 2);
  REQUIRE(tree.longest_path() == 3);
  REQUIRE(MeshMap::build("plain", {m[0], m[1]}).longest_path() == 1);
  REQUIRE(MeshMap::build("plain", {m[0]}).longest_path() == 0);
  REQUIRE(plain.without(0).longest_path() == 2);
}

TEST_CASE("a union type without its table is malformed, not a crash (found by the fuzzer)") {
  Authenticator auth(test_key(), false);
  flatbuffers::FlatBufferBuilder fbb;
  wire::EnvelopeBuilder e(fbb);
  e.add_link_epoch(1);
  e.add_frame_type(wire::Frame::Ack);  // and no frame
  fbb.Finish(e.Finish());
  std::vector<uint8_t> bytes;
  seal_datagram({3, 1, 99, 1}, fbb.GetBufferPointer(), fbb.GetSize(), auth, bytes);
  REQUIRE(reject_reason(bytes, auth) == DropReason::kMalformed);
}

TEST_CASE("interface selection: by network, by name, skipping lo/docker/veth unless asked") {
  const std::vector<InterfaceAddress> here = {{"lo", "127.0.0.1"},
                                              {"docker0", "172.17.0.1"},
                                              {"veth12", "10.9.0.1"},
                                              {"eth0", "10.0.3.7"},
                                              {"eth1", "192.168.1.4"}};
  REQUIRE(choose_interface("", false, here).name == "eth0");
  REQUIRE(choose_interface("192.168.0.0/16", false, here).address == "192.168.1.4");
  REQUIRE(choose_interface("10.0.0.0/8", false, here).name == "eth0");  // not veth12
  REQUIRE(choose_interface("10.9.0.0/16", true, here).name == "veth12");
  REQUIRE(choose_interface("lo", false, here).address == "127.0.0.1");  // named: allowed
  REQUIRE_THROWS_WITH(choose_interface("127.0.0.0/8", false, here),
                      Catch::Contains("allow_loopback"));
  REQUIRE(choose_interface("127.0.0.0/8", true, here).name == "lo");
  REQUIRE_THROWS_WITH(choose_interface("wlan0", false, here),
                      Catch::Contains("eth0 10.0.3.7") && Catch::Contains("no interface matches"));
  REQUIRE_THROWS_WITH(choose_interface("10.0.0.0/40", false, here),
                      Catch::Contains("a.b.c.d/n"));
  // The real machine: loopback is always there and found when asked for.
  REQUIRE(choose_interface("127.0.0.0/8", true).address == "127.0.0.1");
}

TEST_CASE("data.mtu's datagrams are checked against the interface's MTU, read from the kernel") {
  // Sizes: multiples of 8, the default the old fixed 1408.
  CHECK(datagram_for_mtu(1500) == 1408);
  CHECK(datagram_for_mtu(9000) == 8904);
  CHECK(kLargestDatagram == 9120);
  CHECK(kLargestDatagram % 8 == 0);
  // Loopback's MTU is 65536 on Linux, far above any data.mtu; an alias is its device's.
  CHECK(interface_mtu("lo") >= int(kLargestMtu));
  CHECK(interface_mtu("lo:1") == interface_mtu("lo"));
  CHECK(interface_mtu("no-such-interface") == 0);
  CHECK(interface_mtu("lo/../lo") == 0);  // a device's name, never a path
  CHECK(interface_mtu("..") == 0);
  CHECK(interface_mtu("") == 0);
  const auto fits = [](int interface, int mtu) {
    check_datagram_fits("eth0", interface, mtu, datagram_for_mtu(size_t(mtu)));
  };
  CHECK_NOTHROW(fits(1500, 1500));
  CHECK_NOTHROW(fits(9000, 1500));
  CHECK_NOTHROW(fits(9000, 9000));
  // Tunnels and clouds of 1,436 to 1,499 bytes carry the default's 1,408 + 28.
  CHECK_NOTHROW(fits(1450, 1500));
  CHECK_NOTHROW(fits(1436, 1500));
  CHECK_NOTHROW(fits(0, 9000));  // unknown: nothing to check against
  REQUIRE_THROWS_WITH(fits(1435, 1500), Catch::Contains("1436 bytes") &&
                                            Catch::Contains("set data.mtu: 1435"));
  REQUIRE_THROWS_WITH(fits(1500, 9000),
                      Catch::Contains("data.mtu is 9000 (datagrams of 8932 bytes") &&
                          Catch::Contains("interface eth0 has an MTU of 1500") &&
                          Catch::Contains("set data.mtu: 1500 on every node") &&
                          Catch::Contains("ip link set eth0 mtu 9000"));
  CHECK_NOTHROW(fits(interface_mtu("lo"), int(kLargestMtu)));
  // Below 1,280 bytes the least data.mtu is the fix while its datagrams fit; below 1,212 none does.
  REQUIRE_THROWS_WITH(fits(1250, 1500), Catch::Contains("set data.mtu: 1280 on every node"));
  CHECK_NOTHROW(fits(1212, 1280));
  REQUIRE_THROWS_WITH(fits(1211, 1500), Catch::Contains("less than the 1212 bytes") &&
                                            Catch::Contains("an interface of a larger MTU"));
}

TEST_CASE("a chunk refused for room is reported, not NAKed, until it is taken") {
  LinkReceiver r;
  REQUIRE(r.accept(1, 1096) == LinkReceiver::Accept::kNew);
  r.refused(2, 1096);  // no room for it
  REQUIRE(r.accept(3, 1096) == LinkReceiver::Accept::kNew);
  CHECK(r.refused_count() == 1);
  CHECK(r.refused_bytes() == 1096);
  // 2 is a gap below 3, but its sender knows why: no NAK storm for it.
  CHECK(r.naks_due(LinkReceiver::Clock::now(), std::chrono::microseconds(0)).empty());
  r.refused(2, 1096);  // refused again: counted once
  CHECK(r.refused_count() == 1);
  // Room freed: every refused chunk is asked for at once, and stays refused until taken.
  CHECK(r.refused_to_ask_again() == std::vector<uint64_t>{2});
  CHECK(r.refused_count() == 1);
  REQUIRE(r.accept(2, 1096) == LinkReceiver::Accept::kNew);  // room at last
  CHECK(r.refused_count() == 0);
  CHECK(r.refused_bytes() == 0);
  CHECK(r.cumulative() == 3);
}

TEST_CASE("an ack lists the lowest ranges taken and counts the bytes of the rest") {
  LinkReceiver r;
  // Taken: 2, 4, 6, 8 (1, 3, 5, 7 refused for room, as when two messages interleave).
  for (uint64_t seq : {2, 4, 6, 8}) REQUIRE(r.accept(seq, 1000 + uint32_t(seq)) ==
                                            LinkReceiver::Accept::kNew);
  LinkReceiver::Ranges two = r.received_ranges(2);
  CHECK(two.pairs == std::vector<uint64_t>{2, 2, 4, 4});
  CHECK(two.unlisted_bytes == 1006 + 1008);
  CHECK(r.received_ranges(8).unlisted_bytes == 0);
  // 1 and 3 arrive: the cumulative ack passes 1..4 and their bytes leave the count.
  REQUIRE(r.accept(1, 500) == LinkReceiver::Accept::kNew);
  REQUIRE(r.accept(3, 500) == LinkReceiver::Accept::kNew);
  CHECK(r.cumulative() == 4);
  LinkReceiver::Ranges one = r.received_ranges(1);
  CHECK(one.pairs == std::vector<uint64_t>{6, 6});
  CHECK(one.unlisted_bytes == 1008);
  REQUIRE(r.accept(8, 0) == LinkReceiver::Accept::kDuplicate);  // counted once
  CHECK(r.received_ranges(1).unlisted_bytes == 1008);
}

TEST_CASE("the AES-256-GCM tag is the documented construction, computed with libsodium's calls") {
  Authenticator gcm(test_key(), false);
  if (!gcm.aes_gcm()) DTRAIN_SKIP("this CPU has no AES-NI/CLMUL, libsodium offers no AES-256-GCM");
  const std::vector<uint8_t> d = chunk_datagram(gcm, 5, 5, 1, 5, 1, Aead::kAes256Gcm);
  // As transport/security/authenticator.h documents it, with libsodium's own calls: key =
  // BLAKE2b(cluster key; salt = sender, receiver, boot; personal "dtrain-data-gcm"), nonce =
  // 4 zero bytes and the counter, the whole datagram before the tag as associated data.
  unsigned char salt[16], key[32], nonce[12] = {0}, tag[16];
  std::memcpy(salt, d.data() + 4, 8);        // sender, receiver (little-endian on the wire)
  std::memcpy(salt + 8, d.data() + 16, 8);   // boot id
  std::memcpy(nonce + 4, d.data() + 24, 8);  // counter
  const unsigned char personal[16] = {'d', 't', 'r', 'a', 'i', 'n', '-', 'd',
                                      'a', 't', 'a', '-', 'g', 'c', 'm', 0};
  const ClusterKey cluster = test_key();
  REQUIRE(crypto_generichash_blake2b_salt_personal(key, 32, nullptr, 0, cluster.data(), 32, salt,
                                                   personal) == 0);
  unsigned long long tag_len = 0;
  unsigned char none[1] = {0};
  crypto_aead_aes256gcm_encrypt_detached(none, tag, &tag_len, none, 0, d.data(),
                                         d.size() - kTagBytes, nullptr, nonce, key);
  CHECK(std::memcmp(tag, d.data() + d.size() - kTagBytes, kTagBytes) == 0);
}
