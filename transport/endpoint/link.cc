#include "transport/endpoint/link.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dtrain::transport {
namespace {

constexpr auto kAckInterval = std::chrono::microseconds(300);
constexpr uint64_t kAckEvery = 16;
constexpr size_t kMaxAckRanges = 32;  // selective-ack ranges per ack (16 bytes each)
constexpr auto kNakInterval = std::chrono::milliseconds(1);
constexpr auto kRto = std::chrono::milliseconds(20);
// Above any round trip it must wait out: at 250 ms, a 200 ms link whose acks queued behind its
// own data a little timed out and sent its whole window again every 250 ms.
constexpr auto kMaxRto = std::chrono::milliseconds(1000);
// A long link's sends are paced at this times its credit a shortest round trip
// (transport/reliability/pacer.h): a little faster than the credit refills, so pacing spreads
// bursts without holding the sender below what its credit allows.
constexpr double kPaceGain = 1.25;
constexpr size_t kPaceBurst = 64 * 1024;

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool BootRecord::refuses(uint64_t boot) const {
  if (announced != 0) return boot != announced;
  return std::find(retired.begin(), retired.end(), boot) != retired.end();
}

void BootRecord::retire(uint64_t boot) {
  if (boot == 0 || std::find(retired.begin(), retired.end(), boot) != retired.end()) return;
  retired.push_back(boot);
  if (retired.size() > kRemembered) retired.pop_front();
}

Link::Link(uint32_t id, const asio::ip::udp::endpoint& address, const LinkTiming& timing,
           LinkHost& host)
    : id_(id), address_(address), timing_(timing), host_(host),
      sender_(timing.credit_window),
      credit_(timing.credit_window, timing.max_credit_window) {}

void Link::revive(Clock::time_point now) {
  last_heard_ = now;
  counters_.lost = false;
}

std::optional<DropReason> Link::admit(const DatagramHeader& header, uint32_t link_epoch,
                                      BootRecord& boots, Clock::time_point now, size_t len) {
  // The boot first: a replay window that started over for an old boot would take its
  // datagrams again.
  if (boots.refuses(header.boot_id)) return DropReason::kStaleBoot;
  if (!replay_.accept(header.boot_id, header.counter)) return DropReason::kReplayed;
  if (boot_seen_ != header.boot_id) {
    // A restarted peer numbers everything from the start again.
    if (boot_seen_ != 0) {
      boots.retire(boot_seen_);
      reset_sender();
    }
    counters_.aead = Aead::kXChaCha20Poly1305;  // until this boot's heartbeat says otherwise
    boot_seen_ = header.boot_id;
    restart_receiving(link_epoch);
  } else if (link_epoch != recv_epoch_) {
    if (link_epoch < recv_epoch_) return DropReason::kReplayed;  // from before its reset
    restart_receiving(link_epoch);
  }
  last_heard_ = now;
  counters_.lost = false;
  ++counters_.datagrams_in;
  counters_.bytes_in += len;
  return std::nullopt;
}

void Link::restart_receiving(uint32_t epoch) {
  receiver_ = LinkReceiver();
  credit_.reset();
  recv_epoch_ = epoch;
  host_.receiving_restarted(*this);
}

void Link::on_ack(const wire::Ack& a, Clock::time_point now) {
  if (a.epoch() != send_epoch_) return;  // about our link before its reset
  const auto* received = a.received();
  LinkSender::AckReport report;
  report.cumulative = a.cumulative();
  report.credit = a.credit_bytes();
  report.received = received ? received->data() : nullptr;
  report.received_len = received ? received->size() : 0;
  report.refused = a.refused();
  report.refused_bytes = a.refused_bytes();
  report.unlisted_bytes = a.unlisted_bytes();
  host_.release_budget(sender_.on_ack(report, now));
  pace();
  transmit(now);  // credit came back: use it now rather than at the next tick
}

std::chrono::microseconds Link::round_trips(double times, std::chrono::microseconds floor) const {
  return std::clamp<std::chrono::microseconds>(
      std::chrono::microseconds(static_cast<int64_t>(times * counters_.rtt_us)), floor, kMaxRto);
}

void Link::on_nak(const wire::Nak& n, Clock::time_point now) {
  if (n.epoch() != send_epoch_) return;
  ++counters_.naks_received;
  const std::vector<uint64_t> missing(n.missing()->begin(), n.missing()->end());
  // One round trip between repeats (at least the NAK interval, at most the longest RTO).
  const auto min_gap = round_trips(1.0, kNakInterval);
  sender_.on_nak(missing, now, min_gap,
                 [&](uint64_t seq, const OutgoingChunk& c) { send_chunk(seq, c); });
}

void Link::on_heartbeat(const wire::Heartbeat& h) {
  counters_.aead = h.accepts_aes256gcm() && host_.accepts_aes256gcm() ? Aead::kAes256Gcm
                                                                      : Aead::kXChaCha20Poly1305;
  last_peer_sent_ns_ = h.sent_ns();
  last_peer_heard_ns_ = now_ns();
  if (h.echo_ns() == 0) return;
  const double rtt = (double(now_ns()) - double(h.echo_ns()) - double(h.echo_delay_ns())) / 1e3;
  counters_.rtt_us = counters_.rtt_us == 0 ? rtt : 0.875 * counters_.rtt_us + 0.125 * rtt;
  credit_.round_trip(std::chrono::microseconds(int64_t(rtt)));
  pace();
}

void Link::pace() {
  if (!credit_.long_link()) return sender_.pacer().set(0, 0);
  const double rtt_s = std::chrono::duration<double>(credit_.shortest_round_trip()).count();
  // The bucket holds two ticks of the rate (the link sends at its 1 ms ticks), at least
  // kPaceBurst: what the queues on the way hold at once.
  const double rate = kPaceGain * double(sender_.credit()) / rtt_s;
  sender_.pacer().set(rate, std::max(kPaceBurst, size_t(rate * 2e-3)));
}

void Link::refused_chunk(uint64_t seq, uint32_t payload_bytes, Clock::time_point now) {
  receiver_.refused(seq, uint32_t(payload_bytes + OutgoingChunk::kFramingBytes));
  if (receiver_.ack_due(now, kAckEvery, kAckInterval)) send_ack(now);
}

void Link::retry_refused() {
  const std::vector<uint64_t> seqs = receiver_.refused_to_ask_again();
  for (size_t i = 0; i < seqs.size(); i += LinkReceiver::kMaxNakEntries) {
    const size_t n = std::min<size_t>(LinkReceiver::kMaxNakEntries, seqs.size() - i);
    send_nak(std::vector<uint64_t>(seqs.begin() + long(i), seqs.begin() + long(i + n)));
  }
}

void Link::took_chunk(uint64_t seq, uint32_t payload_bytes, Clock::time_point now) {
  receiver_.accept(seq, uint32_t(payload_bytes + OutgoingChunk::kFramingBytes));
  grow_credit(payload_bytes + OutgoingChunk::kFramingBytes, now);
  // Ack every kAckEvery datagrams as they arrive: the sender's credit comes back without
  // waiting for the next tick.
  if (receiver_.ack_due(now, kAckEvery, std::chrono::hours(1))) send_ack(now);
}

void Link::grow_credit(size_t wire_bytes, Clock::time_point now) {
  const bool was_capped = credit_.capped();
  credit_.took(wire_bytes, now);
  if (credit_.capped() && !was_capped)
    spdlog::warn("data link from peer {}: its round trip wants more credit than the socket's "
                 "receive buffer of {} KB holds, so the link runs below its rate (fix: sysctl -w "
                 "net.core.rmem_max=<the link's bytes per second x its round trip, x2> on every "
                 "node; docs/operations.md, \"Long links\")",
                 id_, credit_.cap() / 1024);
}

void Link::transmit(Clock::time_point now) {
  sender_.transmit(now, [&](uint64_t seq, const OutgoingChunk& c) { send_chunk(seq, c); });
}

Link::Health Link::tick(Clock::time_point now) {
  if (now - last_heard_ > timing_.peer_timeout) return Health::kSilent;
  if (sender_.not_acknowledging(now, timing_.peer_timeout)) return Health::kNotAcknowledging;
  auto send = [&](uint64_t seq, const OutgoingChunk& c) { send_chunk(seq, c); };
  sender_.transmit(now, send);
  // Retransmit on silence only well past the round trip: on a loaded machine a fixed short
  // timeout resends what is merely waiting for CPU, doubling the traffic.
  const auto rto = round_trips(4.0, kRto);
  sender_.on_tick(now, rto, send);
  if (receiver_.ack_due(now, kAckEvery, kAckInterval)) send_ack(now);
  send_naks(now);
  if (now - last_heartbeat_ >= timing_.heartbeat_interval) send_heartbeat(now);
  return Health::kAlive;
}

void Link::reset_sender() {
  host_.release_budget(sender_.pending_own_payload());
  sender_ = LinkSender(timing_.credit_window);
  ++send_epoch_;
}

void Link::declare_lost() {
  counters_.lost = true;
  reset_sender();
}

// A chunk's datagram is built as it goes out (first time or again): nothing is copied while it
// waits in the link's queue, and its data goes from the message into the datagram in one copy
// (the payload copies were a tenth of the sender's time).
void Link::send_chunk(uint64_t seq, const OutgoingChunk& c) {
  const OutgoingMessage& m = *c.message;
  ChunkFields f;
  f.job_id = m.job_id;
  f.link_seq = seq;
  f.message_id = m.message_id;
  f.link_epoch = send_epoch_;
  f.origin = m.origin;
  f.index = c.index;
  f.count = m.chunk_count;
  f.total_bytes = static_cast<uint32_t>(m.bytes->size());
  f.chunk_bytes = m.chunk_payload;
  host_.emit_chunk(*this, f, c.data(), c.payload);
}

void Link::send_control(flatbuffers::FlatBufferBuilder& fbb, wire::Frame type,
                        flatbuffers::Offset<void> frame) {
  fbb.Finish(wire::CreateEnvelope(fbb, type, frame, send_epoch_));
  host_.emit(*this);
}

void Link::send_ack(Clock::time_point now) {
  flatbuffers::FlatBufferBuilder& fbb = host_.builder();
  const LinkReceiver::Ranges taken = receiver_.received_ranges(kMaxAckRanges);
  const auto ranges = fbb.CreateVector(taken.pairs);
  // While every chunk from this peer would be refused (a relay backlog), the window closes:
  // new chunks would only be refused and sent again, each refusal widening the sender's window
  // by its bytes. Refused chunks are NAKed once the backlog drains; an idle sender may still
  // send one chunk, which probes the window.
  const uint32_t credit = host_.holds_back(*this) ? 0 : uint32_t(credit_.credit());
  const auto ack = wire::CreateAck(
      fbb, receiver_.cumulative(), credit, recv_epoch_,
      ranges, static_cast<uint32_t>(receiver_.refused_count()),
      static_cast<uint32_t>(std::min<uint64_t>(receiver_.refused_bytes(), UINT32_MAX)),
      static_cast<uint32_t>(std::min<uint64_t>(taken.unlisted_bytes, UINT32_MAX)));
  send_control(fbb, wire::Frame::Ack, ack.Union());
  receiver_.acked(now);
}

void Link::send_naks(Clock::time_point now) {
  // A gap is NAKed again only once its repair could have arrived: a round trip and a quarter
  // (at least kNakInterval). Every millisecond, as before, a 200 ms link sent 200 NAKs per
  // lost datagram, and those that crossed the repair on its way had it sent a second time.
  const std::vector<uint64_t> naks = receiver_.naks_due(now, round_trips(1.25, kNakInterval));
  if (naks.empty()) return;
  credit_.lost();
  send_nak(naks);
}

void Link::send_nak(const std::vector<uint64_t>& missing) {
  flatbuffers::FlatBufferBuilder& fbb = host_.builder();
  const auto nak = wire::CreateNak(fbb, fbb.CreateVector(missing), recv_epoch_);
  send_control(fbb, wire::Frame::Nak, nak.Union());
  ++counters_.naks_sent;
}

void Link::send_heartbeat(Clock::time_point now) {
  flatbuffers::FlatBufferBuilder& fbb = host_.builder();
  const uint64_t t = now_ns();
  const auto hb = wire::CreateHeartbeat(
      fbb, 0, t, last_peer_sent_ns_,
      last_peer_sent_ns_ ? t - std::min(t, last_peer_heard_ns_) : 0, host_.accepts_aes256gcm());
  send_control(fbb, wire::Frame::Heartbeat, hb.Union());
  last_heartbeat_ = now;
}

}  // namespace dtrain::transport
