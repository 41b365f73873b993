#include "transport/endpoint/lane.h"

#include <linux/filter.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cstring>

#include "transport/transport_error.h"

namespace dtrain::transport {
namespace {

using asio::ip::udp;

constexpr auto kTick = std::chrono::microseconds(1000);
constexpr auto kRetryGap = std::chrono::milliseconds(5);
constexpr uint32_t kNoLink = 0xFFFFFFFF;  // relay_backlogged(kNoLink): any link over its bound

// What one peer may have in flight towards us must fit the socket's receive buffer with room to
// spare (a kernel drop is a loss that costs a NAK round), and net.core.rmem_max may have given
// it less than it asked for. `report`: warn (once per endpoint, not per lane).
void cap_credit(LinkTiming& timing, udp::socket& socket, const EndpointConfig& config,
                bool report) {
  asio::socket_base::receive_buffer_size granted;
  asio::error_code ec;
  socket.get_option(granted, ec);
  if (ec || granted.value() <= 0) return;
  // What was granted (Linux doubles it internally to pay for its per-datagram overhead, and
  // asio's option reports it halved again).
  const size_t room = size_t(granted.value());
  timing.max_credit_window = std::min(config.max_credit_window, room);
  if (timing.credit_window <= room) return;
  timing.credit_window = std::max(room, 4 * config.max_datagram);
  if (!report) return;
  spdlog::warn("node {}: the data socket's receive buffer is {} KB (net.core.rmem_max), so each "
               "peer's credit is {} KB instead of {} KB and throughput suffers (fix: sysctl -w "
               "net.core.rmem_max={} on every node, or lower credit_window)",
               config.node_id, granted.value() / 1024, timing.credit_window / 1024,
               config.credit_window / 1024, std::max(config.credit_window, config.receive_buffer_bytes));
}

TransportError bind_error(const asio::ip::address& address, uint16_t port,
                          const asio::error_code& ec) {
  return TransportError("cannot bind UDP " + address.to_string() + ":" + std::to_string(port) +
                            ": " + ec.message(),
                        "another dtraind may be running, or pick a free port (data_port)");
}

std::string tag_thread_name(const EndpointConfig& c, uint8_t lane) {
  const std::string name = "dtrain-tag-" + std::to_string(c.node_id);
  return c.lanes > 1 ? name + "." + std::to_string(lane) : name;
}

// Each lane draws its own stream of faults from the configured seed (one stream on every lane
// would drop the same positions of each); lane 0's is the seed's.
FaultSpec lane_faults(FaultSpec faults, uint8_t lane) {
  faults.seed += lane;
  return faults;
}

}  // namespace

uint16_t claim_port(const asio::ip::address& address, uint16_t port) {
  asio::io_context io;
  udp::socket probe(io);
  asio::error_code ec;
  probe.open(address.is_v4() ? udp::v4() : udp::v6(), ec);
  if (!ec) probe.bind(udp::endpoint(address, port), ec);
  if (ec) throw bind_error(address, port, ec);
  return probe.local_endpoint().port();
}

Lane::Lane(const EndpointConfig& c, uint8_t index, LaneShared& shared)
    : config_(c),
      index_(index),
      several_(c.lanes > 1),
      shared_(shared),
      socket_(io_),
      send_socket_(io_),
      timer_(io_),
      auth_(c.key, c.insecure, c.allow_aes256gcm, c.node_id),
      reassembler_(c.reassembly_bytes, c.reassembly_timeout),
      faults_(lane_faults(c.faults, index)),
      timing_{c.credit_window, c.credit_window, c.heartbeat_interval, c.peer_timeout},
      tag_workers_(c.insecure ? 0 : c.tag_threads, tag_thread_name(c, index)),
      batch_(c.segmentation) {
  batch_.set_tagging(&auth_, &tag_workers_);
}

void Lane::open(const asio::ip::address& address, uint16_t port) {
  asio::error_code ec;
  socket_.open(address.is_v4() ? udp::v4() : udp::v6());
  if (several_) {
    // Every lane's socket on the one port the controller announces; the kernel refuses a
    // socket of another user joining them.
    const int on = 1;
    if (::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0)
      throw TransportError(std::string("cannot share the data port between lanes: ") +
                               std::strerror(errno),
                           "set data.lanes: 1");
  }
  socket_.set_option(asio::socket_base::receive_buffer_size(int(config_.receive_buffer_bytes)), ec);
  socket_.set_option(asio::socket_base::send_buffer_size(8 << 20), ec);
  cap_credit(timing_, socket_, config_, index_ == 0);
  socket_.bind(udp::endpoint(address, port), ec);
  if (ec) throw bind_error(address, port, ec);
  socket_.non_blocking(true);
  if (several_) {
    // Nothing is sent to this socket: a small receive buffer bounds what a stranger can park.
    send_socket_.open(address.is_v4() ? udp::v4() : udp::v6());
    send_socket_.set_option(asio::socket_base::send_buffer_size(8 << 20), ec);
    send_socket_.set_option(asio::socket_base::receive_buffer_size(4096), ec);
    send_socket_.bind(udp::endpoint(address, 0), ec);
    if (ec)
      throw TransportError("cannot bind a lane's sending socket on " + address.to_string() +
                               ": " + ec.message(),
                           "check the data address, or set data.lanes: 1");
    send_socket_.non_blocking(true);
  }
  rx_.resize(kReceiveBuffer / 8);
  if (config_.segmentation) {
    const int on = 1;
    coalescing_ = ::setsockopt(socket_.native_handle(), SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
    // A kernel before 4.18 ignores the UDP_SEGMENT cmsg instead of refusing it (each run would
    // leave as one oversized datagram): ask whether it knows the option first.
    int segment = 0;
    socklen_t size = sizeof segment;
    if (::getsockopt(send_fd(), SOL_UDP, UDP_SEGMENT, &segment, &size) != 0) {
      batch_.set_segmentation(false);
      if (index_ == 0)
        spdlog::info("node {}: this kernel has no UDP segmentation offload: sending datagram by "
                     "datagram", config_.node_id);
    }
  }
  slot_ = coalescing_ ? kCoalescedSlot : (kLargestDatagram + 8 + 7) / 8 * 8;
  rx_batch_.resize(kReceiveBatch * slot_ / 8);
}

// A classic BPF program over the UDP payload: its lane byte, modulo the lane count, is the index
// of the socket in the port's group (the lanes joined it in order). A datagram too short to
// have the byte goes to lane 0, which drops it as malformed.
void Lane::steer_by_lane_byte() {
  sock_filter code[] = {
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, uint32_t(kLaneOffset)},
      {BPF_ALU | BPF_MOD | BPF_K, 0, 0, uint32_t(config_.lanes)},
      {BPF_RET | BPF_A, 0, 0, 0},
  };
  sock_fprog program{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program,
                   sizeof program) != 0)
    throw TransportError(
        std::string("cannot steer datagrams to lanes (SO_ATTACH_REUSEPORT_CBPF): ") +
            std::strerror(errno),
        "set data.lanes: 1 (lanes need Linux 4.5 or later)");
}

