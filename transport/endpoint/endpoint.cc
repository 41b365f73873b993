#include "transport/endpoint/endpoint.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <pthread.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <future>

#include "transport/endpoint/send_budget.h"
#include "transport/reliability/link_receiver.h"
#include "transport/reliability/link_sender.h"
#include "transport/reliability/reassembler.h"
#include "transport/security/replay_window.h"
#include "transport/transport_error.h"
#include "transport/wire/chunk_view.h"

namespace dtrain::transport {
namespace {

using Clock = std::chrono::steady_clock;
using asio::ip::udp;

constexpr auto kTick = std::chrono::microseconds(1000);
constexpr auto kAckInterval = std::chrono::microseconds(300);
constexpr uint64_t kAckEvery = 16;
constexpr size_t kMaxAckRanges = 32;  // selective-ack ranges per ack (16 bytes each)
constexpr auto kNakInterval = std::chrono::milliseconds(1);
constexpr auto kRto = std::chrono::milliseconds(20);
constexpr auto kMaxRto = std::chrono::milliseconds(250);
constexpr size_t kReceiveBuffer = 65536;
// recvmmsg slots hold max_datagram + 8 bytes, 8-aligned: a longer datagram is cut to the slot
// and then fails its size check, as it should.
constexpr size_t kReceiveBatch = 32;

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Endpoint::Peer {
  explicit Peer(size_t credit) : sender(credit) {}
  uint32_t id = 0;
  udp::endpoint address;
  LinkSender sender;
  LinkReceiver receiver;
  ReplayWindow replay;
  uint64_t boot_seen = 0;
  uint32_t send_epoch = 0;  // ours towards this peer
  uint32_t recv_epoch = 0;  // the peer's towards us
  Clock::time_point last_heard = Clock::now();
  Clock::time_point last_heartbeat{};
  uint64_t last_peer_sent_ns = 0;
  uint64_t last_peer_heard_ns = 0;  // when that heartbeat arrived
  PeerCounters counters;
};

struct Endpoint::State {
  State(const EndpointConfig& c)
      : socket(io),
        timer(io),
        auth(c.key, c.insecure),
        reassembler(c.reassembly_bytes, c.reassembly_timeout),
        faults(c.faults),
        budget(c.send_queue_bytes) {}

