#include "transport/endpoint/endpoint.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <pthread.h>
#include <sys/socket.h>

#include <cstring>

#include <asio.hpp>
#include <future>

#include "transport/endpoint/datagram_batch.h"
#include "transport/endpoint/link.h"
#include "transport/endpoint/send_budget.h"
#include "transport/reliability/reassembler.h"
#include "transport/transport_error.h"
#include "transport/wire/chunk_view.h"

namespace dtrain::transport {
namespace {

using Clock = std::chrono::steady_clock;
using asio::ip::udp;

constexpr auto kTick = std::chrono::microseconds(1000);
constexpr size_t kReceiveBuffer = 65536;
// recvmmsg slots hold max_datagram + 8 bytes, 8-aligned: a longer datagram is cut to the slot
// and then fails its size check, as it should. With receive coalescing (GRO) a slot holds up to
// 64 KB of equal-sized datagrams from one sender, which the kernel says the size of.
constexpr size_t kReceiveBatch = 32;
constexpr size_t kCoalescedSlot = 65536;
// A segment is copied into the kReceiveBuffer-byte `rx` when it lies unaligned in its slot.
static_assert(kCoalescedSlot <= kReceiveBuffer, "a coalesced slot must fit the aligned buffer");
constexpr auto kRetryGap = std::chrono::milliseconds(5);
constexpr uint32_t kNoLink = 0xFFFFFFFF;  // relay_backlogged(kNoLink): any link over its bound

// What one peer may have in flight towards us must fit the socket's receive buffer with room to
// spare (a kernel drop is a loss that costs a NAK round), and net.core.rmem_max may have given
// it less than it asked for.
void cap_credit(LinkTiming& timing, udp::socket& socket, const EndpointConfig& config) {
  asio::socket_base::receive_buffer_size granted;
  asio::error_code ec;
  socket.get_option(granted, ec);
  if (ec || granted.value() <= 0) return;
  // What was granted (Linux doubles it internally to pay for its per-datagram overhead, and
  // asio's option reports it halved again).
  const size_t room = size_t(granted.value());
  if (timing.credit_window <= room) return;
  timing.credit_window = std::max(room, 4 * config.max_datagram);
  spdlog::warn("node {}: the data socket's receive buffer is {} KB (net.core.rmem_max), so each "
               "peer's credit is {} KB instead of {} KB and throughput suffers (fix: sysctl -w "
               "net.core.rmem_max={} on every node, or lower credit_window)",
               config.node_id, granted.value() / 1024, timing.credit_window / 1024,
               config.credit_window / 1024, std::max(config.credit_window, config.receive_buffer_bytes));
}

}  // namespace

// Everything the I/O thread owns. It dispatches each received datagram to its peer's Link (one
// handler per datagram kind) and is the links' host: it seals what they send into the batch.
struct Endpoint::State final : LinkHost {
  explicit State(const EndpointConfig& c)
      : config(c),
        socket(io),
        timer(io),
        auth(c.key, c.insecure, c.allow_aes256gcm, c.node_id),
        reassembler(c.reassembly_bytes, c.reassembly_timeout),
        faults(c.faults),
        budget(c.send_queue_bytes),
        timing{c.credit_window, c.heartbeat_interval, c.peer_timeout},
        tag_workers(c.insecure ? 0 : c.tag_threads, "dtrain-tag-" + std::to_string(c.node_id)),
        batch(c.segmentation) {
    batch.set_tagging(&auth, &tag_workers);
  }

  // LinkHost
  flatbuffers::FlatBufferBuilder& builder() override {
    fbb.Clear();
    return fbb;
  }
  void emit(Link& link, const BodySplice& splice) override;
  void release_budget(size_t bytes) override { budget.release(bytes); }
  void receiving_restarted(Link& link) override { reassembler.link_restarted(link.id()); }
  bool holds_back(const Link& link) const override { return relay_backlogged(link.id()); }
  bool accepts_aes256gcm() const override { return auth.aes_gcm(); }

