// libFuzzer target for the endpoint's datagram state machine with authentication on
// (tests/README.md, "Fuzzers"): one lane of node 1 (of two lanes) with peers 2 and 3, whose boots
// the controller announced, driven through Lane's in-process seam by a script the input spells out.
// Each step is one of: a chunk, an ack, a NAK or a heartbeat, sealed by the peer as the wire wants
// it, from the announced boot, an older or a newer one, towards this node or another, on this lane
// or another; a replay of an earlier datagram, whole or with one byte flipped; raw bytes; a
// message of this node's own to a peer (so acks and NAKs meet real in-flight state); a boot
// change the controller announces; a peer added again; the clock moved on and the lane's
// periodic work run. After every step the lane's invariants are checked: nothing is delivered
// for a job the node does not run, no delivery is larger than the reassembly budget, and only
// datagrams that were sealed under the cluster key by a known peer ever count as that peer's.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "transport/endpoint/lane.h"
#include "transport/wire/datagram.h"

using namespace dtrain::transport;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kSelf = 1;
constexpr uint64_t kJob = 5, kOtherJob = 6;
constexpr size_t kReassembly = 64 << 10;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "endpoint_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

ClusterKey cluster_key() {
  ClusterKey key;
  key.fill(0x5a);
  return key;
}

