// mode allreduce's ring over real UDP endpoints on loopback (daemon/node/mesh_ring.h): for 2 to
// 7 nodes, each a DataChannel, MeshNode and MeshExchange as in a daemon, every node sums
// vectors of awkward sizes (one value, fewer than the nodes, one more, a large odd count) with
// sum_over_nodes (on 2 and 3 nodes also one whose steps go in parts); every node ends with the
// same bits, within float rounding of a sum in double.
// The parts travel point to point (transport::direct_job_id), so no node relays them: each node
// sends 2 (N - 1) / N of a vector, which the bytes it counts show.
// The epoch end's check that the replicas agree (replicas_agree) goes over the same ring: every
// node gives the same answer, whether the replicas are the same bits or one differs in one bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "core/collective/ring_allreduce.h"
#include "daemon/node/data_channel.h"
#include "daemon/node/mesh_exchange.h"
#include "daemon/node/mesh_port.h"
#include "transport/mesh/mesh_node.h"

using namespace dtrain;
using namespace dtrain::daemon;

namespace {

constexpr uint64_t kJob = 0x1234;

struct Node {
  std::unique_ptr<DataChannel> channel;
  std::unique_ptr<MeshExchange> exchange;
  std::unique_ptr<transport::MeshNode> mesh;
  std::unique_ptr<JobMesh> port;
};

std::vector<std::unique_ptr<Node>> start_nodes(int count) {
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<JobMember> members;
  std::vector<transport::MeshMember> where;
  for (int i = 0; i < count; ++i) {
    transport::EndpointConfig c;
    c.node_id = uint32_t(i + 1);
    c.key.fill(9);
    c.heartbeat_interval = std::chrono::milliseconds(100);
    c.peer_timeout = std::chrono::milliseconds(5000);
    auto node = std::make_unique<Node>();
    node->channel = std::make_unique<DataChannel>(c);
    members.push_back({c.node_id, "node-" + std::to_string(i + 1), 1});
    where.push_back({c.node_id, "127.0.0.1", node->channel->endpoint().port(), 1});
    nodes.push_back(std::move(node));
  }
  const transport::MeshMap map = transport::MeshMap::build("plain", where);
  for (int i = 0; i < count; ++i) {
    Node& n = *nodes[size_t(i)];
    n.exchange = std::make_unique<MeshExchange>(kJob, uint32_t(i + 1), members,
                                                std::chrono::milliseconds(20000));
    MeshExchange* ex = n.exchange.get();
    transport::MeshNode::Handlers h;
    h.on_message = [ex](const transport::Delivery& d) { ex->on_message(d); };
    h.on_loss = [ex](uint32_t lost, const std::vector<uint32_t>&, uint64_t) { ex->on_loss(lost); };
    n.mesh = std::make_unique<transport::MeshNode>(n.channel->endpoint(), map, h);
    n.port = std::make_unique<JobMesh>(*n.mesh, kJob);
    n.exchange->set_mesh(n.port.get());
    n.channel->attach(kJob, n.mesh.get());
  }
  return nodes;
}

void stop_nodes(std::vector<std::unique_ptr<Node>>& nodes) {
  for (auto& n : nodes) n->channel->detach(kJob);
  for (auto& n : nodes) n->mesh.reset();
  nodes.clear();
}

}  // namespace

TEST_CASE("ring all-reduce over loopback endpoints, 2 to 7 nodes, every node the same sum") {
  for (int count = 2; count <= 7; ++count) {
    auto nodes = start_nodes(count);
    // On 2 and 3 nodes a vector whose ring steps go in several parts (ring_allreduce.h).
    std::vector<int64_t> sizes = {1, count - 1, count + 1, 100003};
    if (count <= 3) sizes.push_back(2 * 3 * core::kRingPartValues + 7);
    std::vector<std::vector<std::vector<float>>> values(static_cast<size_t>(count));  // [node][round]
    std::vector<std::vector<std::vector<float>>> inputs(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      std::mt19937 rng(uint32_t(100 * count + i));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (int64_t n : sizes) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = u(rng);
        inputs[size_t(i)].push_back(v);
        values[size_t(i)].push_back(v);
      }
    }
    std::vector<uint64_t> bytes_before(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) bytes_before[size_t(i)] = nodes[size_t(i)]->exchange->bytes_sent();
    std::vector<std::thread> threads;
    for (int i = 0; i < count; ++i)
      threads.emplace_back([&, i] {
        for (size_t r = 0; r < sizes.size(); ++r) {
          std::vector<float>& v = values[size_t(i)][r];
          nodes[size_t(i)]->exchange->sum_over_nodes(v.data(), int64_t(v.size()), int64_t(r));
        }
      });
    for (auto& t : threads) t.join();
    for (size_t r = 0; r < sizes.size(); ++r) {
      INFO(count << " nodes, " << sizes[r] << " values");
      for (int i = 1; i < count; ++i)
        REQUIRE(std::memcmp(values[size_t(i)][r].data(), values[0][r].data(),
                            values[0][r].size() * sizeof(float)) == 0);
      for (int64_t k = 0; k < sizes[r]; ++k) {
        double sum = 0.0;
        for (int i = 0; i < count; ++i) sum += inputs[size_t(i)][r][size_t(k)];
        REQUIRE(std::fabs(values[0][r][size_t(k)] - sum) <= 1e-5 * (1.0 + std::fabs(sum)));
      }
    }
    // The large vectors dominate: each node sent about 2 (N - 1) / N of them (plus framing).
    double vector_bytes = 0;
    for (int64_t n : sizes) vector_bytes += 4.0 * double(n);
    const double bound = 2.0 * (count - 1) / count * vector_bytes;
    for (int i = 0; i < count; ++i) {
      const double sent = double(nodes[size_t(i)]->exchange->bytes_sent() - bytes_before[size_t(i)]);
      INFO("node " << i + 1 << " of " << count << " sent " << sent << " bytes, bound " << bound);
      CHECK(sent >= bound);
      CHECK(sent <= bound * 1.05 + 4096.0 * count);
    }
    stop_nodes(nodes);
  }
}

