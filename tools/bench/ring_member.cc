// One host of tools/bench/ring_allreduce: a real DataChannel, MeshNode and MeshExchange as a
// daemon builds them for a job (daemon/node/node_agent.cc), summing --values floats over the
// --nodes members with mode allreduce's ring (MeshExchange::sum_over_nodes,
// daemon/node/mesh_ring.h), one round to warm up and then --repeats rounds, each timed. No
// training: the all-reduce alone, for its goodput against the ring's bound.
//
// Handshake with the driver, through files in --dir (every wait has a deadline and says what it
// waited for): port.<id> ("address port") once bound; it waits for every member's, joins the
// mesh and sums; then result.<id> (one line a round: "round R seconds S", from the barrier
// before it to this member's end); then done.<id>, and it
// waits for every member's done before leaving (a member gone early could leave a slower one
// without the last parts it needs). Every round's sums are checked: exit 1 if any differs.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "daemon/node/data_channel.h"
#include "daemon/node/mesh_exchange.h"
#include "daemon/node/mesh_port.h"
#include "tools/bench/member_files.h"
#include "transport/mesh/mesh_node.h"
#include "transport/security/cluster_key.h"

namespace dtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kJob = 0x52494E47;  // "RING"

struct Options {
  std::string dir, address = "127.0.0.1", key_file;
  uint32_t id = 0, nodes = 3;
  int64_t values = 1 << 20;
  int repeats = 10, lanes = 1, deadline_s = 600, mtu = 1500;
  size_t credit_kb = 512;
};

bool wait_for_file(const std::string& path, Clock::time_point deadline, const Options& o,
                   const std::string& what) {
  return bench::wait_for_file(path, deadline, "ring member " + std::to_string(o.id), what,
                              std::chrono::milliseconds(20));
}

// Every member's data channel, as it wrote it: false if one never came.
bool read_members(const Options& o, Clock::time_point deadline,
                  std::vector<transport::MeshMember>& where,
                  std::vector<daemon::JobMember>& members) {
  for (uint32_t n = 1; n <= o.nodes; ++n) {
    const std::string path = o.dir + "/port." + std::to_string(n);
    if (!wait_for_file(path, deadline, o, "member " + std::to_string(n) + " never bound"))
      return false;
    std::string address;
    int port = 0;
    std::ifstream(path) >> address >> port;
    where.push_back({n, address, uint16_t(port), 1});
    members.push_back({n, "host-" + std::to_string(n), 1});
  }
  return true;
}

// Member m's value k: multiples of 2^-12 below 2^7, so that every order of summing gives the
// same exact sum, and none a bf16 (the ring would send those as 2 bytes: ring_wire.h).
double fraction_of(int64_t k) { return double(1 + k % 5) / 4096.0; }
float value_of(uint32_t member, int64_t k) {
  return float(double(member) + double(k % 7) + fraction_of(k));
}

std::vector<float> exact_sums(int64_t values, uint32_t nodes) {
  std::vector<float> sums(static_cast<size_t>(values));
  const double members = double(nodes) * (nodes + 1) / 2;
  for (int64_t k = 0; k < values; ++k)
    sums[size_t(k)] = float(members + double(nodes) * (double(k % 7) + fraction_of(k)));
  return sums;
}

// Compared as gloo's baseline compares (torch.equal on a precomputed tensor): a host that ends
// its round first checks while the others still sum, on the same two cores, so a slower check
// would lengthen their rounds.
int64_t wrong_sums(const std::vector<float>& v, const std::vector<float>& exact) {
  if (std::memcmp(v.data(), exact.data(), v.size() * sizeof(float)) == 0) return 0;
  int64_t wrong = 0;
  for (size_t k = 0; k < v.size(); ++k) wrong += v[k] != exact[k];
  return wrong;
}

// The rounds: the first to warm up (untimed), then `repeats` timed ones. Each starts from a copy
// of this member's values after a barrier (a one-value sum), so that every member starts it
// together, as a training step's ring does; neither is timed (as in the gloo baseline).
bool sum_rounds(const Options& o, daemon::MeshExchange& exchange, std::string& result) {
  std::vector<float> mine(static_cast<size_t>(o.values)), v;
  for (int64_t k = 0; k < o.values; ++k) mine[size_t(k)] = value_of(o.id, k);
  const std::vector<float> exact = exact_sums(o.values, o.nodes);
  std::ostringstream lines;
  for (int r = 0; r <= o.repeats; ++r) {
    v = mine;
    float barrier = 1;
    exchange.sum_over_nodes(&barrier, 1, 2 * r);
    const auto begin = Clock::now();
    exchange.sum_over_nodes(v.data(), o.values, 2 * r + 1);
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    if (const int64_t wrong = wrong_sums(v, exact); wrong > 0) {
      std::fprintf(stderr, "ring member %u: round %d: %lld of %lld sums wrong\n", o.id, r,
                   static_cast<long long>(wrong), static_cast<long long>(o.values));
      return false;
    }
    if (r > 0) lines << "round " << r << " seconds " << seconds << "\n";
  }
  result = lines.str();
  return true;
}

