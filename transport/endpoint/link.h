#pragma once
// One peer's link inside the endpoint (docs/architecture/transport.md, "The data channel"): both
// halves of the reliable link (LinkSender towards the peer, LinkReceiver from it), the peer's
// replay window and boot, the link epochs, the heartbeat round trip, and one handler per datagram
// kind. The endpoint owns the socket and dispatches each admitted datagram to its link; a link
// sends through its LinkHost. Single-threaded: the endpoint's I/O thread owns every link.
#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>

#include "transport/endpoint/peer_counters.h"
#include "transport/reliability/credit_tuner.h"
#include "transport/reliability/link_receiver.h"
#include "transport/reliability/link_sender.h"
#include "transport/security/replay_window.h"
#include "transport/wire/datagram.h"

namespace dtrain::transport {

class Link;

// What a link needs from its endpoint.
class LinkHost {
 public:
  virtual ~LinkHost() = default;
  // The endpoint's builder, cleared, for the body of one datagram.
  virtual flatbuffers::FlatBufferBuilder& builder() = 0;
  // Seals the finished body in builder() for `link`'s peer and sends it.
  virtual void emit(Link& link) = 0;
  // Seals a chunk for `link`'s peer, its fields and `size` bytes of data from `data` (copied
  // once, into the datagram), and sends it.
  virtual void emit_chunk(Link& link, const ChunkFields& fields, const uint8_t* data,
                          size_t size) = 0;
  // Own-message payload bytes acknowledged or dropped: the send budget gets them back.
  virtual void release_budget(size_t bytes) = 0;
  // The peer's sending half started over (it restarted, or reset the link): the chunks it
  // still owed us will never come.
  virtual void receiving_restarted(Link& link) = 0;
  // Whether chunks from `link` would be refused now whatever message they belong to (a relay
  // backlog they would join): its acks then offer no credit.
  virtual bool holds_back(const Link& link) const = 0;
  // Whether this node checks AES-256-GCM tags (its heartbeats say so).
  virtual bool accepts_aes256gcm() const = 0;
};

// What this node knows of a peer's boots. Kept by the endpoint across remove_peer/add_peer, so a
// peer that is taken out and back in cannot be fooled by its own old datagrams.
struct BootRecord {
  static constexpr size_t kRemembered = 16;
  uint64_t announced = 0;         // the boot the controller announced for it; 0: none announced
  std::deque<uint64_t> retired;   // boots seen before its current one, newest last
  // A datagram from `boot` is refused: it is not the announced one, or an older one.
  bool refuses(uint64_t boot) const;
  void retire(uint64_t boot);
};

struct LinkTiming {
  size_t credit_window = 128 * 1024;  // the base a link's credit starts from
  size_t max_credit_window = 128 * 1024;  // what it may grow to (CreditTuner)
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds peer_timeout{10000};
};

class Link {
 public:
  using Clock = std::chrono::steady_clock;
  Link(uint32_t id, const asio::ip::udp::endpoint& address, const LinkTiming& timing,
       LinkHost& host);

  uint32_t id() const { return id_; }
  const asio::ip::udp::endpoint& address() const { return address_; }
  void set_address(const asio::ip::udp::endpoint& address) { address_ = address; }
  uint32_t send_epoch() const { return send_epoch_; }
  PeerCounters& counters() { return counters_; }
  LinkSender& sender() { return sender_; }
  LinkReceiver& receiver() { return receiver_; }
  // What this node's acks offer the peer now.
  size_t credit_offered() const { return credit_.credit(); }
  bool lost() const { return counters_.lost; }
  // The AEAD of what we send this peer: AES-256-GCM once its heartbeat (from its current boot)
  // said it checks it, else XChaCha20-Poly1305, which every node checks.
  Aead aead() const { return counters_.aead; }
  void revive(Clock::time_point now);  // added again (a rejoin): heard from as of now

  // Boot, replay and link-epoch checks of an authenticated datagram from this peer; a new boot
  // or a new link epoch starts the receiving half over. The reason it is dropped, if it is.
  std::optional<DropReason> admit(const DatagramHeader& header, uint32_t link_epoch,
                                  BootRecord& boots, Clock::time_point now, size_t len);

  // Handlers of admitted datagrams, one per kind (chunks: the endpoint's, they need its
  // reassembly; it calls took_chunk once the chunk is taken).
  void on_ack(const wire::Ack& ack, Clock::time_point now);
  void on_nak(const wire::Nak& nak, Clock::time_point now);
  void on_heartbeat(const wire::Heartbeat& heartbeat);
  void took_chunk(uint64_t seq, uint32_t payload_bytes, Clock::time_point now);
  // Reassembly (or the relay backlog) had no room for it: left unacknowledged, reported in acks.
  void refused_chunk(uint64_t seq, uint32_t payload_bytes, Clock::time_point now);
  // Room was freed: NAKs every chunk refused for room, so its sender sends them again now.
  void retry_refused();

  void enqueue(OutgoingChunk chunk) { sender_.enqueue(std::move(chunk)); }
  // Sends what the credit allows now.
  void transmit(Clock::time_point now);

  // Why a link is declared lost at a tick.
  enum class Health { kAlive, kSilent, kNotAcknowledging };
  // Timers: retransmissions, acks, NAKs, heartbeats. Returns kAlive, or why the peer is lost
  // (silent for the peer timeout; or heard, but acknowledging nothing of what is in flight for
  // that long, which would otherwise grow queues without bound).
  Health tick(Clock::time_point now);
  // Our half starts over (the peer was declared lost, or restarted): what was queued or in
  // flight is dropped (the layer above hears of the loss), and the new epoch tells the peer's
  // receiver to start over too.
  void reset_sender();
  void declare_lost();

 private:
  void restart_receiving(uint32_t epoch);
  // `times` the smoothed round trip, at least `floor` and at most the longest retransmission
  // timeout: how long the repair timers wait.
  std::chrono::microseconds round_trips(double times, std::chrono::microseconds floor) const;
  // Paces the sender across a long link (transport/reliability/pacer.h), from the credit the
  // peer offers and the shortest round trip.
  void pace();
  // Feeds the credit tuner a taken chunk's bytes; warns once when it hits its cap.
  void grow_credit(size_t wire_bytes, Clock::time_point now);
  void send_chunk(uint64_t seq, const OutgoingChunk& chunk);
  // Finishes the frame begun in `fbb` (from host_.builder()) as an envelope and sends it.
  void send_control(flatbuffers::FlatBufferBuilder& fbb, wire::Frame type,
                    flatbuffers::Offset<void> frame);
  void send_ack(Clock::time_point now);
  void send_naks(Clock::time_point now);
  void send_nak(const std::vector<uint64_t>& missing);
  void send_heartbeat(Clock::time_point now);

  uint32_t id_;
  asio::ip::udp::endpoint address_;
  LinkTiming timing_;
  LinkHost& host_;
  LinkSender sender_;
  LinkReceiver receiver_;
  CreditTuner credit_;
  ReplayWindow replay_;
  uint64_t boot_seen_ = 0;
  uint32_t send_epoch_ = 0;  // ours towards this peer
  uint32_t recv_epoch_ = 0;  // the peer's towards us
  Clock::time_point last_heard_ = Clock::now();
  Clock::time_point last_heartbeat_{};
  uint64_t last_peer_sent_ns_ = 0;
  uint64_t last_peer_heard_ns_ = 0;  // when that heartbeat arrived
  PeerCounters counters_;
};

}  // namespace dtrain::transport
