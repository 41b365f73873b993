// One member of tools/bench/mesh_scale: a real Endpoint + MeshNode on a free loopback port that
// publishes synthetic gradient-sharing messages at a fixed rate and records when every other
// member's messages arrive. No training: the sizes are what the example MLP (235,146
// parameters) sends, sparse messages of 4 * count + 40 bytes with count 0.1%-1% of the
// parameters and now and then a bitmap message of params / 16 * 4 + 40 bytes.
//
// Handshake with the driver, all through files in --dir (every wait has a deadline and says
// what it waited for): port.<id> once bound; ready.<id> once it has joined the mesh; it then
// waits for `go` (the CLOCK_MONOTONIC start time, shared by every process on the machine),
// publishes, waits until it holds every message of every member not declared lost (or
// --drain-ms passed) and writes complete.<id>; it keeps relaying until `stop` appears, then
// writes deliveries.<id> and result.<id> and exits.
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "tools/bench/member_files.h"
#include "transport/mesh/mesh_node.h"
#include "transport/security/cluster_key.h"

namespace dtrain::bench {
namespace {

using transport::Delivery;
using transport::Endpoint;
using transport::MeshMap;
using transport::MeshMember;
using transport::MeshNode;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC on Linux: shared by all members

constexpr uint32_t kMagic = 0x4D534331;  // "MSC1": the stamp at the head of every payload

struct Stamp {
  uint32_t magic;
  uint32_t origin;
  uint64_t message_id;
  int64_t sent_ns;
};

struct Arrival {
  uint32_t origin;
  uint32_t message_id;
  int64_t sent_ns;
  int64_t received_ns;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// As before, each wait names the member: "member 3: timed out waiting for ...".
bool wait_for_file(const std::string& path, Clock::time_point deadline, uint32_t self,
                   const std::string& what, std::chrono::milliseconds poll) {
  return bench::wait_for_file(path, deadline, "member " + std::to_string(self), what, poll);
}

struct Options {
  std::string dir, mode = "plain", key_file;
  uint32_t id = 0, nodes = 2;
  int interval_ms = 500, duration_ms = 8000, bitmap_every = 16, drain_ms = 10000;
  int peer_timeout_ms = 10000, heartbeat_ms = 1000, deadline_ms = 180000;
  uint32_t params = 235146;
};

// Message k of a member. Every member publishes the same sequence of sizes (one in
// `bitmap_every` a bitmap, the rest sparse with a random count), rotated by its id: so all
// publish the same bytes, which keeps "bytes sent / bytes published" comparable between
// members, and their bitmaps do not all go out at once.
size_t message_size(const Options& o, uint32_t k, uint32_t count) {
  const uint32_t j = (k - 1 + o.id) % count;
  if (o.bitmap_every > 0 && (j + 1) % o.bitmap_every == 0) return (o.params + 15) / 16 * 4 + 40;
  std::mt19937_64 rng(j);
  const uint32_t lo = o.params / 1000, hi = o.params / 100;
  return 4 * (lo + rng() % (hi - lo + 1)) + 40;
}

// Everything the I/O thread records, read by the main thread.
struct Record {
  std::mutex mutex;
  std::vector<Arrival> arrivals;
  std::vector<std::vector<uint8_t>> seen;  // [origin][message id]
  std::vector<uint32_t> count;             // distinct messages per origin
  std::map<uint32_t, int64_t> lost_at_ns;  // first loss report per member
  uint64_t duplicates = 0, malformed = 0;

  // Members whose messages are still missing, as " 3: 40/50" pieces; empty when complete.
  std::string missing(const Options& o, uint32_t expected) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (uint32_t n = 0; n < o.nodes; ++n)
      if (n != o.id && !lost_at_ns.count(n) && count[n] < expected)
        out += " " + std::to_string(n) + ": " + std::to_string(count[n]) + "/" +
               std::to_string(expected);
    return out;
  }
};

int run(const Options& o) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.deadline_ms);
  const std::string self = std::to_string(o.id);
  transport::EndpointConfig config;
  config.node_id = o.id;
  config.key = transport::load_cluster_key(o.key_file);
  config.peer_timeout = std::chrono::milliseconds(o.peer_timeout_ms);
  config.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
  Endpoint endpoint(config);
  endpoint.add_job(1);
  write_file(o.dir + "/port." + self, std::to_string(endpoint.port()));

