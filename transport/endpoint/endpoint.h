#pragma once
// A node's UDP endpoint (docs/architecture/transport.md, "The data channel"): one port carrying
// every job (told apart by job id), authenticated datagrams, reliable links to each peer (sequence
// numbers, NAKs, cumulative acks, credit-based flow control), chunking and reassembly of messages
// of any size, heartbeats with round-trip times, and the peer declared lost after a silence (or
// after it stops acknowledging). The work is done by config.lanes lanes (transport/endpoint/
// lane.h), each an I/O thread with its own socket on the port and its own half of every link
// (transport/endpoint/link.h); a message travels whole on one lane. Public calls are
// thread-safe and never wait without a deadline.
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transport/endpoint/peer_counters.h"
#include "transport/faults/fault_injector.h"
#include "transport/security/cluster_key.h"
#include "transport/wire/datagram.h"

namespace dtrain::transport {

class Lane;
struct LaneShared;

struct EndpointConfig {
  uint32_t node_id = 0;
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;                       // 0: any free port (tests); daemons use 40123
  // The largest datagram this node sends (a daemon's data.mtu: datagram_for_mtu); it takes any
  // up to kLargestDatagram from its peers.
  size_t max_datagram = kDefaultMaxDatagram;
  // Bytes a sender may have unacknowledged towards this node, per link; capped at half the
  // socket's receive buffer (what a burst from one peer may fill), which net.core.rmem_max bounds.
  size_t credit_window = 512 * 1024;
  // The most a link's credit grows to across a long link (transport/reliability/credit_tuner.h);
  // also capped at the socket's receive buffer.
  size_t max_credit_window = 32 << 20;
  size_t receive_buffer_bytes = 8 << 20;   // asked of the kernel (SO_RCVBUF)
  size_t send_queue_bytes = 64 << 20;      // beyond this, send() waits (up to its deadline)
  size_t reassembly_bytes = 512 << 20;    // shared fairly between the messages' origins
  // Relayed bytes queued or in flight towards one peer beyond which chunks that would be relayed
  // there are not taken (nor acknowledged): their senders slow down instead of this node's
  // memory growing.
  size_t relay_queue_bytes = 64 << 20;
  // This endpoint's boot (daemons: their registered one, which the controller announces); 0:
  // drawn at random. Never give two endpoints the same non-zero boot: the counters, the tags'
  // nonces, start over with each endpoint.
  uint64_t boot_id = 0;
  std::chrono::milliseconds reassembly_timeout{30000};
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds peer_timeout{10000};
  ClusterKey key{};
  bool insecure = false;                   // benchmarks only: no authentication
  // AES-256-GCM tags towards peers that accept them, where the CPU has AES-NI and CLMUL
  // (transport/security/authenticator.h); false: XChaCha20-Poly1305 only (tests of mixed nodes).
  bool allow_aes256gcm = true;
  // UDP segmentation offload on send (GSO) and receive (GRO), where the kernel has them
  // (transport/endpoint/datagram_batch.h): the same datagrams, a fraction of the system calls'
  // cost. false: datagram by datagram (benchmarks compare the two).
  bool segmentation = true;
  // Threads beside each lane's I/O thread that seal and check the tags of each batch of datagrams
  // (transport/endpoint/tag_workers.h): authentication is most of the I/O thread's work on a
  // fast link, so a node with spare cores can give it some. 0: the I/O thread does it all.
  size_t tag_threads = 0;
  // I/O threads, each with a socket on the port (docs/architecture/transport.md, "Lanes"): one
  // link's goodput past what one thread can frame, tag and check. Every node of a cluster must have
  // the same count (a node refuses datagrams of another count, and says so). 1 .. kMaxLanes.
  size_t lanes = 1;
  FaultSpec faults;
};

struct Delivery {
  uint64_t job_id = 0;
  uint32_t origin = 0;
  uint64_t message_id = 0;
  uint32_t from = 0;  // the peer it arrived from (not necessarily the origin, with relaying)
  std::vector<uint8_t> bytes;
};

class Endpoint {
 public:
  using MessageHandler = std::function<void(Delivery&&)>;
  using PeerHandler = std::function<void(uint32_t peer)>;
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;
  // Counters of datagrams from senders that are not peers (or could not be parsed).
  static constexpr uint32_t kUnknownSender = 0xFFFFFFFFu;