// What the links did over the run, summed over the peers: "links datagrams_out D retransmits R
// naks_sent N credit_stalls C".
std::string link_counters(transport::Endpoint& endpoint) {
  transport::PeerCounters sum;
  for (const auto& [peer, c] : endpoint.counters())
    if (peer != transport::Endpoint::kUnknownSender) sum.add_lane(c);  // adds up alike
  std::ostringstream out;
  out << "links datagrams_out " << sum.datagrams_out << " retransmits " << sum.retransmits
      << " naks_sent " << sum.naks_sent << " credit_stalls " << sum.credit_stalls << "\n";
  return out.str();
}

transport::EndpointConfig endpoint_config(const Options& o) {
  transport::EndpointConfig c;
  c.node_id = o.id;
  c.bind_address = o.address;
  c.key = transport::load_cluster_key(o.key_file);
  c.lanes = size_t(o.lanes);
  c.max_datagram = transport::datagram_for_mtu(size_t(o.mtu));  // as a daemon's data.mtu
  c.credit_window = o.credit_kb << 10;
  // As a daemon sizes it (node_agent.cc).
  c.receive_buffer_bytes = std::max({c.receive_buffer_bytes, 2 * c.credit_window,
                                     c.max_credit_window});
  return c;
}

int run(const Options& o) {
  const auto deadline = Clock::now() + std::chrono::seconds(o.deadline_s);
  const std::string self = std::to_string(o.id);
  daemon::DataChannel channel(endpoint_config(o));
  write_file(o.dir + "/port." + self, o.address + " " + std::to_string(channel.endpoint().port()));
  std::vector<transport::MeshMember> where;
  std::vector<daemon::JobMember> members;
  if (!read_members(o, deadline, where, members)) return 1;
  daemon::MeshExchange exchange(kJob, o.id, members, std::chrono::seconds(o.deadline_s));
  transport::MeshNode::Handlers h;
  h.on_message = [&exchange](const transport::Delivery& d) { exchange.on_message(d); };
  h.on_loss = [&exchange](uint32_t lost, const std::vector<uint32_t>&, uint64_t) {
    exchange.on_loss(lost);
  };
  auto mesh = std::make_unique<transport::MeshNode>(channel.endpoint(),
                                                    transport::MeshMap::build("plain", where), h);
  daemon::JobMesh port(*mesh, kJob);
  exchange.set_mesh(&port);
  exchange.expect_sums_of(o.values);
  channel.attach(kJob, mesh.get());
  std::string result;
  const bool summed = sum_rounds(o, exchange, result);
  if (summed) write_file(o.dir + "/result." + self, result + link_counters(channel.endpoint()));
  write_file(o.dir + "/done." + self, summed ? "ok\n" : "failed\n");
  bool all_done = true;
  for (uint32_t n = 1; n <= o.nodes && all_done; ++n)
    all_done = wait_for_file(o.dir + "/done." + std::to_string(n), deadline, o,
                             "member " + std::to_string(n) + " to finish its rounds");
  channel.detach(kJob);
  mesh.reset();
  return summed && all_done ? 0 : 1;
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) {
  dtrain::bench::Options o;
  CLI::App app{"One host of tools/bench/ring_allreduce: mode allreduce's ring, timed"};
  app.add_option("--dir", o.dir, "directory shared with the driver and the other members")
      ->required();
  app.add_option("--id", o.id, "this member, 1 .. --nodes")->required();
  app.add_option("--nodes", o.nodes)->required()->check(CLI::Range(2u, 64u));
  app.add_option("--address", o.address, "address to bind the data channel to");
  app.add_option("--key", o.key_file, "cluster key file (dtraind keygen)")->required();
  app.add_option("--values", o.values, "floats summed a round")->check(CLI::Range(1, 1 << 28));
  app.add_option("--repeats", o.repeats, "timed rounds")->check(CLI::Range(1, 10000));
  app.add_option("--lanes", o.lanes, "data.lanes")->check(CLI::Range(1, 8));
  app.add_option("--mtu", o.mtu, "data.mtu")
      ->check(CLI::Range(1280, int(dtrain::transport::kLargestMtu)));
  app.add_option("--credit-kb", o.credit_kb, "data.credit_kb")->check(CLI::Range(64, 1 << 20));
  app.add_option("--deadline-s", o.deadline_s, "hard limit on this process's whole life")
      ->check(CLI::Range(10, 3600));
  CLI11_PARSE(app, argc, argv);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlives the driver
  if (o.id < 1 || o.id > o.nodes) {
    std::fprintf(stderr, "--id %u: must be 1 .. --nodes (%u)\n", o.id, o.nodes);
    return 2;
  }
  try {
    return dtrain::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring member %u: %s\n", o.id, e.what());
    return 1;
  }
}