  std::vector<MeshMember> members;
  for (uint32_t n = 0; n < o.nodes; ++n) {
    const std::string path = o.dir + "/port." + std::to_string(n);
    if (!wait_for_file(path, deadline, o.id, "member " + std::to_string(n) + " never bound",
                       std::chrono::milliseconds(10)))
      return 2;
    int port = 0;
    std::ifstream(path) >> port;
    members.push_back({n, "127.0.0.1", static_cast<uint16_t>(port), 0});
  }

  const uint32_t expected = o.duration_ms / o.interval_ms;  // messages per member
  Record rec;
  rec.seen.assign(o.nodes, std::vector<uint8_t>(expected + 1, 0));
  rec.count.assign(o.nodes, 0);
  rec.arrivals.reserve(size_t(o.nodes) * expected + 16);
  MeshNode::Handlers handlers;
  handlers.on_message = [&](const Delivery& d) {
    const int64_t at = now_ns();  // first, before the lock: this is the delivery time
    Stamp s{};
    if (d.bytes.size() >= sizeof s) std::memcpy(&s, d.bytes.data(), sizeof s);
    std::lock_guard<std::mutex> lock(rec.mutex);
    if (s.magic != kMagic || s.origin != d.origin || s.origin >= o.nodes ||
        s.message_id != d.message_id || d.message_id == 0 || d.message_id > expected) {
      ++rec.malformed;
      return;
    }
    uint8_t& seen = rec.seen[s.origin][s.message_id];
    if (seen) {
      ++rec.duplicates;  // the endpoint promises exactly once: this would be a bug
      return;
    }
    seen = 1;
    ++rec.count[s.origin];
    rec.arrivals.push_back({s.origin, uint32_t(s.message_id), s.sent_ns, at});
  };
  handlers.on_loss = [&](uint32_t lost, const std::vector<uint32_t>&, uint64_t) {
    std::lock_guard<std::mutex> lock(rec.mutex);
    rec.lost_at_ns.emplace(lost, now_ns());
  };
  MeshNode mesh(endpoint, MeshMap::build(o.mode, members), handlers);
  endpoint.start([&mesh](Delivery&& d) { mesh.handle_delivery(std::move(d)); },
                 [&mesh](uint32_t peer) { mesh.handle_peer_lost(peer); });
  write_file(o.dir + "/ready." + self, "1");

  // The driver writes `go` 300 ms ahead of the start; slow polling keeps the idle cost it
  // measures meanwhile the endpoints' own.
  if (!wait_for_file(o.dir + "/go", deadline, o.id, "the driver's start signal",
                     std::chrono::milliseconds(50)))
    return 2;
  int64_t start_ns = 0;
  std::ifstream(o.dir + "/go") >> start_ns;

