#include "transport/endpoint/endpoint.h"

#include <pthread.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <future>

#include "transport/endpoint/lane.h"
#include "transport/transport_error.h"

namespace dtrain::transport {
namespace {

using Clock = std::chrono::steady_clock;
using asio::ip::udp;

// Runs `work` on every lane's I/O thread and waits for each, at most `limit` in all; false if a
// lane did not answer in time.
template <class Work>
bool on_every_lane(const std::vector<std::unique_ptr<Lane>>& lanes, Work work,
                   std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  std::vector<std::future<void>> done;
  for (auto& lane : lanes) {
    // Shared: if the wait gives up, the I/O thread still has a promise to fulfil.
    auto promise = std::make_shared<std::promise<void>>();
    done.push_back(promise->get_future());
    asio::post(lane->io(), [&lane = *lane, work, promise] {
      work(lane);
      promise->set_value();
    });
  }
  const auto deadline = Clock::now() + limit;
  for (auto& f : done)
    if (f.wait_until(deadline) != std::future_status::ready) return false;
  return true;
}

}  // namespace

Endpoint::Endpoint(const EndpointConfig& config)
    : config_(config), shared_(new LaneShared(config.send_queue_bytes)) {
  if (config.max_datagram < 256 || config.max_datagram > kLargestDatagram)
    throw TransportError("max_datagram " + std::to_string(config.max_datagram) +
                             " is outside 256 .. " + std::to_string(kLargestDatagram) + " bytes",
                         "set data.mtu to the MTU of the network between the nodes (1500 unless "
                         "it carries jumbo frames)");
  if (config.lanes < 1 || config.lanes > kMaxLanes)
    throw TransportError("data lanes " + std::to_string(config.lanes) + " is outside 1 .. " +
                             std::to_string(kMaxLanes),
                         "set data.lanes between 1 and " + std::to_string(kMaxLanes) +
                             " (1 unless the transport bench shows a gain on your nodes)");
  asio::error_code ec;
  const auto address = asio::ip::make_address(config.bind_address, ec);
  if (ec)
    throw TransportError("'" + config.bind_address + "' is not an IP address",
                         "give the data channel an address such as 10.0.0.5 (or a network)");
  shared_->boot_id = config.boot_id;
  while (shared_->boot_id == 0) randombytes_buf(&shared_->boot_id, sizeof shared_->boot_id);
  shared_->lane_lost = [this](uint8_t lane, uint32_t peer, uint64_t generation) {
    lane_lost(lane, peer, generation);
  };
  shared_->lane_revived = [this](uint32_t peer) { lane_revived(peer); };
  shared_->wrong_lane = [this](uint32_t peer, const DatagramHeader& h) { wrong_lane(peer, h); };
  // Lane 0 binds the configured port (or a free one); the others join it, in order: the
  // steering program's index of a socket is its place in the port's group.
  const uint16_t port = config.lanes > 1 ? claim_port(address, config.port) : config.port;
  for (size_t i = 0; i < config.lanes; ++i) {
    lanes_.push_back(std::make_unique<Lane>(config, uint8_t(i), *shared_));
    lanes_.back()->open(address, i == 0 ? port : port_);
    if (i == 0) port_ = lanes_[0]->port();
  }
  if (config.lanes > 1) lanes_[0]->steer_by_lane_byte();
  // The largest chunk that fits one datagram, around its fixed fields (transport/wire/datagram.h).
  chunk_payload_ = config.max_datagram - kHeaderBytes - kTagBytes - kChunkFieldBytes;
  if (config.insecure)
    spdlog::warn("node {}: data channel running INSECURE (no authentication): benchmarks only",
                 config.node_id);
  spdlog::info("node {}: data channel on {}:{}{}", config.node_id, config.bind_address, port_,
               config.lanes > 1 ? " in " + std::to_string(config.lanes) + " lanes" : "");
  const size_t workers = lanes_[0]->tag_workers().threads();
  if (workers > 0)
    spdlog::info("node {}: {} tag worker thread(s) per lane seal and check tags beside its I/O "
                 "thread", config.node_id, workers);
  const size_t busy = config.lanes * (workers + 1);
  const unsigned cores = std::thread::hardware_concurrency();
  if (busy > 1 && cores > 0 && busy > cores)
    spdlog::warn("node {}: {} lane(s) with {} tag worker thread(s) each are {} busy threads, more "
                 "than this machine's {} cores: they take turns and goodput falls (fix: fewer "
                 "data.lanes or tag_threads)", config.node_id, config.lanes, workers, busy, cores);
}

Endpoint::~Endpoint() { stop(); }

void Endpoint::start(MessageHandler on_message, PeerHandler on_lost) {
  shared_->on_message = std::move(on_message);
  on_lost_ = std::move(on_lost);
  for (auto& lane : lanes_) {
    io_threads_.emplace_back([this, &lane = *lane] {
      // Named so that top -H and perf show which node's (and lane's) I/O thread is busy.
      std::string name = "dtrain-io-" + std::to_string(config_.node_id);
      if (config_.lanes > 1) name += "." + std::to_string(lane.index());
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      lane.run();
    });
  }
}

void Endpoint::stop() {
  if (io_threads_.empty()) return;
  for (auto& lane : lanes_) asio::post(lane->io(), [&lane = *lane] { lane.stop(); });
  for (auto& t : io_threads_) t.join();
  io_threads_.clear();
  for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) (*it)->close_sockets();
  shared_->budget.close();
}

