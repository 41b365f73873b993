// The sending half of a link: sequence numbers in transmission order, credit limits, the equal
// share between a node's own messages and what it relays, which acknowledged bytes go back
// to the send budget, and its in-flight record against a plain model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "transport/reliability/link_sender.h"

using namespace dtrain::transport;

namespace {

std::shared_ptr<const OutgoingMessage> message(uint64_t id, bool relayed, size_t chunks,
                                               uint32_t payload = 1000) {
  auto m = std::make_shared<OutgoingMessage>();
  m->message_id = id;
  m->relayed = relayed;
  m->chunk_payload = payload;
  m->chunk_count = static_cast<uint32_t>(chunks);
  m->bytes = std::make_shared<std::vector<uint8_t>>(chunks * payload, uint8_t(id));
  return m;
}

void enqueue_all(LinkSender& s, const std::shared_ptr<const OutgoingMessage>& m) {
  for (uint32_t i = 0; i < m->chunk_count; ++i) s.enqueue({m, i, m->chunk_payload});
}

struct Sent {
  uint64_t seq;
  bool relayed;
};

std::vector<Sent> transmit(LinkSender& s) {
  std::vector<Sent> out;
  s.transmit(LinkSender::Clock::now(), [&](uint64_t seq, const OutgoingChunk& c) {
    out.push_back({seq, c.message->relayed});
  });
  return out;
}

}  // namespace

// One ack's report, the way wire::Ack carries it.
LinkSender::AckReport ack(uint64_t cumulative, size_t credit, const uint64_t* received = nullptr,
                          size_t received_len = 0) {
  LinkSender::AckReport a;
  a.cumulative = cumulative;
  a.credit = uint32_t(credit);
  a.received = received;
  a.received_len = received_len;
  return a;
}

TEST_CASE("own messages are not starved by a relay backlog queued before them") {
  LinkSender s(1 << 30);
  enqueue_all(s, message(1, /*relayed=*/true, 100));
  enqueue_all(s, message(2, /*relayed=*/false, 10));
  const std::vector<Sent> sent = transmit(s);
  REQUIRE(sent.size() == 110);
  // Sequence numbers follow transmission order, with no gaps (the receiver NAKs gaps).
  for (size_t i = 0; i < sent.size(); ++i) REQUIRE(sent[i].seq == i + 1);
  // All ten own chunks go out among the first 21, not after the hundred relayed ones.
  size_t last_own = 0;
  for (size_t i = 0; i < sent.size(); ++i)
    if (!sent[i].relayed) last_own = i;
  REQUIRE(last_own <= 20);
}

TEST_CASE("a queue that was idle gets no catch-up burst") {
  LinkSender s(1 << 30);
  enqueue_all(s, message(1, /*relayed=*/false, 50));
  REQUIRE(transmit(s).size() == 50);
  enqueue_all(s, message(2, /*relayed=*/true, 10));
  enqueue_all(s, message(3, /*relayed=*/false, 10));
  const std::vector<Sent> sent = transmit(s);
  REQUIRE(sent.size() == 20);
  // Both start level: the relayed message is not held back for the own bytes sent earlier.
  size_t relayed_in_first_ten = 0;
  for (size_t i = 0; i < 10; ++i) relayed_in_first_ten += sent[i].relayed;
  REQUIRE(relayed_in_first_ten >= 4);
}

TEST_CASE("credit bounds the bytes in flight and acks give back only own bytes") {
  const size_t chunk_wire = 1000 + OutgoingChunk::kFramingBytes;
  LinkSender s(4 * chunk_wire);
  enqueue_all(s, message(1, /*relayed=*/true, 4));
  enqueue_all(s, message(2, /*relayed=*/false, 4));
  std::vector<Sent> sent = transmit(s);
  REQUIRE(sent.size() == 4);
  REQUIRE(s.in_flight_bytes() == 4 * chunk_wire);
  REQUIRE(s.credit_stalls() == 1);
  REQUIRE(s.pending_own_payload() == 4 * 1000);
  size_t own_sent = 0;
  for (const Sent& x : sent) own_sent += !x.relayed;
  // Everything sent so far acknowledged: the budget gets back the own bytes among them only.
  const size_t freed = s.on_ack(ack(4, 4 * chunk_wire), LinkSender::Clock::now());
  REQUIRE(freed == own_sent * 1000);
  REQUIRE(transmit(s).size() == 4);
  REQUIRE(s.on_ack(ack(8, 4 * chunk_wire), LinkSender::Clock::now()) ==
          (4 - own_sent) * 1000);
  REQUIRE(s.idle());
  REQUIRE(s.pending_own_payload() == 0);
}

