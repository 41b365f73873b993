// The receiving half of a lane's I/O thread: what waits on the socket, many datagrams per
// system call, cut into datagrams, their tags checked (on the tag workers where there are some),
// and each handed to its peer's link by kind (docs/architecture/transport.md, "The data channel",
// for the order of the checks).
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cstring>

#include "transport/endpoint/lane.h"
#include "transport/wire/chunk_view.h"

namespace dtrain::transport {

void Lane::handle(const uint8_t* data, size_t len, TagVerdict tag, Clock::time_point now) {
  ParsedDatagram d;
  DropReason reason;
  // Up to the largest any node sends, not this node's own size (datagram.h).
  if (!parse_datagram(data, len, kLargestDatagram, auth_, d, reason, tag)) {
    // Before the tag is checked the sender field is not trustworthy: count it as unknown.
    unknown_.drop(reason);
    return;
  }
  Link* from = link(d.header.sender);
  if (!from) {
    unknown_.drop(DropReason::kUnknownPeer);
    return;
  }
  // Authenticated from a peer, but sealed for another node: replayed here from elsewhere.
  if (d.header.receiver != config_.node_id) {
    from->counters().drop(DropReason::kWrongReceiver);
    return;
  }
  // Authenticated, but another lane's (misrouted) or from a node with another lane count:
  // taken here it would mix two lanes' sequence numbers on one link.
  if (d.header.lane != index_ || d.header.lanes != config_.lanes) {
    from->counters().drop(DropReason::kWrongLane);
    if (shared_.wrong_lane) shared_.wrong_lane(d.header.sender, d.header);
    return;
  }
  const bool was_lost = from->lost();
  if (auto refused = from->admit(d.header, d.link_epoch(), boots_[d.header.sender], now, len)) {
    from->counters().drop(*refused);
    return;
  }
  if (was_lost && shared_.lane_revived) shared_.lane_revived(from->id());
  if (d.header.chunk) return on_chunk(*from, d, now);
  const wire::Envelope& e = *d.envelope;
  switch (e.frame_type()) {
    case wire::Frame::Ack: from->on_ack(*e.frame_as_Ack(), now); return;
    case wire::Frame::Nak: from->on_nak(*e.frame_as_Nak(), now); return;
    case wire::Frame::Heartbeat: from->on_heartbeat(*e.frame_as_Heartbeat()); return;
    default: from->counters().drop(DropReason::kMalformed); return;
  }
}

// A chunk is acknowledged only once it is taken: by reassembly, or as a chunk of a job this
// node does not run (dropped for good). One refused for want of room (reassembly budget, or a
// relay backlog) is left unacknowledged, so its sender sends it again later: nothing is lost.
void Lane::on_chunk(Link& from, const ParsedDatagram& d, Clock::time_point now) {
  const uint64_t seq = d.chunk.link_seq;
  switch (from.receiver().peek(seq)) {
    case LinkReceiver::Accept::kTooFarAhead: from.counters().drop(DropReason::kMalformed); return;
    case LinkReceiver::Accept::kDuplicate:
      ++from.counters().duplicates;
      from.receiver().accept(seq, 0);  // acknowledged again: our ack was probably lost
      return;
    case LinkReceiver::Accept::kNew: break;
  }
  const ChunkView v = chunk_view(d);
  if (!jobs_.count(v.key.job_id)) {
    from.took_chunk(seq, uint32_t(v.size), now);
    from.counters().drop(DropReason::kUnknownJob);
    return;
  }
  if (relay_backlogged(from.id())) {
    from.counters().drop(DropReason::kNoRoom);
    from.refused_chunk(seq, uint32_t(v.size), now);
    return;
  }
  std::vector<uint8_t> message;
  const Reassembler::Result result = reassembler_.add(v, message, from.id(), now);
  if (result == Reassembler::Result::kNoRoom) {
    from.counters().drop(DropReason::kNoRoom);
    from.refused_chunk(seq, uint32_t(v.size), now);
    return;
  }
  from.took_chunk(seq, uint32_t(v.size), now);
  switch (result) {
    case Reassembler::Result::kComplete: {
      ++from.counters().messages_in;
      room_freed_ = true;  // the chunks refused for room are wanted now (at the next tick)
      if (shared_.on_message)
        shared_.on_message(Delivery{v.key.job_id, v.key.origin, v.key.message_id, from.id(),
                            std::move(message)});
      return;
    }
    case Reassembler::Result::kDuplicate: ++from.counters().duplicates; return;
    case Reassembler::Result::kRejected:
      from.counters().drop(DropReason::kMalformed);
      // Logged at most every kOversizedLogEvery: a peer with the key could send such chunks as
      // fast as it likes.
      if (v.total_bytes > config_.reassembly_bytes &&
          now - oversized_logged_ >= kOversizedLogEvery) {
        oversized_logged_ = now;
        spdlog::error("node {}: a message of {} bytes from node {} exceeds the reassembly budget "
                      "of {} bytes and is dropped (fix: a smaller model; a parameter snapshot "
                      "must fit the budget)",
                      config_.node_id, v.total_bytes, v.key.origin, config_.reassembly_bytes);
      }
      return;
    default: return;
  }
}

void Lane::handle_aligned(const uint8_t* data, size_t len, TagVerdict tag,
                          Clock::time_point now) {
  if (reinterpret_cast<uintptr_t>(data) % 8 == 0) return handle(data, len, tag, now);
  // The FlatBuffers body must stay 8-byte aligned: a segment size of another's, or bytes a
  // test handed over, are copied first.
  std::memcpy(rx_.data(), data, len);
  handle(reinterpret_cast<const uint8_t*>(rx_.data()), len, tag, now);
}

void Lane::receive_datagram(const uint8_t* data, size_t len, Clock::time_point now) {
  if (len > kReceiveBuffer) {  // no slot of the socket's would have held it whole
    unknown_.drop(DropReason::kOversized);
    return;
  }
  handle_aligned(data, len, TagVerdict::kUnchecked, now);
  flush();
}

void Lane::receive() {
  socket_.async_wait(asio::ip::udp::socket::wait_read, [this](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted || !socket_.is_open()) return;
    drain_socket();
    flush();
    receive();
  });
}