uint64_t Endpoint::boot_id() const { return shared_->boot_id; }

size_t Endpoint::credit_window() const { return lanes_[0]->timing().credit_window; }

void Endpoint::add_peer(uint32_t id, const std::string& address, uint16_t port) {
  asio::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec)
    throw TransportError("peer address '" + address + "' is not an IP address", "fix the mesh map");
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(peer_reports_mutex_);
    lost_.erase(id);
    generation = ++generations_[id];
  }
  // Dispatched, like send(): a handler on an I/O thread that adds a peer back (a quick
  // restart, from on_lost) and then relays to it must find it alive, not lost until later.
  for (auto& lane : lanes_)
    asio::dispatch(lane->io(), [&lane = *lane, id, ep = udp::endpoint(ip, port), generation] {
      lane.add_peer(id, ep, generation);
    });
}

void Endpoint::announce_boot(uint32_t peer, uint64_t boot_id) {
  for (auto& lane : lanes_)
    asio::dispatch(lane->io(),
                   [&lane = *lane, peer, boot_id] { lane.announce_boot(peer, boot_id); });
}

void Endpoint::remove_peer(uint32_t id) {
  for (auto& lane : lanes_) asio::post(lane->io(), [&lane = *lane, id] { lane.remove_peer(id); });
}

void Endpoint::add_job(uint64_t job_id) {
  // Waits for the I/O threads: a caller that tells peers it takes the job's datagrams now (a
  // rejoining node's Attached) must not race the insertion. Before start() the posts run ahead
  // of the first datagram: nothing to wait for.
  if (io_threads_.empty()) {
    for (auto& lane : lanes_)
      asio::post(lane->io(), [&lane = *lane, job_id] { lane.add_job(job_id); });
    return;
  }
  on_every_lane(lanes_, [job_id](Lane& lane) { lane.add_job(job_id); });
}

void Endpoint::remove_job(uint64_t job_id) {
  for (auto& lane : lanes_)
    asio::post(lane->io(), [&lane = *lane, job_id] { lane.remove_job(job_id); });
}

bool Endpoint::send(uint32_t peer, uint64_t job_id, uint32_t origin, uint64_t message_id,
                    Bytes bytes, std::chrono::milliseconds deadline, SendKind kind) {
  // Relays are not counted: they cannot wait, and letting them fill the budget starved this
  // node's own messages (a plain-mesh root forwards eight times what it publishes). They are
  // bounded per link instead (relay_queue_bytes, see Lane::relay_backlogged).
  const bool relayed = kind == SendKind::kRelay;
  if (!relayed && !shared_->budget.acquire(bytes->size(), deadline)) return false;
  auto message = std::make_shared<OutgoingMessage>();
  message->job_id = job_id;
  message->origin = origin;
  message->message_id = message_id;
  message->relayed = relayed;
  message->chunk_payload = static_cast<uint32_t>(chunk_payload_);
  message->chunk_count = static_cast<uint32_t>(
      std::max<size_t>(1, (bytes->size() + chunk_payload_ - 1) / chunk_payload_));
  message->bytes = std::move(bytes);
  // A message goes whole on one lane, the same on every node (a relay goes on as it came, from
  // the I/O thread it arrived on). From a handler on that thread it is queued at once, not after
  // the receive batch in progress: its bytes count against the relay bound before the next
  // chunk is taken (a coalesced batch can complete several messages).
  Lane& lane = *lanes_[message_id % lanes_.size()];
  asio::dispatch(lane.io(), [&lane, peer, message] { lane.send(peer, message); });
  return true;
}