TEST_CASE("a link whose peer acknowledges nothing for the limit is not acknowledging") {
  LinkSender s(1 << 20);
  const auto start = LinkSender::Clock::now();
  REQUIRE_FALSE(s.not_acknowledging(start + std::chrono::hours(1), std::chrono::seconds(1)));
  enqueue_all(s, message(1, false, 4));
  enqueue_all(s, message(2, true, 2));
  REQUIRE(s.relayed_bytes() == 2 * (1000 + OutgoingChunk::kFramingBytes));
  const auto sent = transmit(s);
  REQUIRE(sent.size() == 6);
  const auto later = LinkSender::Clock::now() + std::chrono::seconds(2);
  REQUIRE(s.not_acknowledging(later, std::chrono::seconds(1)));
  // Any progress (here a selective ack of one datagram) counts as acknowledging.
  const uint64_t one[] = {sent[5].seq, sent[5].seq};
  s.on_ack(ack(0, 1 << 20, one, 2), later);
  REQUIRE_FALSE(s.not_acknowledging(later, std::chrono::seconds(1)));
  REQUIRE(s.relayed_bytes() == (sent[5].relayed ? 1 : 2) * (1000 + OutgoingChunk::kFramingBytes));
  s.on_ack(ack(sent.back().seq, 1 << 20), later);
  REQUIRE(s.relayed_bytes() == 0);
  REQUIRE_FALSE(s.not_acknowledging(later + std::chrono::hours(1), std::chrono::seconds(1)));
}

TEST_CASE("chunks the receiver refused for room are outside the credit, and it is busy, not dead") {
  const size_t chunk_wire = 1000 + OutgoingChunk::kFramingBytes;
  LinkSender s(2 * chunk_wire);
  enqueue_all(s, message(1, /*relayed=*/true, 6));
  const auto start = LinkSender::Clock::now();
  const std::vector<Sent> first = transmit(s);
  REQUIRE(first.size() == 2);  // the credit: two chunks
  // The receiver refused both for want of room: it acknowledges nothing, but says so. Their
  // bytes no longer hold the window: two more chunks may go (those of the message that has
  // the room, in the deadlock this prevents).
  LinkSender::AckReport refusing = ack(0, 2 * chunk_wire);
  refusing.refused = 2;
  refusing.refused_bytes = uint32_t(2 * chunk_wire);
  s.on_ack(refusing, start);
  REQUIRE(transmit(s).size() == 2);
  REQUIRE(s.in_flight_bytes() == 4 * chunk_wire);
  // Busy is alive: no loss for as long as the refusals are reported...
  const auto later = start + std::chrono::seconds(2);
  refusing.refused = 4;
  refusing.refused_bytes = uint32_t(4 * chunk_wire);
  s.on_ack(refusing, later);
  REQUIRE_FALSE(
      s.not_acknowledging(later + std::chrono::milliseconds(500), std::chrono::seconds(1)));
  // ...and a receiver that reports nothing at all for the limit is not acknowledging.
  REQUIRE(s.not_acknowledging(later + std::chrono::seconds(2), std::chrono::seconds(1)));
}

TEST_CASE("chunks taken but not listed in the ack are outside the credit too") {
  // The receiver took chunks 2, 4 and 6 and refused 1, 3, 5 (room): three ranges, but say its
  // ack lists only the first. Before unlisted_bytes, the two unlisted chunks held the window
  // (credit: three chunks) and nothing more could go: the averaging deadlock
  // docs/architecture/transport.md, "The data channel" describes.
  const size_t chunk_wire = 1000 + OutgoingChunk::kFramingBytes;
  LinkSender s(3 * chunk_wire);
  enqueue_all(s, message(1, false, 12));
  const auto now = LinkSender::Clock::now();
  REQUIRE(transmit(s).size() == 3);
  REQUIRE(transmit(s).empty());  // the window is full
  LinkSender::AckReport a = ack(0, 3 * chunk_wire);
  const uint64_t first_taken[] = {2, 2};
  a.received = first_taken;
  a.received_len = 2;
  a.refused = 2;  // chunks 1 and 3
  a.refused_bytes = uint32_t(2 * chunk_wire);
  s.on_ack(a, now);
  REQUIRE(transmit(s).size() == 3);  // 4, 5, 6: the window counts only what is on its way
  a.refused = 3;
  a.refused_bytes = uint32_t(3 * chunk_wire);  // 1, 3, 5
  a.unlisted_bytes = uint32_t(2 * chunk_wire);  // 4 and 6, taken, not listed
  s.on_ack(a, now);
  REQUIRE(s.in_flight_bytes() == 5 * chunk_wire);  // 1, 3, 4, 5, 6: held until acknowledged
  REQUIRE(transmit(s).size() == 3);                 // the window is free again
  a.unlisted_bytes = 0;  // the same report without them: the window stays full
  s.on_ack(a, now);
  REQUIRE(transmit(s).empty());
}