// What is waiting, many datagrams per system call (and, coalesced, many per slot).
void Lane::drain_socket() {
  for (int round = 0; round < 8 && socket_.is_open(); ++round) {
    mmsghdr msgs[kReceiveBatch];
    iovec iov[kReceiveBatch];
    alignas(cmsghdr) char control[kReceiveBatch][kCoalescedControlBytes];
    for (size_t i = 0; i < kReceiveBatch; ++i) {
      iov[i] = {rx_batch_.data() + i * (slot_ / 8), slot_};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      if (coalescing_) {
        msgs[i].msg_hdr.msg_control = control[i];
        msgs[i].msg_hdr.msg_controllen = kCoalescedControlBytes;
      }
    }
    const int n = ::recvmmsg(socket_.native_handle(), msgs, kReceiveBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return;
    const auto now = Clock::now();
    received_.clear();
    for (int i = 0; i < n; ++i) {
      const msghdr& h = msgs[i].msg_hdr;
      const size_t segment = coalescing_ ? coalesced_segment_size(h) : 0;
      const auto* data = reinterpret_cast<const uint8_t*>(rx_batch_.data() + i * (slot_ / 8));
      size_t len = msgs[i].msg_len;
      if (h.msg_flags & MSG_TRUNC) {
        // Longer than the slot: a datagram longer than any of ours, or a coalesced run longer
        // than 64 KB, whose whole segments are still judged one by one.
        unknown_.drop(DropReason::kOversized);
        len = segment > 0 ? len / segment * segment : 0;
      }
      if (len > 0) split_slot(data, len, segment);
    }
    check_tags();
    for (size_t k = 0; k < received_.size(); ++k)
      handle_aligned(received_[k].data, received_[k].len, verdicts_[k], now);
    if (n < static_cast<int>(kReceiveBatch)) return;
  }
}

void Lane::split_slot(const uint8_t* data, size_t len, size_t segment) {
  if (segment == 0 || segment >= len) {
    received_.push_back({data, len});
    return;
  }
  for (size_t offset = 0; offset < len; offset += segment)
    received_.push_back({data + offset, std::min(segment, len - offset)});
}

// Only tags under keys already cached are checked here (the workers may not touch the cache);
// the rest, and every datagram without workers, are checked by handle() as they come.
void Lane::check_tags() {
  verdicts_.assign(received_.size(), TagVerdict::kUnchecked);
  if (tag_workers_.threads() == 0) return;
  tag_checks_.clear();
  for (size_t k = 0; k < received_.size(); ++k) {
    DatagramHeader h;
    DropReason reason;
    const Received& r = received_[k];
    if (!read_header(r.data, r.len, kLargestDatagram, h, reason)) continue;
    if (const Authenticator::Keys* keys = auth_.cached_key(h.tag_context()))
      tag_checks_.push_back({k, keys, h.tag_context()});
  }
  tag_workers_.run(tag_checks_.size(), [this](size_t j) {
    const TagCheck& c = tag_checks_[j];
    const Received& r = received_[c.index];
    verdicts_[c.index] = Authenticator::check_with(*c.keys, r.data, r.len - kTagBytes, c.context)
                            ? TagVerdict::kHeld
                            : TagVerdict::kFailed;
  });
}

}  // namespace dtrain::transport
