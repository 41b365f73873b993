#pragma once
// One lane of an endpoint (docs/architecture/transport.md, "Lanes"): a socket on the endpoint's
// port, the I/O thread that runs it, and this lane's half of every link (its own sequence numbers,
// credit, acks, replay window and reassembly). An endpoint has data.lanes of them; a message
// travels whole on lane message_id % lanes, so nothing below the endpoint knows there are others.
// With several lanes the receiving kernel steers each datagram to its lane's socket by the lane
// byte of its header, and each lane sends from a socket of its own (two lanes' datagrams never
// share a flow that receive offload could merge). Everything here but LaneShared belongs to the
// lane's I/O thread.
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "transport/endpoint/datagram_batch.h"
#include "transport/endpoint/endpoint.h"
#include "transport/endpoint/link.h"
#include "transport/endpoint/send_budget.h"
#include "transport/endpoint/tag_workers.h"
#include "transport/faults/fault_injector.h"
#include "transport/reliability/reassembler.h"

namespace dtrain::transport {

// What the lanes of one endpoint share; thread-safe.
struct LaneShared {
  explicit LaneShared(size_t send_queue_bytes) : budget(send_queue_bytes) {}

  // Counters are handed out in blocks from one sequence, so no two lanes ever tag with the same
  // (sender, receiver, boot, counter) under one key, and a lane takes the shared atomic once
  // per block, not once per datagram.
  static constexpr uint64_t kCounterBlock = 64;
  uint64_t next_block() { return counter_blocks.fetch_add(kCounterBlock); }

  SendBudget budget;  // backpressure: own bytes queued or unacknowledged, over all peers and lanes
  uint64_t boot_id = 0;
  std::atomic<uint64_t> counter_blocks{0};
  Endpoint::MessageHandler on_message;
  // A lane declared `peer` lost (the endpoint tells the other lanes and the layer above, once).
  // `generation`: of the add_peer that the lane's link last revived with; a report from before
  // a later add_peer is stale.
  std::function<void(uint8_t lane, uint32_t peer, uint64_t generation)> lane_lost;
  // A lane's link to `peer` was lost and heard from again: the next silence is a new one.
  std::function<void(uint32_t peer)> lane_revived;
  // An authenticated datagram from `peer` of another lane or lane count (logged once per peer).
  std::function<void(uint32_t peer, const DatagramHeader& header)> wrong_lane;
};

// Lanes share their port (SO_REUSEPORT), and the kernel would let any socket of the same user
// join it: another dtraind's lanes would then take some of this node's datagrams, and the
// sockets' order in the group, which steering relies on, would change as it leaves. So the
// port is first bound without sharing, which fails while anything holds it (and, for port 0,
// picks one nothing holds); the lanes bind it once that probe lets go. Returns the port; throws
// TransportError naming the fix.
uint16_t claim_port(const asio::ip::address& address, uint16_t port);

class Lane final : public LinkHost {
 public:
  using Clock = std::chrono::steady_clock;

  Lane(const EndpointConfig& config, uint8_t index, LaneShared& shared);

  // Opens the lane's sockets: the receiving one bound to address:port (shared with the other
  // lanes when there are several) and, with several lanes, one to send from. Throws
  // TransportError naming the fix.
  void open(const asio::ip::address& address, uint16_t port);
  // The kernel steers each datagram arriving on the port to the socket of lane
  // (lane byte % lanes): installed once, on lane 0's socket, after every lane has bound.
  void steer_by_lane_byte();
  uint16_t port() const { return socket_.local_endpoint().port(); }
  uint8_t index() const { return index_; }
  const LinkTiming& timing() const { return timing_; }
  asio::io_context& io() { return io_; }
  void run();   // the I/O thread's body, until stop()
  void stop();  // on the I/O thread (post it)
  // Once the I/O thread has ended: the endpoint closes the lanes' sockets last lane first, so
  // the port's group keeps the others in lane order while it shrinks.
  void close_sockets();

  // On the I/O thread (dispatched or posted there by the endpoint).
  Link* link(uint32_t id) {
    auto it = links_.find(id);
    return it == links_.end() ? nullptr : it->second.get();
  }
  void add_peer(uint32_t id, const asio::ip::udp::endpoint& address, uint64_t generation);
  void announce_boot(uint32_t peer, uint64_t boot_id);
  void remove_peer(uint32_t id);
  void add_job(uint64_t job_id) { jobs_.insert(job_id); }
  void remove_job(uint64_t job_id) { jobs_.erase(job_id); }
  void send(uint32_t peer, std::shared_ptr<OutgoingMessage> message);
  // Another lane declared `peer` lost: so is it here.
  void peer_lost_elsewhere(uint32_t peer);
  // The seam for in-process tests and tests/fuzz:endpoint_fuzzer, which run no I/O thread: a
  // datagram as the socket would hand it over (any alignment; its tag not yet checked), taken
  // as at `now`, and then what it caused is sent; and the periodic work as at `now`.
  void receive_datagram(const uint8_t* data, size_t len, Clock::time_point now);
  void tick_at(Clock::time_point now);
  bool idle() const;
  void counters(std::map<uint32_t, PeerCounters>& out) const;

  // Any thread.
  const TagWorkers& tag_workers() const { return tag_workers_; }