void Lane::run() {
  receive();
  tick();
  io_.run();
}

void Lane::stop() {
  timer_.cancel();
  io_.stop();
}

void Lane::close_sockets() {
  asio::error_code ec;
  socket_.close(ec);
  send_socket_.close(ec);
}

void Lane::add_peer(uint32_t id, const udp::endpoint& address, uint64_t generation) {
  generations_[id] = generation;
  auto& link = links_[id];
  if (!link) link = std::make_unique<Link>(id, address, timing_, *this);
  link->set_address(address);
  link->revive(Clock::now());
}

void Lane::announce_boot(uint32_t peer, uint64_t boot_id) {
  BootRecord& boots = boots_[peer];
  if (boots.announced == boot_id) return;
  boots.retire(boots.announced);
  boots.announced = boot_id;
}

void Lane::remove_peer(uint32_t id) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  const size_t freed = it->second->sender().pending_own_payload();
  links_.erase(it);
  reassembler_.link_restarted(id);
  shared_.budget.release(freed);
}

void Lane::send(uint32_t peer, std::shared_ptr<OutgoingMessage> message) {
  Link* link = this->link(peer);
  if (!link || link->lost()) {
    if (!message->relayed) shared_.budget.release(message->bytes->size());
    return;
  }
  const size_t total = message->bytes->size(), payload = message->chunk_payload;
  for (uint32_t index = 0; index < message->chunk_count; ++index) {
    const size_t offset = size_t(index) * payload;
    const size_t len = std::min(payload, total - std::min(total, offset));
    link->enqueue(OutgoingChunk{message, index, static_cast<uint32_t>(len)});
  }
  ++link->counters().messages_out;
  link->transmit(Clock::now());
  flush();
}

void Lane::peer_lost_elsewhere(uint32_t peer) {
  Link* link = this->link(peer);
  if (link && !link->lost()) link->declare_lost();
}

bool Lane::idle() const {
  for (auto& [id, link] : links_)
    if (!link->lost() && !link->sender().idle()) return false;
  return true;
}

void Lane::counters(std::map<uint32_t, PeerCounters>& out) const {
  for (auto& [id, link] : links_) {
    PeerCounters c = link->counters();
    c.retransmits = link->sender().retransmits();
    c.credit_stalls = link->sender().credit_stalls();
    c.queued_bytes = link->sender().queued_bytes();
    c.in_flight_bytes = link->sender().in_flight_bytes();
    c.credit_offered = link->credit_offered();
    out[id] = c;
  }
  out[Endpoint::kUnknownSender] = unknown_;
}

uint64_t Lane::next_counter() {
  if (counter_ == counter_end_) {
    counter_ = shared_.next_block();
    counter_end_ = counter_ + LaneShared::kCounterBlock;
  }
  return ++counter_;
}

// ---- the I/O thread's datagrams ----

