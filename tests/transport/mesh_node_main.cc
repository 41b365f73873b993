// One node of the multi-process transport tests (driven by mesh_test.cc). It binds a free port
// on loopback, publishes its port in --dir, waits for the others, joins the mesh and sends
// --messages messages of 100 B .. 64 KB plus --big messages of --big-bytes to everyone. Every
// message's bytes follow from (origin, message id), so each receiver checks them exactly; a
// message delivered twice or with wrong bytes is an error. It stays up, relaying, until every
// node says it is done (or --deadline-ms passes), then writes result.<id> and exits 0 if all
// good. Every wait has a deadline and says what it was waiting for.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "transport/mesh/mesh_node.h"
#include "transport/security/cluster_key.h"

using namespace dtrain::transport;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<uint8_t> message_bytes(uint32_t origin, uint64_t id, size_t size) {
  std::vector<uint8_t> out(size);
  uint64_t x = (uint64_t(origin) << 40) ^ id ^ 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < size; i += 8) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (size_t k = 0; k < 8 && i + k < size; ++k) out[i + k] = uint8_t(z >> (8 * k));
  }
  return out;
}

size_t message_size(uint32_t origin, uint64_t id, int small, size_t big_bytes) {
  if (id > 1000000) return 1000;  // the kill test's second round
  if (id > uint64_t(small)) return big_bytes;
  std::mt19937_64 rng((uint64_t(origin) << 32) ^ id);
  return 100 + rng() % (64 * 1024 - 100 + 1);
}

bool file_exists(const std::string& p) { return std::ifstream(p).good(); }