  // LinkHost
  flatbuffers::FlatBufferBuilder& builder() override {
    fbb_.Clear();
    return fbb_;
  }
  void emit(Link& link) override;
  void emit_chunk(Link& link, const ChunkFields& fields, const uint8_t* data,
                  size_t size) override;
  void release_budget(size_t bytes) override { shared_.budget.release(bytes); }
  void receiving_restarted(Link& link) override { reassembler_.link_restarted(link.id()); }
  bool holds_back(const Link& link) const override { return relay_backlogged(link.id()); }
  bool accepts_aes256gcm() const override { return auth_.aes_gcm(); }

 private:
  static constexpr size_t kReceiveBuffer = 65536;
  // recvmmsg slots hold kLargestDatagram + 8 bytes, 8-aligned: a longer datagram is cut to the
  // slot and then fails its size check, as it should. With receive coalescing (GRO) a slot holds up
  // to 64 KB of equal-sized datagrams from one sender, which the kernel says the size of.
  static constexpr size_t kReceiveBatch = 32;
  static constexpr size_t kCoalescedSlot = 65536;
  // A segment is copied into the kReceiveBuffer-byte `rx_` when it lies unaligned in its slot.
  static_assert(kCoalescedSlot <= kReceiveBuffer, "a coalesced slot must fit the aligned buffer");

  // lane_receive.cc: one received datagram; `tag`: what check_tags found of its tag.
  // `now`: when its recvmmsg returned (one clock read per batch, not per datagram).
  void handle(const uint8_t* data, size_t len, TagVerdict tag, Clock::time_point now);
  // handle(), from a copy in rx_ when `data` is not 8-byte aligned (at most kReceiveBuffer).
  void handle_aligned(const uint8_t* data, size_t len, TagVerdict tag, Clock::time_point now);
  // The datagrams of a received slot: one, or (coalesced) several of `segment` bytes but the
  // last.
  void split_slot(const uint8_t* data, size_t len, size_t segment);
  // Checks, on the tag workers, the tags of the received datagrams whose key is cached.
  void check_tags();
  void on_chunk(Link& link, const ParsedDatagram& d, Clock::time_point now);
  // Seals `body` (with `splice`'s bytes still to copy in) for `link`'s peer and sends it.
  void send_body(Link& link, bool chunk, const uint8_t* body, size_t body_len,
                 const BodySplice& splice);
  bool relay_backlogged(uint32_t except) const;
  void receive();
  void drain_socket();
  void tick();
  // Links whose refused chunks would be taken now ask for them again (see the definition).
  void retry_refused(Clock::time_point now);
  uint64_t next_counter();
  int send_fd() { return several_ ? send_socket_.native_handle() : socket_.native_handle(); }
  void flush() { batch_.flush(send_fd()); }

  const EndpointConfig config_;
  const uint8_t index_;
  const bool several_;  // config.lanes > 1
  LaneShared& shared_;
  asio::io_context io_;
  asio::ip::udp::socket socket_;       // receives (and, with one lane, sends)
  asio::ip::udp::socket send_socket_;  // with several lanes: this lane's own flow
  asio::steady_timer timer_;
  Authenticator auth_;
  Reassembler reassembler_;
  FaultInjector faults_;
  LinkTiming timing_;
  TagWorkers tag_workers_;
  uint64_t counter_ = 0, counter_end_ = 0;  // this lane's block of counters
  std::map<uint32_t, std::unique_ptr<Link>> links_;
  std::map<uint32_t, BootRecord> boots_;  // outlive their links (remove_peer, add_peer)
  std::map<uint32_t, uint64_t> generations_;  // each link's add_peer (LaneShared::lane_lost)
  PeerCounters unknown_;
  std::set<uint64_t> jobs_;
  DatagramBatch batch_;
  std::vector<uint64_t> rx_;  // 8-byte aligned, so the FlatBuffers body (offset 32) is too
  bool coalescing_ = false;   // the socket takes GRO'd datagrams (UDP_GRO)
  size_t slot_ = 0;           // bytes per recvmmsg slot
  std::vector<uint64_t> rx_batch_;  // kReceiveBatch slots
  // One recvmmsg's datagrams (pointing into rx_batch_) and what check_tags found of each tag.
  struct Received {
    const uint8_t* data;
    size_t len;
  };
  std::vector<Received> received_;
  std::vector<TagVerdict> verdicts_;
  struct TagCheck {
    size_t index;  // into received_
    const Authenticator::Keys* keys;
    TagContext context;
  };
  std::vector<TagCheck> tag_checks_;
  std::vector<uint8_t> tx_;
  flatbuffers::FlatBufferBuilder fbb_{2048};
  // A chunk's body as it is framed: its fields, then room for its data (never written here:
  // the data is copied from the message straight into the datagram).
  std::vector<uint8_t> chunk_body_;
  Clock::time_point last_expire_ = Clock::now();
  Clock::time_point last_retry_{};
  // When a message past the reassembly budget was last logged (at most one line this often).
  static constexpr std::chrono::seconds kOversizedLogEvery{10};
  Clock::time_point oversized_logged_{};
  bool room_freed_ = false;      // since last_retry_: a message completed or a backlog drained
  bool was_backlogged_ = false;  // some link's relay backlog was over its bound at the last tick
};

}  // namespace dtrain::transport