void Lane::emit(Link& link) {
  send_body(link, false, fbb_.GetBufferPointer(), fbb_.GetSize(), BodySplice{});
}

void Lane::emit_chunk(Link& link, const ChunkFields& fields, const uint8_t* data, size_t size) {
  if (chunk_body_.size() < kChunkFieldBytes + size) chunk_body_.resize(kChunkFieldBytes + size);
  put_chunk_fields(fields, chunk_body_.data());
  send_body(link, true, chunk_body_.data(), kChunkFieldBytes + size,
            BodySplice{kChunkFieldBytes, size, data});
}

void Lane::send_body(Link& link, bool chunk, const uint8_t* body, size_t body_len,
                     const BodySplice& splice) {
  DatagramHeader h;
  h.sender = config_.node_id;
  h.receiver = link.id();
  h.boot_id = shared_.boot_id;
  h.counter = next_counter();  // never reused within a boot: the tag's nonce
  h.aead = link.aead();
  h.lane = index_;
  h.lanes = uint8_t(config_.lanes);
  h.chunk = chunk;
  const int fd = send_fd();
  if (!faults_.active()) {
    // Framed straight into the next batch slot: no copy on the common path. With tag workers
    // the batch seals its slots together when it is flushed.
    std::vector<uint8_t>& out = batch_.next(link.address(), &link.counters());
    if (tag_workers_.threads() > 0) {
      batch_.commit_untagged(fd, frame_datagram(h, body, body_len, auth_, out, splice));
      return;
    }
    seal_datagram(h, body, body_len, auth_, out, splice);
    batch_.commit(fd);
    return;
  }
  seal_datagram(h, body, body_len, auth_, tx_, splice);
  std::vector<FaultInjector::Datagram> out;
  if (!faults_.process({tx_, link.id()}, Clock::now(), out))
    link.counters().drop(DropReason::kInjected);
  for (auto& d : out) {
    if (Link* to = this->link(d.peer)) {
      batch_.next(to->address(), &to->counters()) = std::move(d.bytes);
      batch_.commit(fd);
    }
  }
}

// A message from `from` is relayed to every other neighbour, never back to `from`: only their
// backlogs hold its chunks back (so two relays cannot block each other, each waiting for the
// other's queue to drain).
bool Lane::relay_backlogged(uint32_t from) const {
  for (const auto& [id, link] : links_)
    if (id != from && !link->lost() && link->sender().relayed_bytes() > config_.relay_queue_bytes)
      return true;
  return false;
}

// NAKs the chunks refused for room, on every link whose chunks are not held back by a relay
// backlog: a backlogged relay would refuse them all again, and asking for everything on every
// completed message made children of a busy root send nine datagrams for every one taken.
void Lane::retry_refused(Clock::time_point now) {
  for (auto& [id, link] : links_)
    if (link->receiver().refused_count() > 0 && !relay_backlogged(id)) link->retry_refused();
  room_freed_ = false;
  last_retry_ = now;
}

void Lane::tick() {
  tick_at(Clock::now());
  timer_.expires_after(kTick);
  timer_.async_wait([this](const asio::error_code& ec) {
    if (!ec) tick();
  });
}

void Lane::tick_at(Clock::time_point now) {
  for (auto& [id, link] : links_) {
    if (link->lost()) continue;
    const Link::Health health = link->tick(now);
    if (health == Link::Health::kAlive) continue;
    if (health == Link::Health::kSilent)
      spdlog::warn("node {}: peer {} silent for {} ms: declared lost", config_.node_id, id,
                   config_.peer_timeout.count());
    else
      spdlog::warn("node {}: peer {} acknowledged nothing for {} ms ({} bytes in flight): "
                   "declared lost", config_.node_id, id, config_.peer_timeout.count(),
                   link->sender().in_flight_bytes());
    link->declare_lost();
    if (shared_.lane_lost) shared_.lane_lost(index_, id, generations_[id]);
  }
  if (faults_.active()) {
    std::vector<FaultInjector::Datagram> due;
    faults_.release_due(now, due);
    for (auto& d : due) {
      if (Link* to = link(d.peer)) {
        batch_.next(to->address(), &to->counters()) = std::move(d.bytes);
        batch_.commit(send_fd());
      }
    }
  }
  if (now - last_expire_ > std::chrono::milliseconds(100)) {
    reassembler_.expire(now, [this](uint32_t id) {
      const Link* l = link(id);
      return l && !l->lost();
    });
    last_expire_ = now;
  }
  // Ask again soon after room frees (a message completed, a relay backlog drained), at most
  // every kRetryGap so a burst of completions makes one round of NAKs; and every 500 ms anyway
  // (room freed by expiry or a link that started over).
  const bool backlogged = relay_backlogged(kNoLink);
  if (was_backlogged_ && !backlogged) room_freed_ = true;
  was_backlogged_ = backlogged;
  if ((room_freed_ && now - last_retry_ >= kRetryGap) ||
      now - last_retry_ > std::chrono::milliseconds(500))
    retry_refused(now);
  flush();
}

}  // namespace dtrain::transport