// Where the lane's acks and retransmissions go: a socket nobody reads (its small buffer fills,
// and the kernel drops the rest).
const asio::ip::udp::endpoint& sink() {
  static asio::io_context io;
  static asio::ip::udp::socket socket(io, asio::ip::udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  static const asio::ip::udp::endpoint at = [] {
    socket.set_option(asio::socket_base::receive_buffer_size(4096));
    return socket.local_endpoint();
  }();
  return at;
}

// One peer as the fuzzer plays it: its key, its boots and its counter.
struct Peer {
  uint32_t id;
  uint64_t boot;  // the announced one
  uint64_t counter = 0;
  std::unique_ptr<Authenticator> auth;
};

class Script {
 public:
  Script(const uint8_t* data, size_t size) : in_(data, size) {
    spdlog::set_level(spdlog::level::off);
    config_.node_id = kSelf;
    config_.key = cluster_key();
    config_.lanes = 2;
    config_.segmentation = false;
    config_.reassembly_bytes = kReassembly;
    config_.relay_queue_bytes = 32 << 10;
    config_.heartbeat_interval = std::chrono::milliseconds(100);
    config_.peer_timeout = std::chrono::milliseconds(1000);
    shared_ = std::make_unique<LaneShared>(1 << 20);
    shared_->boot_id = 77;
    shared_->on_message = [this](Delivery&& d) {
      require(d.job_id == kJob, "a message of a job this node does not run was delivered");
      require(d.bytes.size() <= kReassembly, "a delivery larger than the reassembly budget");
      require(d.from == 2 || d.from == 3, "a delivery from a node that is no peer");
      ++delivered_;
    };
    shared_->lane_lost = [](uint8_t, uint32_t peer, uint64_t) {
      require(peer == 2 || peer == 3, "a node that is no peer declared lost");
    };
    shared_->wrong_lane = [](uint32_t, const DatagramHeader&) {};
    lane_ = std::make_unique<Lane>(config_, 0, *shared_);
    lane_->open(asio::ip::make_address("127.0.0.1"), 0);
    for (uint32_t id : {2u, 3u}) {
      peers_.push_back(Peer{id, 100 * id, 0,
                            std::make_unique<Authenticator>(config_.key, false, true, id)});
      lane_->add_peer(id, sink(), generation_);
      lane_->announce_boot(id, 100 * id);
    }
    lane_->add_job(kJob);
  }

  void run() {
    while (in_.remaining_bytes() > 0) step();
  }

 private:
  void step() {
    Peer& peer = peers_[in_.ConsumeIntegralInRange<int>(0, 1)];
    switch (in_.ConsumeIntegralInRange<int>(0, 10)) {
      // Now and then flagged as the other kind of body (a chunk read as an envelope, and back).
      case 0: case 1: case 2: sealed(peer, chunk(), !odd_flag()); break;
      case 3: sealed(peer, ack(), odd_flag()); break;
      case 4: sealed(peer, nak(), odd_flag()); break;
      case 5: sealed(peer, heartbeat(), odd_flag()); break;
      case 6: replay(); break;
      case 7: raw(); break;
      case 8: own_message(peer); break;
      case 9: controller(peer); break;
      case 10: later(); break;
    }
  }

  bool odd_flag() { return in_.ConsumeIntegralInRange<int>(0, 15) == 0; }

  // A finished Envelope around the frame the builder already holds.
  template <class Frame>
  std::vector<uint8_t> envelope(wire::Frame type, flatbuffers::Offset<Frame> frame) {
    fbb_.Finish(wire::CreateEnvelope(fbb_, type, frame.Union(),
                                     in_.ConsumeIntegralInRange<uint32_t>(0, 2)));
    std::vector<uint8_t> body(fbb_.GetBufferPointer(), fbb_.GetBufferPointer() + fbb_.GetSize());
    fbb_.Clear();
    return body;
  }

  std::vector<uint8_t> chunk() {
    const uint32_t count = in_.ConsumeIntegralInRange<uint32_t>(1, 6);
    const uint32_t index = in_.ConsumeIntegralInRange<uint32_t>(0, count);
    const uint32_t chunk_bytes = in_.ConsumeIntegralInRange<uint32_t>(1, 1024);
    const uint32_t total = in_.ConsumeBool() ? chunk_bytes * count
                                             : in_.ConsumeIntegralInRange<uint32_t>(0, 1 << 17);
    const std::vector<uint8_t> data =
        in_.ConsumeBytes<uint8_t>(in_.ConsumeIntegralInRange<size_t>(0, chunk_bytes));
    ChunkFields f;
    f.origin = in_.ConsumeIntegralInRange<uint32_t>(2, 4);
    f.message_id = in_.ConsumeIntegralInRange<uint64_t>(0, 7);
    f.index = index;
    f.count = count;
    f.total_bytes = total;
    f.chunk_bytes = chunk_bytes;
    f.job_id = in_.ConsumeIntegralInRange<int>(0, 7) == 0 ? kOtherJob : kJob;
    f.link_seq = in_.ConsumeIntegralInRange<uint64_t>(0, 400);
    f.link_epoch = in_.ConsumeIntegralInRange<uint32_t>(0, 2);
    std::vector<uint8_t> body(kChunkFieldBytes);
    put_chunk_fields(f, body.data());
    body.insert(body.end(), data.begin(), data.end());
    return body;
  }

  std::vector<uint8_t> ack() {
    std::vector<uint64_t> ranges;
    for (int n = in_.ConsumeIntegralInRange<int>(0, 8); n > 0; --n)
      ranges.push_back(in_.ConsumeIntegralInRange<uint64_t>(0, 400));
    const auto a = wire::CreateAck(
        fbb_, in_.ConsumeIntegralInRange<uint64_t>(0, 400), in_.ConsumeIntegral<uint32_t>(),
        in_.ConsumeIntegralInRange<uint32_t>(0, 2), fbb_.CreateVector(ranges),
        in_.ConsumeIntegralInRange<uint32_t>(0, 64), in_.ConsumeIntegral<uint32_t>(),
        in_.ConsumeIntegral<uint32_t>());
    return envelope(wire::Frame::Ack, a);
  }

  std::vector<uint8_t> nak() {
    std::vector<uint64_t> missing;
    for (int n = in_.ConsumeIntegralInRange<int>(0, 12); n > 0; --n)
      missing.push_back(in_.ConsumeIntegralInRange<uint64_t>(0, 400));
    const auto k = wire::CreateNak(fbb_, fbb_.CreateVector(missing),
                                   in_.ConsumeIntegralInRange<uint32_t>(0, 2));
    return envelope(wire::Frame::Nak, k);
  }

  std::vector<uint8_t> heartbeat() {
    const auto h = wire::CreateHeartbeat(fbb_, in_.ConsumeIntegral<uint64_t>(),
                                         in_.ConsumeIntegral<uint64_t>(),
                                         in_.ConsumeIntegral<uint64_t>(),
                                         in_.ConsumeIntegral<uint64_t>(), in_.ConsumeBool());
    return envelope(wire::Frame::Heartbeat, h);
  }

  // The peer seals `body` as its endpoint would, with what the script says of the header.
  void sealed(Peer& peer, const std::vector<uint8_t>& body, bool chunk = false) {
    DatagramHeader h;
    h.chunk = chunk;
    h.sender = peer.id;
    h.receiver = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? 9 : kSelf;
    switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: h.boot_id = peer.boot - 1; break;  // older than announced
      case 1: h.boot_id = peer.boot + 1; break;  // not announced (yet)
      default: h.boot_id = peer.boot;
    }
    // Mostly the next counter; sometimes one far ahead, or one used before.
    const int counter = in_.ConsumeIntegralInRange<int>(0, 9);
    h.counter = counter == 0 ? peer.counter + in_.ConsumeIntegralInRange<uint64_t>(2, 5000)
                : counter == 1 ? peer.counter : peer.counter + 1;
    peer.counter = std::max(peer.counter, h.counter);
    h.aead = in_.ConsumeBool() && peer.auth->aes_gcm() ? Aead::kAes256Gcm
                                                       : Aead::kXChaCha20Poly1305;
    h.lanes = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? 1 : 2;
    h.lane = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? 1 : 0;
    std::vector<uint8_t> datagram;
    seal_datagram(h, body.data(), body.size(), *peer.auth, datagram);
    deliver(datagram);
    if (sent_.size() < 16) sent_.push_back(std::move(datagram));
  }

  void replay() {
    if (sent_.empty()) return;
    std::vector<uint8_t> d = sent_[in_.ConsumeIntegralInRange<size_t>(0, sent_.size() - 1)];
    if (!in_.ConsumeBool()) return deliver(d);  // the same bytes again: the peer's, replayed
    d[in_.ConsumeIntegralInRange<size_t>(0, d.size() - 1)] ^=
        uint8_t(1 << in_.ConsumeIntegralInRange<int>(0, 7));
    forged(d);
  }

  void raw() { forged(in_.ConsumeBytes<uint8_t>(in_.ConsumeIntegralInRange<size_t>(0, 1500))); }

  // Bytes no peer sealed (a flipped bit, or none of ours at all): dropped as from an unknown
  // sender, and no peer's link hears of them.
  void forged(const std::vector<uint8_t>& datagram) {
    const auto before = heard();
    deliver(datagram);
    const auto after = heard();
    require(after.first == before.first, "a forged datagram reached a peer's link");
    require(after.second == before.second + 1, "a forged datagram was not counted as dropped");
  }

  // What the peers' links took in (traffic and drops), and the drops of unknown senders.
  std::pair<uint64_t, uint64_t> heard() const {
    std::map<uint32_t, PeerCounters> c;
    lane_->counters(c);
    uint64_t peers = 0, unknown = 0;
    for (auto& [id, counters] : c) {
      uint64_t& sum = id == Endpoint::kUnknownSender ? unknown : peers;
      for (uint64_t d : counters.drops) sum += d;
      if (id != Endpoint::kUnknownSender)
        sum += counters.datagrams_in + counters.naks_received + counters.duplicates;
    }
    return {peers, unknown};
  }

  // This node's own message to the peer: its chunks go out, and wait for acks.
  void own_message(Peer& peer) {
    auto m = std::make_shared<OutgoingMessage>();
    m->job_id = kJob;
    m->origin = kSelf;
    m->message_id = ++message_id_;
    m->bytes = std::make_shared<const std::vector<uint8_t>>(
        in_.ConsumeIntegralInRange<size_t>(1, 20000), uint8_t(0x33));
    m->chunk_payload = 1024;
    m->chunk_count = uint32_t((m->bytes->size() + m->chunk_payload - 1) / m->chunk_payload);
    shared_->budget.acquire(m->bytes->size(), std::chrono::milliseconds(0));
    lane_->send(peer.id, m);
  }

  // What the controller tells the node: the peer restarted (a new boot), or it is a member again.
  void controller(Peer& peer) {
    if (in_.ConsumeBool()) {
      peer.boot += 1;
      peer.counter = 0;
      lane_->announce_boot(peer.id, peer.boot);
    } else {
      lane_->add_peer(peer.id, sink(), ++generation_);
    }
  }

  void later() {
    now_ += std::chrono::milliseconds(in_.ConsumeIntegralInRange<int>(0, 1500));
    lane_->tick_at(now_);
  }

  void deliver(const std::vector<uint8_t>& datagram) {
    lane_->receive_datagram(datagram.data(), datagram.size(), now_);
  }

  FuzzedDataProvider in_;
  EndpointConfig config_;
  std::unique_ptr<LaneShared> shared_;
  std::unique_ptr<Lane> lane_;
  std::vector<Peer> peers_;
  std::vector<std::vector<uint8_t>> sent_;  // sealed datagrams, for replays
  flatbuffers::FlatBufferBuilder fbb_{2048};
  Clock::time_point now_ = Clock::now();
  uint64_t generation_ = 1, message_id_ = 0, delivered_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Script(data, size).run();
  return 0;
}