TEST_CASE("bf16 on the wire over loopback: half the bytes, the same bits on every node") {
  for (int count : {2, 3, 5}) {
    auto nodes = start_nodes(count);
    const int64_t n = 100003, exact_from = n - 2;
    std::vector<std::vector<float>> values(static_cast<size_t>(count));
    std::vector<double> sum(static_cast<size_t>(n), 0.0), magnitude(static_cast<size_t>(n), 0.0);
    for (int i = 0; i < count; ++i) {
      nodes[size_t(i)]->exchange->set_ring_wire({true, n - exact_from});
      std::mt19937 rng(uint32_t(7 * count + i));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      values[size_t(i)].resize(size_t(n));
      for (float& x : values[size_t(i)]) x = u(rng);
      values[size_t(i)][size_t(n - 2)] = float(300 + i);  // examples: not a bf16, kept exact
      for (int64_t k = 0; k < n; ++k) {
        sum[size_t(k)] += values[size_t(i)][size_t(k)];
        magnitude[size_t(k)] += std::fabs(values[size_t(i)][size_t(k)]);
      }
    }
    std::vector<uint64_t> bytes_before(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) bytes_before[size_t(i)] = nodes[size_t(i)]->exchange->bytes_sent();
    std::vector<std::thread> threads;
    for (int i = 0; i < count; ++i)
      threads.emplace_back([&, i] {
        nodes[size_t(i)]->exchange->sum_over_nodes(values[size_t(i)].data(), n, 0);
      });
    for (auto& t : threads) t.join();
    INFO(count << " nodes");
    for (int i = 1; i < count; ++i)
      REQUIRE(std::memcmp(values[size_t(i)].data(), values[0].data(), size_t(n) * 4) == 0);
    for (int64_t k = 0; k < exact_from; ++k)
      REQUIRE(std::fabs(values[0][size_t(k)] - sum[size_t(k)]) <=
              double(count) * std::ldexp(1.0, -8) * magnitude[size_t(k)]);
    CHECK(values[0][size_t(n - 2)] == float(sum[size_t(n - 2)]));
    // 2 bytes a value but for the two counts, which go as fp32.
    const double segment = 2.0 * double(n) / count;
    const double bound = 2.0 * (count - 1) * segment;
    for (int i = 0; i < count; ++i) {
      const double sent = double(nodes[size_t(i)]->exchange->bytes_sent() - bytes_before[size_t(i)]);
      INFO("node " << i + 1 << " of " << count << " sent " << sent << " bytes, bound " << bound);
      CHECK(sent >= bound);
      CHECK(sent <= bound + 4096.0 * count);
    }
    stop_nodes(nodes);
  }
}

TEST_CASE("replicas agree over the ring: every node answers alike, same bits or not, fp32 or "
          "bf16") {
  for (bool bf16 : {false, true}) {
    for (int count : {2, 3, 5}) {
      auto nodes = start_nodes(count);
      if (bf16)
        for (auto& n : nodes) n->exchange->set_ring_wire({true, 2});
      const int64_t n = 1001;
      std::vector<float> same(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) same[size_t(k)] = 0.001f * float(k) + 0.1f;
      // Epoch 0: every replica the same; epoch 1: the last node's differs in one value's last bit.
      for (int64_t epoch : {0, 1}) {
        std::vector<std::vector<float>> replicas(static_cast<size_t>(count), same);
        if (epoch == 1) {
          uint32_t bits;
          std::memcpy(&bits, &replicas.back()[500], 4);
          bits ^= 1u;
          std::memcpy(&replicas.back()[500], &bits, 4);
        }
        std::vector<int> answers(static_cast<size_t>(count), -1);
        std::vector<std::thread> threads;
        for (int i = 0; i < count; ++i)
          threads.emplace_back([&, i] {
            answers[size_t(i)] =
                nodes[size_t(i)]->exchange->replicas_agree(replicas[size_t(i)].data(), n, epoch);
          });
        for (auto& t : threads) t.join();
        INFO(count << " nodes, epoch " << epoch << (bf16 ? ", bf16 on the wire" : ", fp32"));
        for (int i = 0; i < count; ++i) CHECK(answers[size_t(i)] == (epoch == 0 ? 1 : 0));
      }
      stop_nodes(nodes);
    }
  }
}