  Link* link(uint32_t id) {
    auto it = links.find(id);
    return it == links.end() ? nullptr : it->second.get();
  }
  // One received datagram; `tag`: what check_tags found of its tag.
  // `now`: when its recvmmsg returned (one clock read per batch, not per datagram).
  void handle(const uint8_t* data, size_t len, TagVerdict tag, Clock::time_point now);
  // The datagrams of a received slot: one, or (coalesced) several of `segment` bytes but the
  // last.
  void split_slot(const uint8_t* data, size_t len, size_t segment);
  // Checks, on the tag workers, the tags of the received datagrams whose key is cached.
  void check_tags();
  void on_chunk(Link& link, const wire::Envelope& e, Clock::time_point now);
  bool relay_backlogged(uint32_t except) const;
  void receive();
  void drain_socket();
  void tick();
  // Links whose refused chunks would be taken now ask for them again (see the definition).
  void retry_refused(Clock::time_point now);
  void flush() { batch.flush(socket.native_handle()); }

  const EndpointConfig config;
  asio::io_context io;
  udp::socket socket;
  asio::steady_timer timer;
  Authenticator auth;
  Reassembler reassembler;
  FaultInjector faults;
  SendBudget budget;  // backpressure: own bytes queued or unacknowledged, over all peers
  LinkTiming timing;
  TagWorkers tag_workers;
  uint64_t boot_id = 0;
  uint64_t counter = 0;
  std::map<uint32_t, std::unique_ptr<Link>> links;
  std::map<uint32_t, BootRecord> boots;  // outlive their links (remove_peer, add_peer)
  PeerCounters unknown;
  std::set<uint64_t> jobs;
  MessageHandler on_message;
  PeerHandler on_lost;
  DatagramBatch batch;
  std::vector<uint64_t> rx;  // 8-byte aligned, so the FlatBuffers body (offset 32) is too
  bool coalescing = false;         // the socket takes GRO'd datagrams (UDP_GRO)
  size_t slot = 0;                 // bytes per recvmmsg slot
  std::vector<uint64_t> rx_batch;  // kReceiveBatch slots
  // One recvmmsg's datagrams (pointing into rx_batch) and what check_tags found of each tag.
  struct Received {
    const uint8_t* data;
    size_t len;
  };
  std::vector<Received> received;
  std::vector<TagVerdict> verdicts;
  struct TagCheck {
    size_t index;  // into received
    const Authenticator::Keys* keys;
    TagContext context;
  };
  std::vector<TagCheck> tag_checks;
  std::vector<uint8_t> tx;
  flatbuffers::FlatBufferBuilder fbb{2048};
  Clock::time_point last_expire = Clock::now();
  Clock::time_point last_retry{};
  bool room_freed = false;        // since last_retry: a message completed or a backlog drained
  bool was_backlogged = false;    // some link's relay backlog was over its bound at the last tick
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
  s.socket.set_option(asio::socket_base::receive_buffer_size(int(config.receive_buffer_bytes)), ec);
  s.socket.set_option(asio::socket_base::send_buffer_size(8 << 20), ec);
  cap_credit(s.timing, s.socket, config);
  s.socket.bind(udp::endpoint(address, config.port), ec);
  if (ec)
    throw TransportError("cannot bind UDP " + config.bind_address + ":" +
                             std::to_string(config.port) + ": " + ec.message(),
                         "another dtraind may be running, or pick a free port (data_port)");
  s.socket.non_blocking(true);
  port_ = s.socket.local_endpoint().port();
  s.boot_id = config.boot_id;
  while (s.boot_id == 0) randombytes_buf(&s.boot_id, sizeof s.boot_id);
  s.rx.resize(kReceiveBuffer / 8);
  if (config.segmentation) {
    const int fd = s.socket.native_handle(), on = 1;
    s.coalescing = ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
    // A kernel before 4.18 ignores the UDP_SEGMENT cmsg instead of refusing it (each run would
    // leave as one oversized datagram): ask whether it knows the option first.
    int segment = 0;
    socklen_t size = sizeof segment;
    if (::getsockopt(fd, SOL_UDP, UDP_SEGMENT, &segment, &size) != 0) {
      s.batch.set_segmentation(false);
      spdlog::info("node {}: this kernel has no UDP segmentation offload: sending datagram by "
                   "datagram", config.node_id);
    }
  }
  s.slot = s.coalescing ? kCoalescedSlot : (config.max_datagram + 8 + 7) / 8 * 8;
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
  if (s.tag_workers.threads() > 0)
    spdlog::info("node {}: {} tag worker thread(s) seal and check tags beside the I/O thread",
                 config.node_id, s.tag_workers.threads());
  const unsigned cores = std::thread::hardware_concurrency();
  if (s.tag_workers.threads() > 0 && cores > 0 && s.tag_workers.threads() + 1 > cores)
    spdlog::warn("node {}: {} tag worker thread(s) and the I/O thread are more busy threads than "
                 "this machine's {} cores: they take turns and goodput falls (fix: tag_threads "
                 "at most {}, or 0)", config.node_id, s.tag_workers.threads(), cores, cores - 1);
}

Endpoint::~Endpoint() { stop(); }

void Endpoint::start(MessageHandler on_message, PeerHandler on_lost) {
  state_->on_message = std::move(on_message);
  state_->on_lost = std::move(on_lost);
  io_thread_ = std::thread([this] {
    // Named so that top -H and perf show which node's I/O thread is busy.
    const std::string name = "dtrain-io-" + std::to_string(config_.node_id);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    state_->receive();
    state_->tick();
    state_->io.run();
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

uint64_t Endpoint::boot_id() const { return state_->boot_id; }

size_t Endpoint::credit_window() const { return state_->timing.credit_window; }

void Endpoint::add_peer(uint32_t id, const std::string& address, uint16_t port) {
  asio::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) throw TransportError("peer address '" + address + "' is not an IP address", "fix the mesh map");
  // Dispatched, like send(): a handler on the I/O thread that adds a peer back (a quick
  // restart, from on_lost) and then relays to it must find it alive, not lost until later.
  asio::dispatch(state_->io, [this, id, ep = udp::endpoint(ip, port)] {
    State& s = *state_;
    auto& link = s.links[id];
    if (!link) link = std::make_unique<Link>(id, ep, s.timing, s);
    link->set_address(ep);
    link->revive(Clock::now());
  });
}

void Endpoint::announce_boot(uint32_t peer, uint64_t boot_id) {
  asio::dispatch(state_->io, [this, peer, boot_id] {
    BootRecord& boots = state_->boots[peer];
    if (boots.announced == boot_id) return;
    boots.retire(boots.announced);
    boots.announced = boot_id;
  });
}

void Endpoint::remove_peer(uint32_t id) {
  asio::post(state_->io, [this, id] {
    auto it = state_->links.find(id);
    if (it == state_->links.end()) return;
    const size_t freed = it->second->sender().pending_own_payload();
    state_->links.erase(it);
    state_->reassembler.link_restarted(id);
    state_->budget.release(freed);
  });
}

void Endpoint::add_job(uint64_t job_id) {
  // Waits for the I/O thread: a caller that tells peers it takes the job's datagrams now (a
  // rejoining node's Attached) must not race the insertion.
  auto done = std::make_shared<std::promise<void>>();
  auto future = done->get_future();
  asio::post(state_->io, [this, job_id, done] {
    state_->jobs.insert(job_id);
    done->set_value();
  });
  // Before start() the post runs ahead of the first datagram: nothing to wait for.
  if (io_thread_.joinable()) future.wait_for(std::chrono::seconds(5));
}

void Endpoint::remove_job(uint64_t job_id) {
  asio::post(state_->io, [this, job_id] { state_->jobs.erase(job_id); });
}

bool Endpoint::send(uint32_t peer, uint64_t job_id, uint32_t origin, uint64_t message_id,
                    Bytes bytes, std::chrono::milliseconds deadline, SendKind kind) {
  // Relays are not counted: they cannot wait, and letting them fill the budget starved this
  // node's own messages (a plain-mesh root forwards eight times what it publishes). They are
  // bounded per link instead (relay_queue_bytes, see State::relay_backlogged).
  const bool relayed = kind == SendKind::kRelay;
  if (!relayed && !state_->budget.acquire(bytes->size(), deadline)) return false;
  // From a handler on the I/O thread (a relay) it is queued at once, not after the receive batch
  // in progress: its bytes count against the relay bound before the next chunk is taken (a
  // coalesced batch can complete several messages).
  asio::dispatch(state_->io, [this, peer, job_id, origin, message_id, bytes, relayed] {
    State& s = *state_;
    Link* link = s.link(peer);
    if (!link || link->lost()) {
      if (!relayed) s.budget.release(bytes->size());
      return;
    }
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
      link->enqueue(OutgoingChunk{message, index, static_cast<uint32_t>(len)});
    }
    ++link->counters().messages_out;
    link->transmit(Clock::now());
    s.flush();
  });
  return true;
}

size_t Endpoint::tag_threads() const { return state_->tag_workers.threads(); }

uint64_t Endpoint::tags_on_workers() const { return state_->tag_workers.items_by_workers(); }
Endpoint::TagBatches Endpoint::tag_batches_shared() const {
  return {state_->tag_workers.batches_shared(), state_->tag_workers.items_shared()};
}

bool Endpoint::idle() {
  // Shared: if the wait below gives up, the I/O thread still has a promise to fulfil.
  auto result = std::make_shared<std::promise<bool>>();
  auto future = result->get_future();
  asio::post(state_->io, [this, result] {
    bool idle = true;
    for (auto& [id, link] : state_->links)
      if (!link->lost() && !link->sender().idle()) idle = false;
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
    for (auto& [id, link] : state_->links) {
      PeerCounters c = link->counters();
      c.retransmits = link->sender().retransmits();
      c.credit_stalls = link->sender().credit_stalls();
      c.queued_bytes = link->sender().queued_bytes();
      c.in_flight_bytes = link->sender().in_flight_bytes();
      out[id] = c;
    }
    out[kUnknownSender] = state_->unknown;
    result->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return {};
  return future.get();
}

// ---- the I/O thread ----

void Endpoint::State::emit(Link& link, const BodySplice& splice) {
  DatagramHeader h;
  h.sender = config.node_id;
  h.receiver = link.id();
  h.boot_id = boot_id;
  h.counter = ++counter;  // never reused within a boot: the tag's nonce
  h.aead = link.aead();
  const int fd = socket.native_handle();
  if (!faults.active()) {
    // Framed straight into the next batch slot: no copy on the common path. With tag workers
    // the batch seals its slots together when it is flushed.
    std::vector<uint8_t>& slot = batch.next(link.address(), &link.counters());
    if (tag_workers.threads() > 0) {
      batch.commit_untagged(fd, frame_datagram(h, fbb.GetBufferPointer(), fbb.GetSize(), auth,
                                               slot, splice));
      return;
    }
    seal_datagram(h, fbb.GetBufferPointer(), fbb.GetSize(), auth, slot, splice);
    batch.commit(fd);
    return;
  }
  seal_datagram(h, fbb.GetBufferPointer(), fbb.GetSize(), auth, tx, splice);
  std::vector<FaultInjector::Datagram> out;
  if (!faults.process({tx, link.id()}, Clock::now(), out))
    link.counters().drop(DropReason::kInjected);
  for (auto& d : out) {
    if (Link* to = this->link(d.peer)) {
      batch.next(to->address(), &to->counters()) = std::move(d.bytes);
      batch.commit(fd);
    }
  }
}

void Endpoint::State::handle(const uint8_t* data, size_t len, TagVerdict tag,
                             Clock::time_point now) {
  ParsedDatagram d;
  DropReason reason;
  if (!parse_datagram(data, len, config.max_datagram, auth, d, reason, tag)) {
    // Before the tag is checked the sender field is not trustworthy: count it as unknown.
    unknown.drop(reason);
    return;
  }
  Link* from = link(d.header.sender);
  if (!from) {
    unknown.drop(DropReason::kUnknownPeer);
    return;
  }
  // Authenticated from a peer, but sealed for another node: replayed here from elsewhere.
  if (d.header.receiver != config.node_id) {
    from->counters().drop(DropReason::kWrongReceiver);
    return;
  }
  const wire::Envelope& e = *d.envelope;
  if (auto refused = from->admit(d.header, e, boots[d.header.sender], now, len)) {
    from->counters().drop(*refused);
    return;
  }
  switch (e.frame_type()) {
    case wire::Frame::Chunk: on_chunk(*from, e, now); return;
    case wire::Frame::Ack: from->on_ack(*e.frame_as_Ack(), now); return;
    case wire::Frame::Nak: from->on_nak(*e.frame_as_Nak(), now); return;
    case wire::Frame::Heartbeat: from->on_heartbeat(*e.frame_as_Heartbeat()); return;
    default: from->counters().drop(DropReason::kMalformed); return;
  }
}

// A chunk is acknowledged only once it is taken: by reassembly, or as a chunk of a job this
// node does not run (dropped for good). One refused for want of room (reassembly budget, or a
// relay backlog) is left unacknowledged, so its sender sends it again later: nothing is lost.
void Endpoint::State::on_chunk(Link& from, const wire::Envelope& e, Clock::time_point now) {
  const uint64_t seq = e.link_seq();
  switch (from.receiver().peek(seq)) {
    case LinkReceiver::Accept::kTooFarAhead: from.counters().drop(DropReason::kMalformed); return;
    case LinkReceiver::Accept::kDuplicate:
      ++from.counters().duplicates;
      from.receiver().accept(seq, 0);  // acknowledged again: our ack was probably lost
      return;
    case LinkReceiver::Accept::kNew: break;
  }
  const ChunkView v = chunk_view(e);
  if (!jobs.count(e.job_id())) {
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
  const Reassembler::Result result = reassembler.add(v, message, from.id(), now);
  if (result == Reassembler::Result::kNoRoom) {
    from.counters().drop(DropReason::kNoRoom);
    from.refused_chunk(seq, uint32_t(v.size), now);
    return;
  }
  from.took_chunk(seq, uint32_t(v.size), now);
  switch (result) {
    case Reassembler::Result::kComplete: {
      ++from.counters().messages_in;
      room_freed = true;  // the chunks refused for room are wanted now (at the next tick)
      if (on_message)
        on_message(Delivery{v.key.job_id, v.key.origin, v.key.message_id, from.id(),
                            std::move(message)});
      return;
    }
    case Reassembler::Result::kDuplicate: ++from.counters().duplicates; return;
    case Reassembler::Result::kRejected:
      from.counters().drop(DropReason::kMalformed);
      if (v.total_bytes > config.reassembly_bytes)
        spdlog::error("node {}: a message of {} bytes from node {} exceeds the reassembly budget "
                      "of {} bytes and is dropped (fix: a smaller model; a parameter snapshot "
                      "must fit the budget)",
                      config.node_id, v.total_bytes, v.key.origin, config.reassembly_bytes);
      return;
    default: return;
  }
}

// A message from `from` is relayed to every other neighbour, never back to `from`: only their
// backlogs hold its chunks back (so two relays cannot block each other, each waiting for the
// other's queue to drain).
bool Endpoint::State::relay_backlogged(uint32_t from) const {
  for (const auto& [id, link] : links)
    if (id != from && !link->lost() && link->sender().relayed_bytes() > config.relay_queue_bytes)
      return true;
  return false;
}

void Endpoint::State::receive() {
  socket.async_wait(udp::socket::wait_read, [this](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted || !socket.is_open()) return;
    drain_socket();
    flush();
    receive();
  });
}

// What is waiting, many datagrams per system call (and, coalesced, many per slot).
void Endpoint::State::drain_socket() {
  for (int round = 0; round < 8 && socket.is_open(); ++round) {
    mmsghdr msgs[kReceiveBatch];
    iovec iov[kReceiveBatch];
    alignas(cmsghdr) char control[kReceiveBatch][kCoalescedControlBytes];
    for (size_t i = 0; i < kReceiveBatch; ++i) {
      iov[i] = {rx_batch.data() + i * (slot / 8), slot};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      if (coalescing) {
        msgs[i].msg_hdr.msg_control = control[i];
        msgs[i].msg_hdr.msg_controllen = kCoalescedControlBytes;
      }
    }
    const int n = ::recvmmsg(socket.native_handle(), msgs, kReceiveBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return;
    const auto now = Clock::now();
    received.clear();
    for (int i = 0; i < n; ++i) {
      const msghdr& h = msgs[i].msg_hdr;
      const size_t segment = coalescing ? coalesced_segment_size(h) : 0;
      const auto* data = reinterpret_cast<const uint8_t*>(rx_batch.data() + i * (slot / 8));
      size_t len = msgs[i].msg_len;
      if (h.msg_flags & MSG_TRUNC) {
        // Longer than the slot: a datagram longer than any of ours, or a coalesced run longer
        // than 64 KB, whose whole segments are still judged one by one.
        unknown.drop(DropReason::kOversized);
        len = segment > 0 ? len / segment * segment : 0;
      }
      if (len > 0) split_slot(data, len, segment);
    }
    check_tags();
    for (size_t k = 0; k < received.size(); ++k) {
      const Received& r = received[k];
      if (reinterpret_cast<uintptr_t>(r.data) % 8 == 0) {
        handle(r.data, r.len, verdicts[k], now);
      } else {  // the FlatBuffers body must stay 8-byte aligned: a segment size of another's
        std::memcpy(rx.data(), r.data, r.len);
        handle(reinterpret_cast<const uint8_t*>(rx.data()), r.len, verdicts[k], now);
      }
    }
    if (n < static_cast<int>(kReceiveBatch)) return;
  }
}

void Endpoint::State::split_slot(const uint8_t* data, size_t len, size_t segment) {
  if (segment == 0 || segment >= len) {
    received.push_back({data, len});
    return;
  }
  for (size_t offset = 0; offset < len; offset += segment)
    received.push_back({data + offset, std::min(segment, len - offset)});
}

// Only tags under keys already cached are checked here (the workers may not touch the cache);
// the rest, and every datagram without workers, are checked by handle() as they come.
void Endpoint::State::check_tags() {
  verdicts.assign(received.size(), TagVerdict::kUnchecked);
  if (tag_workers.threads() == 0) return;
  tag_checks.clear();
  for (size_t k = 0; k < received.size(); ++k) {
    DatagramHeader h;
    DropReason reason;
    if (!read_header(received[k].data, received[k].len, config.max_datagram, h, reason)) continue;
    if (const Authenticator::Keys* keys = auth.cached_key(h.tag_context()))
      tag_checks.push_back({k, keys, h.tag_context()});
  }
  tag_workers.run(tag_checks.size(), [this](size_t j) {
    const TagCheck& c = tag_checks[j];
    const Received& r = received[c.index];
    verdicts[c.index] = Authenticator::check_with(*c.keys, r.data, r.len - kTagBytes, c.context)
                            ? TagVerdict::kHeld
                            : TagVerdict::kFailed;
  });
}

// NAKs the chunks refused for room, on every link whose chunks are not held back by a relay
// backlog: a backlogged relay would refuse them all again, and asking for everything on every
// completed message made children of a busy root send nine datagrams for every one taken.
void Endpoint::State::retry_refused(Clock::time_point now) {
  for (auto& [id, link] : links)
    if (link->receiver().refused_count() > 0 && !relay_backlogged(id)) link->retry_refused();
  room_freed = false;
  last_retry = now;
}

void Endpoint::State::tick() {
  const auto now = Clock::now();
  for (auto& [id, link] : links) {
    if (link->lost()) continue;
    const Link::Health health = link->tick(now);
    if (health == Link::Health::kAlive) continue;
    if (health == Link::Health::kSilent)
      spdlog::warn("node {}: peer {} silent for {} ms: declared lost", config.node_id, id,
                   config.peer_timeout.count());
    else
      spdlog::warn("node {}: peer {} acknowledged nothing for {} ms ({} bytes in flight): "
                   "declared lost", config.node_id, id, config.peer_timeout.count(),
                   link->sender().in_flight_bytes());
    link->declare_lost();
    if (on_lost) on_lost(id);
  }
  if (faults.active()) {
    std::vector<FaultInjector::Datagram> due;
    faults.release_due(now, due);
    for (auto& d : due) {
      if (Link* to = link(d.peer)) {
        batch.next(to->address(), &to->counters()) = std::move(d.bytes);
        batch.commit(socket.native_handle());
      }
    }
  }
  if (now - last_expire > std::chrono::milliseconds(100)) {
    reassembler.expire(now, [this](uint32_t id) {
      const Link* l = link(id);
      return l && !l->lost();
    });
    last_expire = now;
  }
  // Ask again soon after room frees (a message completed, a relay backlog drained), at most
  // every kRetryGap so a burst of completions makes one round of NAKs; and every 500 ms anyway
  // (room freed by expiry or a link that started over).
  const bool backlogged = relay_backlogged(kNoLink);
  if (was_backlogged && !backlogged) room_freed = true;
  was_backlogged = backlogged;
  if ((room_freed && now - last_retry >= kRetryGap) ||
      now - last_retry > std::chrono::milliseconds(500))
    retry_refused(now);
  flush();
  timer.expires_after(kTick);
  timer.async_wait([this](const asio::error_code& ec) {
    if (!ec) tick();
  });
}

}  // namespace dtrain::transport