// What the links look like, for a test that timed out.
void print_links(Endpoint& endpoint, uint32_t id) {
  for (const auto& [peer, c] : endpoint.counters()) {
    if (peer == Endpoint::kUnknownSender) continue;
    std::fprintf(stderr,
                 "node %u -> %u: out %llu dgrams, in %llu, queued %llu B, in flight %llu B, "
                 "retransmits %llu, naks sent %llu received %llu, rtt %.0f us%s\n",
                 id, peer, (unsigned long long)c.datagrams_out, (unsigned long long)c.datagrams_in,
                 (unsigned long long)c.queued_bytes, (unsigned long long)c.in_flight_bytes,
                 (unsigned long long)c.retransmits, (unsigned long long)c.naks_sent,
                 (unsigned long long)c.naks_received, c.rtt_us, c.lost ? " LOST" : "");
  }
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"transport test node"};
  std::string dir, mode = "plain", key_file;
  uint32_t id = 0, nodes = 2;
  int messages = 300, big = 10;
  size_t big_bytes = 2 << 20;
  double loss = 0, dup = 0, reorder = 0;
  uint64_t seed = 1;
  int peer_timeout_ms = 2000, deadline_ms = 120000;
  std::vector<uint32_t> expect_lost;
  bool after_loss = false;
  int after_loss_messages = 20;
  app.add_option("--dir", dir)->required();
  app.add_option("--id", id)->required();
  app.add_option("--nodes", nodes)->required();
  app.add_option("--mode", mode);
  app.add_option("--key", key_file)->required();
  app.add_option("--messages", messages);
  app.add_option("--big", big);
  app.add_option("--big-bytes", big_bytes);
  app.add_option("--loss", loss);
  app.add_option("--dup", dup);
  app.add_option("--reorder", reorder);
  app.add_option("--seed", seed);
  app.add_option("--peer-timeout-ms", peer_timeout_ms);
  app.add_option("--deadline-ms", deadline_ms);
  int reassembly_timeout_ms = 30000;
  app.add_option("--reassembly-timeout-ms", reassembly_timeout_ms,
                 "how long a partial message whose links are all lost is kept");
  app.add_option("--expect-lost", expect_lost, "nodes the test will kill: not waited for");
  app.add_flag("--after-loss", after_loss,
               "kill test: after the first loss is reported, send --after-loss-messages more and "
               "wait only for those from the survivors");
  app.add_option("--after-loss-messages", after_loss_messages);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_pattern("[node " + std::to_string(id) + "] %l %v");
  const auto deadline = Clock::now() + std::chrono::milliseconds(deadline_ms);

  EndpointConfig config;
  config.node_id = id;
  config.key = load_cluster_key(key_file);
  config.peer_timeout = std::chrono::milliseconds(peer_timeout_ms);
  config.heartbeat_interval = std::chrono::milliseconds(std::max(50, peer_timeout_ms / 10));
  config.reassembly_timeout = std::chrono::milliseconds(reassembly_timeout_ms);
  config.faults.drop = loss;
  config.faults.duplicate = dup;
  config.faults.reorder = reorder;
  config.faults.seed = seed * 1000 + id;
  Endpoint endpoint(config);
  endpoint.add_job(1);
  write_file(dir + "/port." + std::to_string(id), std::to_string(endpoint.port()));

  std::vector<MeshMember> members;
  for (uint32_t n = 0; n < nodes; ++n) {
    const std::string path = dir + "/port." + std::to_string(n);
    while (!file_exists(path)) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "node %u: timed out waiting for %s (node %u never started)\n", id,
                     path.c_str(), n);
        return 2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    int port = 0;
    std::ifstream(path) >> port;
    members.push_back({n, "127.0.0.1", static_cast<uint16_t>(port), 0});
  }

  std::mutex mutex;
  std::map<uint32_t, std::set<uint64_t>> received;
  std::atomic<uint64_t> bad{0}, twice{0};
  std::atomic<uint64_t> losses{0};
  std::atomic<int64_t> loss_seen_ns{0};
  const std::set<uint32_t> lost_expected(expect_lost.begin(), expect_lost.end());
  MeshNode::Handlers handlers;
  handlers.on_message = [&](const Delivery& d) {
    const size_t size = message_size(d.origin, d.message_id, messages, big_bytes);
    if (d.bytes.size() != size || d.bytes != message_bytes(d.origin, d.message_id, size)) ++bad;
    std::lock_guard<std::mutex> lock(mutex);
    if (!received[d.origin].insert(d.message_id).second) ++twice;
  };
  handlers.on_loss = [&](uint32_t lost, const std::vector<uint32_t>& missed, uint64_t version) {
    ++losses;
    if (loss_seen_ns == 0) loss_seen_ns = Clock::now().time_since_epoch().count();
    std::printf("node %u: lost node %u, map version %llu, %zu nodes may have missed messages\n",
                id, lost, (unsigned long long)version, missed.size());
    std::fflush(stdout);
  };
  MeshNode mesh(endpoint, MeshMap::build(mode, members), handlers);
  endpoint.start([&mesh](Delivery&& d) { mesh.handle_delivery(std::move(d)); },
                 [&mesh](uint32_t peer) { mesh.handle_peer_lost(peer); });

  const uint64_t total = uint64_t(messages) + big;
  for (uint64_t m = 1; m <= total; ++m) {
    const size_t size = message_size(id, m, messages, big_bytes);
    auto bytes = std::make_shared<const std::vector<uint8_t>>(message_bytes(id, m, size));
    if (!mesh.publish(1, m, bytes, std::chrono::milliseconds(30000))) {
      std::fprintf(stderr, "node %u: publish of message %llu timed out (queues stayed full)\n",
                   id, (unsigned long long)m);
      print_links(endpoint, id);
      return 3;
    }
  }

  // Kill test: messages relayed through the killed node may be gone (the loss report says who
  // may have missed some); what must work is the repaired mesh: new messages reach everyone.
  uint64_t first = 1, last = total;
  if (after_loss) {
    while (losses == 0) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "node %u: timed out waiting for the killed node to be reported lost\n", id);
        return 6;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    first = 1000001;
    last = first + after_loss_messages - 1;
    for (uint64_t m = first; m <= last; ++m) {
      auto bytes = std::make_shared<const std::vector<uint8_t>>(message_bytes(id, m, 1000));
      mesh.publish(1, m, bytes, std::chrono::milliseconds(30000));
    }
  }
  const uint64_t expected = last - first + 1;

  // Wait for everyone's messages (but those of nodes the test kills), then for everyone done.
  auto missing = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    std::string what;
    for (uint32_t n = 0; n < nodes; ++n) {
      if (n == id || lost_expected.count(n)) continue;
      const auto& got = received[n];
      const uint64_t have = std::distance(got.lower_bound(first), got.upper_bound(last));
      if (have < expected)
        what += " node " + std::to_string(n) + ": " + std::to_string(have) + "/" + std::to_string(expected);
    }
    return what;
  };
  while (!missing().empty()) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "node %u: timed out waiting for messages from%s\n", id, missing().c_str());
      print_links(endpoint, id);
      return 4;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int64_t recovered_ms =
      loss_seen_ns ? (Clock::now().time_since_epoch().count() - loss_seen_ns) / 1000000 : -1;
  write_file(dir + "/done." + std::to_string(id), "1");
  for (uint32_t n = 0; n < nodes; ++n) {
    if (lost_expected.count(n)) continue;
    const std::string path = dir + "/done." + std::to_string(n);
    while (!file_exists(path)) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "node %u: timed out waiting for node %u to finish\n", id, n);
        return 5;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Let the last acks go out so no peer retransmits into a closed socket for long.
  for (int i = 0; i < 100 && !endpoint.idle(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));

  uint64_t retransmits = 0, naks = 0, injected = 0, duplicates = 0;
  for (const auto& [peer, c] : endpoint.counters()) {
    retransmits += c.retransmits;
    naks += c.naks_sent;
    injected += c.drops[static_cast<size_t>(DropReason::kInjected)];
    duplicates += c.duplicates;
  }
  std::ostringstream result;
  result << "bad=" << bad << " twice=" << twice << " retransmits=" << retransmits
         << " naks=" << naks << " injected_drops=" << injected
         << " duplicates_dropped=" << duplicates << " losses=" << losses
         << " recovered_after_loss_ms=" << recovered_ms << "\n";
  write_file(dir + "/result." + std::to_string(id), result.str());
  std::printf("node %u: %s", id, result.str().c_str());
  endpoint.stop();
  return bad == 0 && twice == 0 ? 0 : 1;
}