  // Members are spread over the interval, as asynchronous workers would be.
  const int64_t interval_ns = int64_t(o.interval_ms) * 1000000;
  const int64_t phase_ns = interval_ns * o.id / o.nodes;
  std::ostringstream published;
  uint64_t published_bytes = 0, publish_failures = 0;
  int64_t max_lag_ns = 0;
  for (uint32_t k = 1; k <= expected; ++k) {
    const int64_t due = start_ns + phase_ns + int64_t(k - 1) * interval_ns;
    std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(due)));
    auto bytes = std::make_shared<std::vector<uint8_t>>(message_size(o, k, expected), 0);
    Stamp s{kMagic, o.id, k, now_ns()};
    std::memcpy(bytes->data(), &s, sizeof s);
    max_lag_ns = std::max(max_lag_ns, s.sent_ns - due);  // > 0: this process was starved
    if (!mesh.publish(1, k, bytes, std::chrono::milliseconds(10000))) ++publish_failures;
    published_bytes += bytes->size();
    published << k << " " << s.sent_ns << " " << bytes->size() << "\n";
  }
  write_file(o.dir + "/published." + self, published.str());

  const auto drain_end = Clock::now() + std::chrono::milliseconds(o.drain_ms);
  std::string missing;
  while (!(missing = rec.missing(o, expected)).empty() && Clock::now() < drain_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_file(o.dir + "/complete." + self, missing.empty() ? "ok\n" : "missing" + missing + "\n");

  // Stay up (relaying for the others) until the driver has heard from everyone; polled slowly
  // so that 64 waiting members do not steal CPU from the ones still draining.
  const bool stopped = wait_for_file(o.dir + "/stop", deadline, o.id, "the driver's stop signal",
                                     std::chrono::milliseconds(50));
  for (int i = 0; i < 100 && !endpoint.idle(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));

  uint64_t bytes_out = 0, datagrams_out = 0, retransmits = 0;
  for (const auto& [peer, c] : endpoint.counters()) {
    if (peer == Endpoint::kUnknownSender) continue;
    bytes_out += c.bytes_out;
    datagrams_out += c.datagrams_out;
    retransmits += c.retransmits;
  }
  endpoint.stop();
  std::ostringstream arrivals, result;
  std::lock_guard<std::mutex> lock(rec.mutex);
  for (const Arrival& a : rec.arrivals)
    arrivals << a.origin << " " << a.message_id << " " << a.sent_ns << " " << a.received_ns << "\n";
  write_file(o.dir + "/deliveries." + self, arrivals.str());
  result << "published " << expected << "\npublished_bytes " << published_bytes << "\nbytes_out "
         << bytes_out << "\ndatagrams_out " << datagrams_out << "\nretransmits " << retransmits
         << "\nmax_publish_lag_ns " << max_lag_ns << "\npublish_failures " << publish_failures
         << "\nduplicates " << rec.duplicates << "\nmalformed " << rec.malformed << "\n";
  for (const auto& [lost, at] : rec.lost_at_ns) result << "lost " << lost << " " << at << "\n";
  write_file(o.dir + "/result." + self, result.str());
  return stopped && rec.duplicates == 0 && rec.malformed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) {
  // Dies with the driver: a killed driver must not leave 64 members behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dtrain::bench::Options o;
  CLI::App app{"one member of the mesh_scale benchmark (started by tools/bench/mesh_scale)"};
  app.add_option("--dir", o.dir, "directory shared with the driver and the other members")
      ->required();
  app.add_option("--id", o.id)->required();
  app.add_option("--nodes", o.nodes)->required()->check(CLI::Range(2u, 1024u));
  app.add_option("--mode", o.mode)->check(CLI::IsMember({"plain", "mesh"}));
  app.add_option("--key", o.key_file, "cluster key file (64 hex digits, mode 0600)")->required();
  app.add_option("--interval-ms", o.interval_ms, "one message every this often")
      ->check(CLI::Range(1, 60000));
  app.add_option("--duration-ms", o.duration_ms, "publishing time")->check(CLI::Range(1, 600000));
  app.add_option("--bitmap-every", o.bitmap_every, "one bitmap message in this many (0: none)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--params", o.params, "model parameters")->check(CLI::Range(1000u, 1u << 30));
  app.add_option("--drain-ms", o.drain_ms, "after publishing, wait this long for the rest");
  app.add_option("--peer-timeout-ms", o.peer_timeout_ms)->check(CLI::Range(100, 600000));
  app.add_option("--heartbeat-ms", o.heartbeat_ms)->check(CLI::Range(10, 60000));
  app.add_option("--deadline-ms", o.deadline_ms, "hard limit on this process's whole life");
  CLI11_PARSE(app, argc, argv);
  if (o.id >= o.nodes) {
    std::fprintf(stderr, "--id %u must be below --nodes %u\n", o.id, o.nodes);
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  spdlog::set_pattern("[member " + std::to_string(o.id) + "] %l %v");
  try {
    return dtrain::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "member %u: %s\n", o.id, e.what());
    return 2;
  }
}