// The in-flight record (a deque indexed by sequence number since 2026-11-27, a std::map before)
// against a plain set of what was sent and not acknowledged: random sends, cumulative and
// selective acks (some overlapping, some past what was sent), NAKs and silences, checking each
// step's freed bytes, the bytes in flight, what may be sent again, and idleness.
TEST_CASE("what is in flight agrees with a plain model under random acks, NAKs and ticks") {
  std::mt19937_64 rng(5);
  LinkSender s(1 << 30);
  std::map<uint64_t, OutgoingChunk> model;  // seq -> chunk, sent and not acknowledged
  uint64_t next_id = 1, highest_sent = 0;
  auto now = LinkSender::Clock::now();
  auto record = [&](std::vector<uint64_t>& out) {
    return [&out](uint64_t seq, const OutgoingChunk&) { out.push_back(seq); };
  };
  for (int step = 0; step < 20000; ++step) {
    now += std::chrono::milliseconds(1);
    switch (rng() % 5) {
      case 0: {  // a message of 1-8 chunks, own or relayed, with a short last chunk
        const size_t chunks = 1 + rng() % 8;
        auto m = message(next_id++, rng() % 3 == 0, chunks, 100 + uint32_t(rng() % 900));
        for (uint32_t i = 0; i < m->chunk_count; ++i)
          s.enqueue({m, i, i + 1 == m->chunk_count ? m->chunk_payload / 2 : m->chunk_payload});
        std::vector<uint64_t> sent;
        s.transmit(now, [&](uint64_t seq, const OutgoingChunk& c) {
          sent.push_back(seq);
          model.emplace(seq, c);
        });
        for (uint64_t seq : sent) REQUIRE(seq == ++highest_sent);  // in order, none skipped
        break;
      }
      case 1: {  // an ack: a cumulative point and up to 3 ranges above it, in any state
        const uint64_t cumulative = highest_sent == 0 ? 0 : rng() % (highest_sent + 1);
        // Ascending by first number, as LinkReceiver lists them, but overlapping at will.
        std::vector<std::pair<uint64_t, uint64_t>> pairs;
        for (int r = int(rng() % 4); r > 0; --r) {
          const uint64_t first = cumulative + 1 + rng() % 40;
          pairs.emplace_back(first, first + rng() % 10);
        }
        std::sort(pairs.begin(), pairs.end());
        std::vector<uint64_t> ranges;
        for (const auto& [first, last] : pairs) {
          ranges.push_back(first);
          ranges.push_back(last);
        }
        size_t expected_freed = 0;
        auto take = [&](uint64_t first, uint64_t last) {
          for (auto it = model.lower_bound(first); it != model.end() && it->first <= last;) {
            if (!it->second.message->relayed) expected_freed += it->second.payload;
            it = model.erase(it);
          }
        };
        take(0, cumulative);
        for (size_t i = 0; i + 1 < ranges.size(); i += 2) take(ranges[i], ranges[i + 1]);
        const size_t freed = s.on_ack(ack(cumulative, 1 << 30, ranges.data(), ranges.size()), now);
        REQUIRE(freed == expected_freed);
        break;
      }
      case 2: {  // a NAK of a few numbers, sent or not, acknowledged or not
        std::vector<uint64_t> missing;
        for (int k = int(rng() % 5); k > 0; --k) missing.push_back(rng() % (highest_sent + 5));
        std::vector<uint64_t> resent;
        s.on_nak(missing, now, std::chrono::microseconds(0), record(resent));
        for (uint64_t seq : resent) REQUIRE(model.count(seq) == 1);
        for (uint64_t seq : missing)
          if (model.count(seq)) REQUIRE(std::count(resent.begin(), resent.end(), seq) >= 1);
        break;
      }
      case 3: {  // silence past the timeout: the oldest unacknowledged go again, at most 8
        now += std::chrono::seconds(1);
        std::vector<uint64_t> resent;
        s.on_tick(now, std::chrono::milliseconds(20), record(resent));
        std::vector<uint64_t> oldest;
        for (const auto& [seq, c] : model)
          if (oldest.size() < 8) oldest.push_back(seq);
        REQUIRE(resent == oldest);
        break;
      }
      default: break;
    }
    size_t bytes = 0, own_payload = 0;
    for (const auto& [seq, c] : model) {
      bytes += c.wire_bytes();
      if (!c.message->relayed) own_payload += c.payload;
    }
    REQUIRE(s.in_flight_bytes() == bytes);
    REQUIRE(s.pending_own_payload() == own_payload);
    REQUIRE(s.idle() == model.empty());
  }
}

// An authenticated but broken or hostile peer: ranges out of order, repeated, or covering the
// whole window many times. An ack never releases a number it does not list, and walks each slot
// at most once (a range below the last one's end releases only what lies above it).
TEST_CASE("ranges out of order or repeated release only what they list, each slot once") {
  LinkSender s(1 << 30);
  enqueue_all(s, message(1, false, 10));  // sequence numbers 1..10, 1000 bytes each
  REQUIRE(transmit(s).size() == 10);
  const uint64_t descending[] = {8, 9, 2, 3};  // 8-9, then 2-3 (below 9: not walked again)
  CHECK(s.on_ack(ack(0, 1 << 30, descending, 4), LinkSender::Clock::now()) == 2000);
  const uint64_t repeated[] = {1, 10, 1, 10, 1, 10};  // the whole window three times
  // The rest: 1-7 and 10 (2 and 3 too, which the first ack listed out of order).
  CHECK(s.on_ack(ack(0, 1 << 30, repeated, 6), LinkSender::Clock::now()) == 8000);
  CHECK(s.idle());
}