  asio::io_context io;
  udp::socket socket;
  asio::steady_timer timer;
  Authenticator auth;
  Reassembler reassembler;
  FaultInjector faults;
  uint64_t boot_id = 0;
  uint64_t counter = 0;
  std::map<uint32_t, std::unique_ptr<Peer>> peers;
  PeerCounters unknown;
  std::set<uint64_t> jobs;
  MessageHandler on_message;
  PeerHandler on_lost;
  std::function<void(Peer&)> transmit;  // set by io_loop: send what the credit allows now
  std::function<void()> flush;          // set by io_loop: hand the batched datagrams to the kernel
  // Datagrams leave in batches through one sendmmsg call (a syscall per datagram costs more
  // than the protocol); every handler flushes before it returns.
  struct Batch {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<udp::endpoint> to;
    std::vector<Peer*> peer;
    size_t size = 0;
  } batch;
  std::vector<uint64_t> rx;  // 8-byte aligned, so the FlatBuffers body (offset 24) is too
  size_t slot = 0;                 // bytes per recvmmsg slot
  std::vector<uint64_t> rx_batch;  // kReceiveBatch slots
  udp::endpoint rx_from;
  std::vector<uint8_t> tx;
  flatbuffers::FlatBufferBuilder fbb{2048};
  Clock::time_point last_expire = Clock::now();
  // Backpressure: application bytes queued or unacknowledged, over all peers.
  SendBudget budget;
};

Endpoint::Endpoint(const EndpointConfig& config) : config_(config), state_(new State(config)) {
  State& s = *state_;
  if (config.max_datagram < 256 || config.max_datagram > 65000)
    throw TransportError("max_datagram " + std::to_string(config.max_datagram) +
                             " is outside 256 .. 65000 bytes",
                         "use the default of 1408 unless your MTU says otherwise");
  asio::error_code ec;
  const auto address = asio::ip::make_address(config.bind_address, ec);
  if (ec)
    throw TransportError("'" + config.bind_address + "' is not an IP address",
                         "give the data channel an address such as 10.0.0.5 (or a network)");
  s.socket.open(address.is_v4() ? udp::v4() : udp::v6());
  s.socket.set_option(asio::socket_base::receive_buffer_size(8 << 20), ec);
  s.socket.set_option(asio::socket_base::send_buffer_size(8 << 20), ec);
  s.socket.bind(udp::endpoint(address, config.port), ec);
  if (ec)
    throw TransportError("cannot bind UDP " + config.bind_address + ":" +
                             std::to_string(config.port) + ": " + ec.message(),
                         "another dtraind may be running, or pick a free port (data_port)");
  s.socket.non_blocking(true);
  port_ = s.socket.local_endpoint().port();
  randombytes_buf(&s.boot_id, sizeof s.boot_id);
  s.rx.resize(kReceiveBuffer / 8);
  s.slot = (config.max_datagram + 8 + 7) / 8 * 8;
  s.rx_batch.resize(kReceiveBatch * s.slot / 8);
  // The largest chunk that still fits one datagram: measure the envelope around an empty one.
  flatbuffers::FlatBufferBuilder probe;
  const auto data = probe.CreateVector(std::vector<uint8_t>());
  const auto chunk = wire::CreateChunk(probe, ~0u, ~0ull, ~0u, ~0u, ~0u, ~0u, data);
  probe.Finish(wire::CreateEnvelope(probe, ~0ull, ~0ull, wire::Frame::Chunk, chunk.Union()));
  chunk_payload_ = config.max_datagram - kHeaderBytes - kTagBytes - probe.GetSize() - 16;
  if (config.insecure)
    spdlog::warn("node {}: data channel running INSECURE (no authentication): benchmarks only",
                 config.node_id);
  spdlog::info("node {}: data channel on {}:{}", config.node_id, config.bind_address, port_);
}

Endpoint::~Endpoint() { stop(); }

void Endpoint::start(MessageHandler on_message, PeerHandler on_lost) {
  state_->on_message = std::move(on_message);
  state_->on_lost = std::move(on_lost);
  io_thread_ = std::thread([this] {
    // Named so that top -H and perf show which node's I/O thread is busy.
    const std::string name = "dtrain-io-" + std::to_string(config_.node_id);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    io_loop();
  });
}

void Endpoint::stop() {
  if (!io_thread_.joinable()) return;
  asio::post(state_->io, [this] {
    asio::error_code ec;
    state_->timer.cancel();
    state_->socket.close(ec);
    state_->io.stop();
  });
  io_thread_.join();
  state_->budget.close();
}

void Endpoint::add_peer(uint32_t id, const std::string& address, uint16_t port) {
  asio::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) throw TransportError("peer address '" + address + "' is not an IP address", "fix the mesh map");
  asio::post(state_->io, [this, id, ep = udp::endpoint(ip, port)] {
    auto& slot = state_->peers[id];
    if (!slot) slot = std::make_unique<Peer>(config_.credit_window);
    slot->id = id;
    slot->address = ep;
    slot->last_heard = Clock::now();
    slot->counters.lost = false;
  });
}

void Endpoint::remove_peer(uint32_t id) {
  asio::post(state_->io, [this, id] {
    auto it = state_->peers.find(id);
    if (it == state_->peers.end()) return;
    const size_t freed = it->second->sender.pending_own_payload();
    state_->peers.erase(it);
    state_->budget.release(freed);
  });
}

void Endpoint::add_job(uint64_t job_id) {
  asio::post(state_->io, [this, job_id] { state_->jobs.insert(job_id); });
}

void Endpoint::remove_job(uint64_t job_id) {
  asio::post(state_->io, [this, job_id] { state_->jobs.erase(job_id); });
}

bool Endpoint::send(uint32_t peer, uint64_t job_id, uint32_t origin, uint64_t message_id,
                    Bytes bytes, std::chrono::milliseconds deadline, SendKind kind) {
  // Relays are not counted: they cannot wait, and letting them fill the budget starved this
  // node's own messages (a plain-mesh root forwards eight times what it publishes).
  const bool relayed = kind == SendKind::kRelay;
  if (!relayed && !state_->budget.acquire(bytes->size(), deadline)) return false;
  asio::post(state_->io, [this, peer, job_id, origin, message_id, bytes, relayed] {
    State& s = *state_;
    auto it = s.peers.find(peer);
    if (it == s.peers.end() || it->second->counters.lost) {
      if (!relayed) s.budget.release(bytes->size());
      return;
    }
    Peer& p = *it->second;
    const size_t total = bytes->size();
    auto message = std::make_shared<OutgoingMessage>();
    message->job_id = job_id;
    message->origin = origin;
    message->message_id = message_id;
    message->bytes = bytes;
    message->relayed = relayed;
    message->chunk_payload = static_cast<uint32_t>(chunk_payload_);
    message->chunk_count = static_cast<uint32_t>(
        std::max<size_t>(1, (total + chunk_payload_ - 1) / chunk_payload_));
    for (uint32_t index = 0; index < message->chunk_count; ++index) {
      const size_t offset = size_t(index) * chunk_payload_;
      const size_t len = std::min(chunk_payload_, total - std::min(total, offset));
      p.sender.enqueue(OutgoingChunk{message, index, static_cast<uint32_t>(len)});
    }
    ++p.counters.messages_out;
    if (s.transmit) s.transmit(p);
    if (s.flush) s.flush();
  });
  return true;
}

bool Endpoint::idle() {
  // Shared: if the wait below gives up, the I/O thread still has a promise to fulfil.
  auto result = std::make_shared<std::promise<bool>>();
  auto future = result->get_future();
  asio::post(state_->io, [this, result] {
    bool idle = true;
    for (auto& [id, p] : state_->peers)
      if (!p->counters.lost && !p->sender.idle()) idle = false;
    result->set_value(idle);
  });
  if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return false;
  return future.get();
}

std::map<uint32_t, PeerCounters> Endpoint::counters() {
  auto result = std::make_shared<std::promise<std::map<uint32_t, PeerCounters>>>();
  auto future = result->get_future();
  asio::post(state_->io, [this, result] {
    std::map<uint32_t, PeerCounters> out;
    for (auto& [id, p] : state_->peers) {
      PeerCounters c = p->counters;
      c.retransmits = p->sender.retransmits();
      c.credit_stalls = p->sender.credit_stalls();
      c.queued_bytes = p->sender.queued_bytes();
      c.in_flight_bytes = p->sender.in_flight_bytes();
      out[id] = c;
    }
    out[kUnknownSender] = state_->unknown;
    result->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return {};
  return future.get();
}

void Endpoint::io_loop() {
  State& s = *state_;
  constexpr size_t kBatch = 64;
  s.flush = [&s] {
    State::Batch& b = s.batch;
    if (b.size == 0) return;
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    for (size_t i = 0; i < b.size; ++i) {
      iov[i] = {b.bytes[i].data(), b.bytes[i].size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = b.to[i].data();
      msgs[i].msg_hdr.msg_namelen = static_cast<socklen_t>(b.to[i].size());
    }
    size_t done = 0;
    while (done < b.size) {
      const int n = ::sendmmsg(s.socket.native_handle(), msgs + done,
                               static_cast<unsigned>(b.size - done), 0);
      if (n <= 0) break;  // a full socket buffer is a loss like any other: NAKs repair it
      for (int i = 0; i < n; ++i) {
        if (Peer* p = b.peer[done + i]) {
          ++p->counters.datagrams_out;
          p->counters.bytes_out += b.bytes[done + i].size();
        }
      }
      done += static_cast<size_t>(n);
    }
    b.size = 0;
  };
  // The next slot of the batch, addressed; the caller fills it and calls commit().
  auto slot = [&s](const udp::endpoint& to, Peer* p) -> std::vector<uint8_t>& {
    State::Batch& b = s.batch;
    if (b.bytes.size() <= b.size) {
      b.bytes.resize(b.size + 1);
      b.to.resize(b.size + 1);
      b.peer.resize(b.size + 1);
    }
    b.to[b.size] = to;
    b.peer[b.size] = p;
    return b.bytes[b.size];
  };
  auto commit = [&s] {
    if (++s.batch.size == kBatch) s.flush();
  };
  auto emit = [&](const std::vector<uint8_t>& bytes, const udp::endpoint& to, Peer* p) {
    slot(to, p).assign(bytes.begin(), bytes.end());
    commit();
  };
  auto send_datagram = [&](Peer& peer, const uint8_t* body, size_t body_len) {
    DatagramHeader h;
    h.sender = config_.node_id;
    h.boot_id = s.boot_id;
    h.counter = ++s.counter;  // never reused within a boot: the tag's nonce
    if (!s.faults.active()) {
      // Seal straight into the next batch slot: no copy on the common path.
      seal_datagram(h, body, body_len, s.auth, slot(peer.address, &peer));
      commit();
      return;
    }
    seal_datagram(h, body, body_len, s.auth, s.tx);
    std::vector<FaultInjector::Datagram> out;
    if (!s.faults.process({s.tx, peer.id}, Clock::now(), out))
      ++peer.counters.drops[static_cast<size_t>(DropReason::kInjected)];
    for (auto& d : out) {
      auto it = s.peers.find(d.peer);
      if (it != s.peers.end()) emit(d.bytes, it->second->address, it->second.get());
    }
  };
  auto send_control = [&](Peer& peer, uint64_t job, wire::Frame type,
                          flatbuffers::Offset<void> frame) {
    s.fbb.Finish(wire::CreateEnvelope(s.fbb, job, 0, type, frame, peer.send_epoch));
    send_datagram(peer, s.fbb.GetBufferPointer(), s.fbb.GetSize());
  };
  // A chunk's datagram is built as it goes out (first time or again): nothing is copied while
  // it waits in the link's queue.
  auto send_chunk = [&](Peer& peer, uint64_t seq, const OutgoingChunk& c) {
    const OutgoingMessage& m = *c.message;
    s.fbb.Clear();
    const auto data = s.fbb.CreateVector(c.data(), c.payload);
    const auto chunk =
        wire::CreateChunk(s.fbb, m.origin, m.message_id, c.index, m.chunk_count,
                          static_cast<uint32_t>(m.bytes->size()), m.chunk_payload, data);
    s.fbb.Finish(wire::CreateEnvelope(s.fbb, m.job_id, seq, wire::Frame::Chunk, chunk.Union(),
                                      peer.send_epoch));
    send_datagram(peer, s.fbb.GetBufferPointer(), s.fbb.GetSize());
  };
  s.transmit = [&](Peer& p) {
    p.sender.transmit(Clock::now(), [&](uint64_t seq, const OutgoingChunk& c) {
      send_chunk(p, seq, c);
    });
  };
  auto send_ack = [&](Peer& p, Clock::time_point now) {
    s.fbb.Clear();
    const auto ranges = s.fbb.CreateVector(p.receiver.received_ranges(kMaxAckRanges));
    const auto ack = wire::CreateAck(s.fbb, p.receiver.cumulative(),
                                     static_cast<uint32_t>(config_.credit_window), p.recv_epoch,
                                     ranges);
    send_control(p, 0, wire::Frame::Ack, ack.Union());
    p.receiver.acked(now);
  };
  auto send_naks = [&](Peer& p, Clock::time_point now) {
    const std::vector<uint64_t> naks = p.receiver.naks_due(now, kNakInterval);
    if (naks.empty()) return;
    s.fbb.Clear();
    const auto nak = wire::CreateNak(s.fbb, s.fbb.CreateVector(naks), p.recv_epoch);
    send_control(p, 0, wire::Frame::Nak, nak.Union());
    ++p.counters.naks_sent;
  };
  auto release_pending = [&](size_t bytes) { s.budget.release(bytes); };
  // Our half towards a peer starts over (the peer was declared lost, or restarted): what was
  // queued or in flight is dropped (the layer above hears of the loss), and the new epoch tells
  // the peer's receiver to start over too.
  auto reset_sender = [&](Peer& p) {
    release_pending(p.sender.pending_own_payload());
    p.sender = LinkSender(config_.credit_window);
    ++p.send_epoch;
  };

  auto handle = [&](const uint8_t* data, size_t len) {
    ParsedDatagram d;
    DropReason reason;
    if (!parse_datagram(data, len, config_.max_datagram, s.auth, d, reason)) {
      // Before the tag is checked the sender field is not trustworthy: count it as unknown.
      ++s.unknown.drops[static_cast<size_t>(reason)];
      return;
    }
    auto it = s.peers.find(d.header.sender);
    if (it == s.peers.end()) {
      ++s.unknown.drops[static_cast<size_t>(DropReason::kUnknownPeer)];
      return;
    }
    Peer& p = *it->second;
    if (!p.replay.accept(d.header.boot_id, d.header.counter)) {
      ++p.counters.drops[static_cast<size_t>(DropReason::kReplayed)];
      return;
    }
    const wire::Envelope& e = *d.envelope;
    if (p.boot_seen != d.header.boot_id) {
      // A restarted peer numbers everything from the start again.
      if (p.boot_seen != 0) reset_sender(p);
      p.boot_seen = d.header.boot_id;
      p.receiver = LinkReceiver();
      p.recv_epoch = e.link_epoch();
    } else if (e.link_epoch() != p.recv_epoch) {
      if (e.link_epoch() < p.recv_epoch) {  // from before the peer's reset: stale
        ++p.counters.drops[static_cast<size_t>(DropReason::kReplayed)];
        return;
      }
      p.receiver = LinkReceiver();
      p.recv_epoch = e.link_epoch();
    }
    const auto now = Clock::now();
    p.last_heard = now;
    p.counters.lost = false;
    ++p.counters.datagrams_in;
    p.counters.bytes_in += len;
    switch (e.frame_type()) {
      case wire::Frame::Chunk: {
        const auto accepted = p.receiver.accept(e.link_seq());
        if (accepted == LinkReceiver::Accept::kTooFarAhead) {
          ++p.counters.drops[static_cast<size_t>(DropReason::kMalformed)];
          return;
        }
        if (accepted == LinkReceiver::Accept::kDuplicate) {
          ++p.counters.duplicates;
          return;
        }
        // Ack every kAckEvery datagrams as they arrive: the sender's credit comes back
        // without waiting for the next tick.
        if (p.receiver.ack_due(now, kAckEvery, std::chrono::hours(1))) send_ack(p, now);
        if (!s.jobs.count(e.job_id())) {
          ++p.counters.drops[static_cast<size_t>(DropReason::kUnknownJob)];
          return;
        }
        const ChunkView v = chunk_view(e);
        std::vector<uint8_t> message;
        switch (s.reassembler.add(v, message, now)) {
          case Reassembler::Result::kComplete: {
            ++p.counters.messages_in;
            Delivery delivery{v.key.job_id, v.key.origin, v.key.message_id, p.id,
                              std::move(message)};
            if (s.on_message) s.on_message(std::move(delivery));
            break;
          }
          case Reassembler::Result::kDuplicate: ++p.counters.duplicates; break;
          case Reassembler::Result::kRejected:
            ++p.counters.drops[static_cast<size_t>(DropReason::kMalformed)];
            break;
          case Reassembler::Result::kIncomplete: break;
        }
        return;
      }
      case wire::Frame::Ack: {
        const wire::Ack* a = e.frame_as_Ack();
        if (a->epoch() != p.send_epoch) return;  // about our link before its reset
        const auto* received = a->received();
        release_pending(p.sender.on_ack(a->cumulative(), a->credit_bytes(),
                                        received ? received->data() : nullptr,
                                        received ? received->size() : 0, now));
        // Credit came back: use it now rather than at the next tick.
        p.sender.transmit(now, [&](uint64_t seq, const OutgoingChunk& c) {
          send_chunk(p, seq, c);
        });
        return;
      }
      case wire::Frame::Nak: {
        if (e.frame_as_Nak()->epoch() != p.send_epoch) return;
        ++p.counters.naks_received;
        const auto* m = e.frame_as_Nak()->missing();
        std::vector<uint64_t> missing(m->begin(), m->end());
        // One round trip between repeats (at least the NAK interval, at most the longest RTO).
        const auto min_gap = std::clamp<std::chrono::microseconds>(
            std::chrono::microseconds(static_cast<int64_t>(p.counters.rtt_us)), kNakInterval,
            kMaxRto);
        p.sender.on_nak(missing, now, min_gap, [&](uint64_t seq, const OutgoingChunk& c) {
          send_chunk(p, seq, c);
        });
        return;
      }
      case wire::Frame::Heartbeat: {
        const wire::Heartbeat* h = e.frame_as_Heartbeat();
        p.last_peer_sent_ns = h->sent_ns();
        p.last_peer_heard_ns = now_ns();
        if (h->echo_ns() != 0) {
          const double rtt =
              (double(now_ns()) - double(h->echo_ns()) - double(h->echo_delay_ns())) / 1e3;
          p.counters.rtt_us = p.counters.rtt_us == 0 ? rtt : 0.875 * p.counters.rtt_us + 0.125 * rtt;
        }
        return;
      }
      default:
        ++p.counters.drops[static_cast<size_t>(DropReason::kMalformed)];
        return;
    }
  };

  std::function<void()> receive;
  receive = [&] {
    s.socket.async_receive_from(
        asio::buffer(s.rx.data(), kReceiveBuffer), s.rx_from,
        [&](const asio::error_code& ec, size_t len) {
          if (ec == asio::error::operation_aborted || !s.socket.is_open()) return;
          if (!ec) handle(reinterpret_cast<const uint8_t*>(s.rx.data()), len);
          // Drain what else is waiting, many datagrams per system call, without going back
          // through the reactor.
          for (int round = 0; round < 8 && s.socket.is_open(); ++round) {
            mmsghdr msgs[kReceiveBatch];
            iovec iov[kReceiveBatch];
            for (size_t i = 0; i < kReceiveBatch; ++i) {
              iov[i] = {s.rx_batch.data() + i * (s.slot / 8), s.slot};
              msgs[i] = {};
              msgs[i].msg_hdr.msg_iov = &iov[i];
              msgs[i].msg_hdr.msg_iovlen = 1;
            }
            const int n = ::recvmmsg(s.socket.native_handle(), msgs, kReceiveBatch, MSG_DONTWAIT,
                                     nullptr);
            if (n <= 0) break;
            for (int i = 0; i < n; ++i)
              handle(reinterpret_cast<const uint8_t*>(s.rx_batch.data() + i * (s.slot / 8)),
                     msgs[i].msg_len);
            if (n < static_cast<int>(kReceiveBatch)) break;
          }
          s.flush();
          receive();
        });
  };

  std::function<void()> tick;
  tick = [&] {
    const auto now = Clock::now();
    for (auto& [id, pp] : s.peers) {
      Peer& p = *pp;
      if (p.counters.lost) continue;
      if (now - p.last_heard > config_.peer_timeout) {
        p.counters.lost = true;
        spdlog::warn("node {}: peer {} silent for {} ms: declared lost", config_.node_id, id,
                     config_.peer_timeout.count());
        reset_sender(p);
        if (s.on_lost) s.on_lost(id);
        continue;
      }
      auto send = [&](uint64_t seq, const OutgoingChunk& c) { send_chunk(p, seq, c); };
      p.sender.transmit(now, send);
      // Retransmit on silence only well past the round trip: on a loaded machine a fixed short
      // timeout resends what is merely waiting for CPU, doubling the traffic.
      const auto rto = std::clamp<std::chrono::microseconds>(
          std::chrono::microseconds(static_cast<int64_t>(4 * p.counters.rtt_us)), kRto, kMaxRto);
      p.sender.on_tick(now, rto, send);
      if (p.receiver.ack_due(now, kAckEvery, kAckInterval)) send_ack(p, now);
      send_naks(p, now);
      if (now - p.last_heartbeat >= config_.heartbeat_interval) {
        s.fbb.Clear();
        const uint64_t t = now_ns();
        const auto hb = wire::CreateHeartbeat(
            s.fbb, 0, t, p.last_peer_sent_ns,
            p.last_peer_sent_ns ? t - std::min(t, p.last_peer_heard_ns) : 0);
        send_control(p, 0, wire::Frame::Heartbeat, hb.Union());
        p.last_heartbeat = now;
      }
    }
    if (s.faults.active()) {
      std::vector<FaultInjector::Datagram> due;
      s.faults.release_due(now, due);
      for (auto& d : due) {
        auto it = s.peers.find(d.peer);
        if (it != s.peers.end()) emit(d.bytes, it->second->address, it->second.get());
      }
    }
    if (now - s.last_expire > std::chrono::milliseconds(100)) {
      s.reassembler.expire(now);
      s.last_expire = now;
    }
    s.flush();
    s.timer.expires_after(kTick);
    s.timer.async_wait([&](const asio::error_code& ec) {
      if (!ec) tick();
    });
  };

  receive();
  tick();
  s.io.run();
}

}  // namespace dtrain::transport