  explicit Endpoint(const EndpointConfig& config);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Handlers run on an I/O thread: keep them short. With several lanes, on_message runs on the
  // lane the message came by, so two may run at once. on_lost fires once per silence.
  void start(MessageHandler on_message, PeerHandler on_lost = nullptr);
  void stop();

  uint32_t node_id() const { return config_.node_id; }
  uint16_t port() const { return port_; }
  size_t lanes() const { return config_.lanes; }
  const std::string& address() const { return config_.bind_address; }
  size_t chunk_payload() const { return chunk_payload_; }
  // The credit each link offers: config.credit_window, or less where the kernel gave the socket
  // a smaller receive buffer than it needs.
  size_t credit_window() const;
  std::chrono::milliseconds peer_timeout() const { return config_.peer_timeout; }

  uint64_t boot_id() const;

  void add_peer(uint32_t id, const std::string& address, uint16_t port);
  // The only boot of `peer` whose datagrams are taken from now on (the controller announces it
  // when the peer registers): older boots' datagrams are refused and counted as stale_boot.
  // Without an announcement a peer's first boot is taken, and any boot it left is refused.
  void announce_boot(uint32_t peer, uint64_t boot_id);
  void remove_peer(uint32_t id);
  // Jobs whose chunks are delivered; chunks of other jobs are acknowledged and dropped.
  // Once started, add_job returns when the I/O thread has it (call it from another thread).
  void add_job(uint64_t job_id);
  void remove_job(uint64_t job_id);

  // Whose message a send() carries. kOwn: this node's; it waits while more than
  // send_queue_bytes of its own are queued or in flight. kRelay: forwarded for another node,
  // from a handler on the I/O thread; it never waits (the I/O thread is what drains the
  // queues) and is not counted against send_queue_bytes. On each link both kinds get an equal
  // share when both are queued.
  enum class SendKind { kOwn, kRelay };

  // Queues a message for one peer, on lane message_id % lanes. False when a kOwn send ran past
  // `deadline` waiting for the budget, or for an unknown peer.
  bool send(uint32_t peer, uint64_t job_id, uint32_t origin, uint64_t message_id, Bytes bytes,
            std::chrono::milliseconds deadline = std::chrono::milliseconds(10000),
            SendKind kind = SendKind::kOwn);

  size_t tag_threads() const;  // per lane
  // Tags sealed or checked by the tag workers rather than the I/O thread (config.tag_threads).
  uint64_t tags_on_workers() const;
  // Batches shared with the tag workers and the datagrams in them (TagWorkers::batches_shared).
  struct TagBatches {
    uint64_t batches = 0, items = 0;
  };
  TagBatches tag_batches_shared() const;

  // True when nothing is queued or unacknowledged towards any live peer.
  bool idle();
  std::map<uint32_t, PeerCounters> counters();

 private:
  void lane_lost(uint8_t lane, uint32_t peer, uint64_t generation);
  void lane_revived(uint32_t peer);
  void wrong_lane(uint32_t peer, const DatagramHeader& header);

  EndpointConfig config_;
  uint16_t port_ = 0;
  size_t chunk_payload_ = 0;
  std::unique_ptr<LaneShared> shared_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<std::thread> io_threads_;
  PeerHandler on_lost_;
  // What the lanes report about peers, merged: guards the three sets below (lanes call in from
  // their own I/O threads).
  std::mutex peer_reports_mutex_;
  std::set<uint32_t> lost_;  // peers a lane declared lost, until add_peer or a lane hears them
  std::map<uint32_t, uint64_t> generations_;  // add_peer calls per peer
  std::set<uint32_t> lane_complaints_;  // peers whose wrong lane was logged
};

}  // namespace dtrain::transport