size_t Endpoint::tag_threads() const { return lanes_[0]->tag_workers().threads(); }

uint64_t Endpoint::tags_on_workers() const {
  uint64_t sum = 0;
  for (auto& lane : lanes_) sum += lane->tag_workers().items_by_workers();
  return sum;
}

Endpoint::TagBatches Endpoint::tag_batches_shared() const {
  TagBatches sum;
  for (auto& lane : lanes_) {
    sum.batches += lane->tag_workers().batches_shared();
    sum.items += lane->tag_workers().items_shared();
  }
  return sum;
}

bool Endpoint::idle() {
  auto idle = std::make_shared<std::atomic<bool>>(true);
  const bool answered = on_every_lane(lanes_, [idle](Lane& lane) {
    if (!lane.idle()) *idle = false;
  });
  return answered && *idle;
}

std::map<uint32_t, PeerCounters> Endpoint::counters() {
  // One map per lane (each filled on its own thread), summed here.
  auto per_lane = std::make_shared<std::vector<std::map<uint32_t, PeerCounters>>>(lanes_.size());
  const bool answered = on_every_lane(lanes_, [per_lane](Lane& lane) {
    lane.counters((*per_lane)[lane.index()]);
  });
  if (!answered) return {};
  std::map<uint32_t, PeerCounters> out = std::move((*per_lane)[0]);
  for (size_t i = 1; i < per_lane->size(); ++i)
    for (const auto& [id, c] : (*per_lane)[i]) out[id].add_lane(c);
  return out;
}

// On the I/O thread of lane `from`. The first lane to declare a peer lost tells the others (so
// every lane drops what it queued for the peer, as one link would) and the layer above, once per
// silence; the others, when their own timers say so too, find it done. A report about the link
// as it was before a later add_peer is stale: that add_peer's revival is on its way to the lane
// (told to the others, it would arrive after their revival and leave them lost).
void Endpoint::lane_lost(uint8_t from, uint32_t peer, uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(peer_reports_mutex_);
    if (generation != generations_[peer]) return;
    if (!lost_.insert(peer).second) return;
  }
  // Posted before the layer above hears of it: a handler that adds the peer back posts its
  // revival after these.
  for (auto& lane : lanes_)
    if (lane->index() != from)
      asio::post(lane->io(), [&lane = *lane, peer] { lane.peer_lost_elsewhere(peer); });
  if (on_lost_) on_lost_(peer);
}

// A lost link heard from again (its peer's datagrams are admitted): the silence is over, and
// the next one is reported again.
void Endpoint::lane_revived(uint32_t peer) {
  std::lock_guard<std::mutex> lock(peer_reports_mutex_);
  lost_.erase(peer);
}

// Said once per peer: a node with another data.lanes is refused on every datagram.
void Endpoint::wrong_lane(uint32_t peer, const DatagramHeader& h) {
  {
    std::lock_guard<std::mutex> lock(peer_reports_mutex_);
    if (!lane_complaints_.insert(peer).second) return;
  }
  if (h.lanes != config_.lanes)
    spdlog::error("node {}: node {} sends on {} data lanes, this node has {}: its datagrams are "
                  "refused (fix: the same data.lanes in dtraind.yaml on every node)",
                  config_.node_id, peer, h.lanes, config_.lanes);
  else
    spdlog::warn("node {}: a datagram of lane {} from node {} reached another lane's socket and "
                 "was refused (it is sent again; a receive-offload run led by a forged datagram "
                 "goes where the forgery says; said once per peer)",
                 config_.node_id, h.lane, peer);
}

}  // namespace dtrain::transport
