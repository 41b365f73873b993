// MeshExchange over a fake mesh (daemon/node/mesh_port.h): several nodes' exchanges in one
// process, connected directly, each driven from its own thread as the daemon's job runners
// would. Covers parameter averaging (with and without a lost node), the epoch-end barrier and
// the tau average, the takeover of a lost node's remaining minibatches, a restarted node
// rejoining with a live node's parameters, and a malformed payload failing the epoch end.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <thread>
#include <tuple>

#include "core/codec/codec_engine.h"
#include "core/collective/ring_allreduce.h"
#include "core/codec/reference_codec.h"
#include "core/train/local_steps.h"
#include "core/util/error.h"
#include "daemon/node/mesh_exchange.h"
#include "daemon/protocol/control_messages.h"
#include "tests/unit/fake_mesh.h"

using namespace dtrain;
using namespace dtrain::daemon;
using namespace dtrain::testing;
using std::chrono::milliseconds;

namespace {

constexpr int64_t kParams = 64;

// A sparse update of worker `origin` at (epoch, batch).
core::SharedMessage update(uint32_t origin, uint64_t id, int64_t epoch, int64_t batch) {
  std::vector<float> u(kParams, 0.f), r(kParams, 0.f);
  u[size_t(id % kParams)] = 1.f;
  core::EncodedMessage m = core::reference_encode(r.data(), u.data(), kParams, 0.5f, 0.f, nullptr);
  m.origin = origin;
  m.id = id;
  m.epoch = epoch;
  m.batch = batch;
  return std::make_shared<const core::EncodedMessage>(std::move(m));
}

// The message of the UserError `call` throws (what a node would report), or what went wrong.
std::string user_error_of(const std::function<void()>& call, const std::string& if_none) {
  try {
    call();
  } catch (const core::UserError& e) {
    return e.what();
  }
  return "nothing was thrown: " + if_none;
}

// A node's wait for node-1's choice of training.sync, on a thread of its own as a job runner's.
std::future<core::SyncChoice> follow_choice(MeshExchange& ex, milliseconds deadline) {
  return std::async(std::launch::async,
                    [&ex, deadline] { return ex.sync_election().await(1u, deadline); });
}

// Node `id`'s job attaches to the mesh 400 ms from now (cut until then), and follows the choice.
std::future<core::SyncChoice> attach_late(FakeMesh& mesh, MeshExchange& ex, uint32_t id) {
  mesh.cut(id);
  return std::async(std::launch::async, [&mesh, &ex, id] {
    std::this_thread::sleep_for(milliseconds(400));
    mesh.join(id, ex);
    return ex.sync_election().await(1u, milliseconds(10000));
  });
}

}  // namespace

TEST_CASE("parameter averaging gives every node the same mean", "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  std::vector<std::vector<float>> params(3, std::vector<float>(5));
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 5; ++i) params[n][i] = float(n * 10 + i);
  std::vector<std::thread> threads;
  for (int n = 0; n < 3; ++n)
    threads.emplace_back([&, n] { ex[n]->average_parameters(params[n].data(), 5, 0); });
  for (auto& t : threads) t.join();
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 5; ++i) CHECK(params[n][i] == float(10 + i));  // mean of i, 10+i, 20+i

  SECTION("a lost node is not waited for, and left out of the mean") {
    mesh.cut(3);
    ex[0]->on_loss(3);
    ex[1]->on_loss(3);
    const auto start = std::chrono::steady_clock::now();
    std::thread other([&] { ex[1]->average_parameters(params[1].data(), 5, 1); });
    ex[0]->average_parameters(params[0].data(), 5, 1);
    other.join();
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
    CHECK(params[0] == params[1]);
  }
}

TEST_CASE("the second barrier averages batch-norm statistics over every live node's workers",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  // Node n has n + 1 workers whose states sum to (n + 1) * (values around 0.1 * n).
  std::vector<core::NodeExchange::StateSum> local(3);
  for (int n = 0; n < 3; ++n) {
    local[n].workers = n + 1;
    for (int i = 0; i < 4; ++i) local[n].sum.push_back((n + 1) * (0.1 * n + 0.01 * i + 1.0 / 3));
  }
  std::vector<std::vector<float>> mean(3);
  std::vector<std::thread> threads;
  for (int n = 0; n < 3; ++n)
    threads.emplace_back([&, n] {
      mean[n] = n == 2 ? ex[n]->end_averaging_epoch(0, local[n]) : ex[n]->end_takeover(0, local[n]);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    double sum = 0;
    for (int n = 0; n < 3; ++n) sum += local[n].sum[i];
    CHECK(mean[0][i] == Approx(sum / 6).epsilon(1e-6));
  }
  CHECK(mean[0] == mean[1]);  // bit for bit: summed in member order on every node
  CHECK(mean[0] == mean[2]);
  // A model without batch norm has no state: nothing is averaged.
  threads.clear();
  for (int n = 0; n < 3; ++n) threads.emplace_back([&, n] { mean[n] = ex[n]->end_takeover(1, {}); });
  for (auto& t : threads) t.join();
  for (int n = 0; n < 3; ++n) CHECK(mean[n].empty());
}

TEST_CASE("an epoch ends once every live node's updates are in the bus", "[mesh_exchange]") {
  FakeMesh mesh;
  MeshExchange a(1, 1, members(2), milliseconds(5000)), b(1, 2, members(2), milliseconds(5000));
  mesh.join(1, a);
  mesh.join(2, b);
  core::MessageBus bus_a(1), bus_b(1);
  a.attach(bus_a, kParams);
  b.attach(bus_b, kParams);
  for (uint64_t i = 0; i < 3; ++i) a.publish(update(0, i, 0, int64_t(i)));
  for (uint64_t i = 0; i < 2; ++i) b.publish(update(1, 100 + i, 0, int64_t(i)));
  auto end_b = std::async(std::launch::async, [&] { return b.end_epoch(0, 0.25, 1); });
  const auto end_a = a.end_epoch(0, 0.5, 1);
  const auto eb = end_b.get();
  CHECK(end_a.tau_sum == 0.75);
  CHECK(eb.tau_sum == 0.75);
  CHECK(end_a.workers == 2);
  CHECK(end_a.takeover.empty());
  CHECK(bus_a.take(0).size() == 2);  // b's two
  CHECK(bus_b.take(0).size() == 3);  // a's three
  // An update tagged with the next epoch waits until this node has applied the current one.
  b.publish(update(1, 200, 1, 0));
  CHECK(bus_a.take(0).empty());
  a.epoch_applied(0, nullptr, 0, nullptr, 0, 0.5f, {});
  CHECK(bus_a.take(0).size() == 1);
  a.detach();
  b.detach();
}

TEST_CASE("a lost node's remaining minibatches are taken over from its last position",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex;
  std::vector<std::unique_ptr<core::MessageBus>> bus;
  for (uint32_t id = 1; id <= 3; ++id) {
    ex.push_back(std::make_unique<MeshExchange>(1, id, members(3), milliseconds(5000)));
    bus.push_back(std::make_unique<core::MessageBus>(1));
    mesh.join(id, *ex.back());
    ex.back()->attach(*bus.back(), kParams);
  }
  for (int64_t batch = 0; batch < 5; ++batch) ex[2]->publish(update(2, uint64_t(batch), 0, batch));
  mesh.cut(3);  // node-3 dies after its fifth minibatch
  ex[0]->on_loss(3);
  ex[1]->on_loss(3);
  auto end_b = std::async(std::launch::async, [&] { return ex[1]->end_epoch(0, 0.5, 1); });
  const auto ea = ex[0]->end_epoch(0, 0.5, 1);
  const auto eb = end_b.get();
  for (const auto& e : {ea, eb}) {
    REQUIRE(e.takeover.size() == 1);
    CHECK(e.takeover[0].shard == 2);
    CHECK(e.takeover[0].from_batch == 5);
    CHECK(e.lost == std::vector<std::string>{"node-3"});
    CHECK(e.live_workers == 2);
    CHECK(e.workers == 2);
  }
  CHECK(ea.live_first_worker == 0);
  CHECK(eb.live_first_worker == 1);
  CHECK(ex[0]->evaluation_shard().count == 2);
  for (auto& e : ex) e->detach();
}

namespace {

// The ids of the updates of worker `origin` in `bus` (node-side consumer 0), in order.
std::vector<uint64_t> ids_from(core::MessageBus& bus, uint32_t origin) {
  std::vector<uint64_t> ids;
  for (const auto& d : bus.take(0))
    if (d.message->origin == origin) ids.push_back(d.message->id);
  return ids;
}

// node-3 publishes `updates` updates of epoch 1 (minibatches 0, 1, ...), of which node-2 gets
// only the first `reach_node2` (the rest were in flight when it died), then is lost. Returns
// both survivors' epoch ends.
std::pair<core::NodeExchange::EpochEnd, core::NodeExchange::EpochEnd> lost_in_flight(
    int updates, int reach_node2, std::vector<std::unique_ptr<core::MessageBus>>& bus) {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex;
  for (uint32_t id = 1; id <= 3; ++id) {
    ex.push_back(std::make_unique<MeshExchange>(1, id, members(3), milliseconds(5000)));
    bus.push_back(std::make_unique<core::MessageBus>(1));
    mesh.join(id, *ex.back());
    ex.back()->attach(*bus.back(), kParams);
  }
  for (int64_t batch = 0; batch < updates; ++batch) {
    if (batch == reach_node2) mesh.block(3, 2);
    ex[2]->publish(update(2, uint64_t(batch), 0, batch));
  }
  mesh.cut(3);
  ex[0]->on_loss(3);
  ex[1]->on_loss(3);
  auto end_b = std::async(std::launch::async, [&] { return ex[1]->end_epoch(0, 0.5, 1); });
  const auto ea = ex[0]->end_epoch(0, 0.5, 1);
  const auto eb = end_b.get();
  for (auto& e : ex) e->detach();
  return {ea, eb};
}

}  // namespace

// The last updates of a node that died were in flight: one survivor received them, the other
// did not. The one that did forwards them, so both apply the same updates and deal out the same
// minibatches (none done twice, none by nobody).
TEST_CASE("a lost node's updates that one survivor missed are forwarded by another",
          "[mesh_exchange]") {
  std::vector<std::unique_ptr<core::MessageBus>> bus;
  const auto [ea, eb] = lost_in_flight(5, 3, bus);  // minibatches 3 and 4 reach node-1 only
  for (const auto& e : {ea, eb}) {
    REQUIRE(e.takeover.size() == 1);
    CHECK(e.takeover[0].shard == 2);
    CHECK(e.takeover[0].from_batch == 5);  // after the last update any survivor applied
    CHECK(e.missed_batches == 0);
  }
  const std::vector<uint64_t> all{0, 1, 2, 3, 4};
  CHECK(ids_from(*bus[0], 2) == all);
  CHECK(ids_from(*bus[1], 2) == all);
}

// More in flight than a survivor keeps (kMaxForwardedUpdates): none is forwarded, the takeover
// still starts at the same minibatch on both, and the one that lacks them counts them.
TEST_CASE("a survivor that lacks more of a lost node's updates than are kept says how many",
          "[mesh_exchange]") {
  std::vector<std::unique_ptr<core::MessageBus>> bus;
  const auto [ea, eb] = lost_in_flight(12, 2, bus);  // minibatches 2 to 11 reach node-1 only
  for (const auto& e : {ea, eb}) {
    REQUIRE(e.takeover.size() == 1);
    CHECK(e.takeover[0].from_batch == 12);
  }
  CHECK(ea.missed_batches == 0);
  CHECK(eb.missed_batches == 10);
  CHECK(ids_from(*bus[1], 2) == std::vector<uint64_t>{0, 1});
}

// The survivors announced the end of their shards before the lost node sent its last updates
// (async sync, or a longer shard): every survivor heard those itself, and none is done again.
TEST_CASE("a lost node's updates that came after the survivors announced are not done again",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  std::vector<std::unique_ptr<core::MessageBus>> bus;
  for (auto& e : ex) {
    bus.push_back(std::make_unique<core::MessageBus>(1));
    e->attach(*bus.back(), kParams);
  }
  for (int64_t batch = 0; batch < 2; ++batch) ex[2]->publish(update(2, uint64_t(batch), 0, batch));
  auto end_a = std::async(std::launch::async, [&] { return ex[0]->end_epoch(0, 0.5, 1); });
  auto end_b = std::async(std::launch::async, [&] { return ex[1]->end_epoch(0, 0.5, 1); });
  REQUIRE(mesh.wait_published(1, 1, milliseconds(5000)));  // both announced their epoch's end
  REQUIRE(mesh.wait_published(2, 1, milliseconds(5000)));
  for (int64_t batch = 2; batch < 6; ++batch) ex[2]->publish(update(2, uint64_t(batch), 0, batch));
  mesh.cut(3);
  ex[0]->on_loss(3);
  ex[1]->on_loss(3);
  for (const auto& e : {end_a.get(), end_b.get()}) {
    REQUIRE(e.takeover.size() == 1);
    CHECK(e.takeover[0].from_batch == 6);
    CHECK(e.missed_batches == 0);
  }
  for (auto& e : ex) e->detach();
}

TEST_CASE("a restarted node rejoins with a live node's parameters", "[mesh_exchange]") {
  FakeMesh mesh;
  MeshExchange a(1, 1, members(2), milliseconds(5000));
  MeshExchange b(1, 2, members(2), milliseconds(5000));  // node-2's new process
  mesh.join(1, a);
  mesh.join(2, b);
  a.set_epochs(5);
  b.set_epochs(5);
  core::MessageBus bus_a(1), bus_b(1);
  a.attach(bus_a, kParams);
  b.set_rejoining({});
  b.attach(bus_b, kParams);
  a.on_rejoin(2);  // the controller told node-1 that node-2 is back
  CHECK(mesh.added == std::vector<uint32_t>{2});
  std::string resumed_from;
  b.on_resumed = [&](int64_t, const std::string& from) { resumed_from = from; };
  auto resumed = std::async(std::launch::async, [&] {
    core::NodeExchange::Resume r;
    const bool rejoined = b.resume(r);
    return std::make_pair(rejoined, r);
  });
  // node-1 ends epoch 1 without waiting for node-2, admits it, and sends it its replica.
  const auto end = a.end_epoch(0, 0.5, 1);
  CHECK(end.workers == 1);
  a.end_takeover(0, {});
  std::vector<float> params(kParams, 0.375f), state(3, 2.f), momentum(kParams, -0.25f);
  a.set_outer_momentum(momentum);  // local steps: the outer optimizer's state travels too
  a.epoch_applied(0, params.data(), kParams, state.data(), 3, 0.5f, {});
  const auto [rejoined, r] = resumed.get();
  CHECK(rejoined);
  CHECK(r.next_epoch == 1);
  CHECK(r.tau == 0.5f);
  CHECK(r.params == params);
  CHECK(r.state == state);
  CHECK(r.outer_momentum == momentum);
  CHECK(resumed_from == "node-1");
  // From now on node-1 waits for node-2 again.
  auto end_a = std::async(std::launch::async, [&] { return a.end_epoch(1, 0.5, 1); });
  CHECK(end_a.wait_for(milliseconds(200)) == std::future_status::timeout);
  b.end_epoch(1, 0.5, 1);
  CHECK(end_a.get().workers == 2);
  a.detach();
  b.detach();
}

TEST_CASE("a malformed payload from a peer fails the epoch end, naming it", "[mesh_exchange]") {
  FakeMesh mesh;
  MeshExchange a(1, 1, members(2), milliseconds(5000)), b(1, 2, members(2), milliseconds(5000));
  mesh.join(1, a);
  mesh.join(2, b);
  core::MessageBus bus(1);
  a.attach(bus, kParams);
  mesh.deliver(2, 9, std::vector<uint8_t>(40, 0x5A));
  try {
    a.end_epoch(0, 0.5, 1);
    FAIL("the epoch ended");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("not a valid MeshPayload") != std::string::npos);
    CHECK(std::string(e.what()).find("node-2") != std::string::npos);
  }
  a.detach();
}

// Nodes 1 and 2 of a job with one vacant slot, on the mesh and attached; node-3, which will
// take the slot, built (its view: itself in the slot's place) but not on the mesh yet.
struct VacantSlotJob {
  const uint32_t slot = daemon::kFirstSlotId;
  FakeMesh mesh;
  MeshExchange a{1, 1, with_slot(), milliseconds(5000)}, b{1, 2, with_slot(), milliseconds(5000)};
  MeshExchange c{1, 3, with_newcomer(), milliseconds(5000)};
  core::MessageBus bus_a{1}, bus_b{1}, bus_c{1};

  VacantSlotJob() {
    for (auto [id, ex, bus] : {std::tuple{1u, &a, &bus_a}, {2u, &b, &bus_b}}) {
      mesh.join(id, *ex);
      ex->set_epochs(5);
      ex->set_vacant({slot});
      ex->attach(*bus, kParams);
    }
  }
  static std::vector<JobMember> with_slot() {
    std::vector<JobMember> m = members(2);
    m.push_back({daemon::kFirstSlotId, "slot-1", 1});
    return m;
  }
  static std::vector<JobMember> with_newcomer() {
    std::vector<JobMember> m = members(2);
    m.push_back({3, "node-3", 1});
    return m;
  }
  // node-3 on the mesh, waiting to be admitted.
  void newcomer_arrives() {
    mesh.join(3, c);
    c.set_epochs(5);
    c.set_rejoining({});
    c.attach(bus_c, kParams);
  }
};

TEST_CASE("a vacant slot's shard is taken over until a node joins it, then it is waited for",
          "[mesh_exchange]") {
  VacantSlotJob job;
  auto& [slot, mesh, a, b, c, bus_a, bus_b, bus_c] = job;
  auto end_b = std::async(std::launch::async, [&] { return b.end_epoch(0, 0.5, 1); });
  const auto first = a.end_epoch(0, 0.5, 1);
  end_b.get();
  REQUIRE(first.takeover.size() == 1);  // the slot's whole shard, every epoch
  CHECK(first.takeover[0].shard == 2);
  CHECK(first.takeover[0].from_batch == 0);
  CHECK(first.lost.empty());  // a vacant slot is nobody lost
  // node-3 takes the slot: both live nodes learn where it is and admit it at this epoch end.
  job.newcomer_arrives();
  for (MeshExchange* ex : {&a, &b}) ex->on_join(slot, 3, "node-3", {3, "127.0.0.1", 9, 0});
  CHECK(mesh.added == std::vector<uint32_t>{3, 3});
  CHECK(admit_at_first_epoch_end(a, b, c, kParams) == 1);  // node-1 sends the snapshot
  // Epoch 2: nobody takes the slot's shard over, and the live nodes wait for node-3.
  auto end_a = std::async(std::launch::async, [&] { return a.end_epoch(1, 0.5, 1); });
  end_b = std::async(std::launch::async, [&] { return b.end_epoch(1, 0.5, 1); });
  CHECK(end_a.wait_for(milliseconds(200)) == std::future_status::timeout);
  c.end_epoch(1, 0.5, 1);
  const auto second = end_a.get();
  end_b.get();
  CHECK(second.takeover.empty());
  CHECK(second.workers == 3);
  for (MeshExchange* ex : {&a, &b, &c}) ex->detach();
}

TEST_CASE("a joiner one live node has not heard of yet is admitted an epoch later, by all",
          "[mesh_exchange]") {
  // The controller's news of a joiner reaches the live nodes at different moments; a node
  // without it has no route to the joiner. Admitted by the nodes that heard of it, the joiner
  // would miss that node's parameters and updates: nobody admits it until everyone has heard.
  VacantSlotJob job;
  auto& [slot, mesh, a, b, c, bus_a, bus_b, bus_c] = job;
  job.newcomer_arrives();
  auto resumed = std::async(std::launch::async, [&] {
    core::NodeExchange::Resume r;
    return c.resume(r) ? r.next_epoch : -1;
  });
  std::vector<float> params(kParams, 0.25f);
  // end_epoch, end_takeover and epoch_applied of epoch e on both live nodes at once.
  auto epoch_end = [&](int64_t e) {
    auto end_b = std::async(std::launch::async, [&] {
      b.end_epoch(e, 0.5, 1);
      b.end_takeover(e, {});
      b.epoch_applied(e, params.data(), kParams, nullptr, 0, 0.5f, {});
    });
    a.end_epoch(e, 0.5, 1);
    a.end_takeover(e, {});
    a.epoch_applied(e, params.data(), kParams, nullptr, 0, 0.5f, {});
    end_b.get();
  };
  a.on_join(slot, 3, "node-3", {3, "127.0.0.1", 9, 0});  // node-1 has heard; node-2 not yet
  epoch_end(0);
  CHECK(resumed.wait_for(milliseconds(200)) == std::future_status::timeout);  // nobody admitted it
  b.on_join(slot, 3, "node-3", {3, "127.0.0.1", 9, 0});
  epoch_end(1);
  CHECK(resumed.get() == 2);  // admitted by both at the end of epoch 2 (1-based)
  for (MeshExchange* ex : {&a, &b, &c}) ex->detach();
}

TEST_CASE("a joiner withdrawn before it is admitted is not waited for", "[mesh_exchange]") {
  FakeMesh mesh;
  MeshExchange a(1, 1, members(2), milliseconds(2000));
  mesh.join(1, a);
  a.set_epochs(5);
  core::MessageBus bus(1);
  a.attach(bus, kParams);
  a.on_rejoin(2);     // node-2 is back, says the controller ...
  a.on_withdrawn(2);  // ... and then that it failed before it was admitted
  a.end_epoch(0, 0.5, 1);
  a.end_takeover(0, {});  // alone: node-2 is not admitted
  const auto next = a.end_epoch(1, 0.5, 1);  // not waited for (the deadline would throw)
  CHECK(next.lost == std::vector<std::string>{"node-2"});
  a.detach();
}

TEST_CASE("a stall report names the node that relays the one waited for", "[mesh_exchange]") {
  FakeMesh mesh;
  mesh.relays = {{2, 3}};  // node-2's messages reach node-1 through node-3 (the plain root)
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  std::vector<std::string> lines;
  ex[0]->on_stall = [&](const std::string& line) { lines.push_back(line); };
  ex[0]->step_stalled(milliseconds(2000), 0, 184, {1});  // worker 1 is node-2's
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("for node-2 (nothing heard from it in this job)") != std::string::npos);
  CHECK(lines[0].find("relayed by node-3 (nothing heard from it in this job)") !=
        std::string::npos);

  SECTION("a node heard directly names no relay") {
    ex[0]->step_stalled(milliseconds(2000), 0, 184, {2});  // node-3's worker
    REQUIRE(lines.size() == 2);
    CHECK(lines[1].find("for node-3") != std::string::npos);
    CHECK(lines[1].find("relayed by") == std::string::npos);
  }
}

TEST_CASE("every node gets the same pseudo-gradients of a round, in member order",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto mine = [](int n) {
    core::NodeExchange::PseudoGradient p;
    p.workers = 1;
    p.messages = {*update(uint32_t(n), uint64_t(n + 1), 0, -1)};
    return p;
  };
  std::vector<std::vector<core::NodeExchange::PseudoGradient>> got(3);
  std::vector<std::thread> threads;
  for (int n = 0; n < 3; ++n)
    threads.emplace_back([&, n] { got[n] = ex[n]->share_pseudo_gradient(0, mine(n)); });
  for (auto& t : threads) t.join();
  for (int n = 0; n < 3; ++n) {
    REQUIRE(got[n].size() == 3);
    for (int k = 0; k < 3; ++k) CHECK(got[n][k].messages[0].words == mine(k).messages[0].words);
  }

  SECTION("a lost node is not waited for, and a stale round is not kept") {
    mesh.cut(3);
    ex[0]->on_loss(3);
    ex[1]->on_loss(3);
    const auto start = std::chrono::steady_clock::now();
    std::thread other([&] { got[1] = ex[1]->share_pseudo_gradient(2, mine(1)); });
    got[0] = ex[0]->share_pseudo_gradient(2, mine(0));
    other.join();
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
    REQUIRE(got[0].size() == 2);
    REQUIRE(got[1].size() == 2);
    CHECK(got[0][1].messages[0].words == got[1][1].messages[0].words);
  }
}

TEST_CASE("rounds of local steps leave every node with the same global parameters",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  core::TrainingSpec spec;
  spec.sync.mode = "local";
  spec.sync.local.density = 0.25;  // most of each pseudo-gradient waits in the residual
  const std::vector<float> start(kParams, 0.5f);
  std::vector<std::unique_ptr<core::LocalSteps>> nodes;
  for (uint32_t n = 0; n < 3; ++n)
    nodes.push_back(std::make_unique<core::LocalSteps>(
        spec, core::CodecEngine::get("reference"), start.data(), kParams, n));
  std::vector<std::vector<float>> replica(3, start);
  for (int64_t round = 0; round < 4; ++round) {
    // Different inner steps on every node.
    for (int n = 0; n < 3; ++n)
      for (int64_t i = 0; i < kParams; ++i)
        replica[n][size_t(i)] -= 0.01f * float((i * (n + 2) + round) % 7) - 0.02f;
    std::vector<std::thread> threads;
    for (int n = 0; n < 3; ++n)
      threads.emplace_back([&, n] { nodes[n]->round(replica[n].data(), 1, ex[n].get(), 2 * round); });
    for (auto& t : threads) t.join();
    INFO("round " << round);
    REQUIRE(replica[0] == replica[1]);  // bit for bit
    REQUIRE(replica[0] == replica[2]);
    REQUIRE(nodes[0]->outer().momentum() == nodes[2]->outer().momentum());
    REQUIRE(replica[0] != start);
  }

  SECTION("overlapped rounds keep the global parameters equal; a last round joins the replicas") {
    for (int64_t round = 4; round < 8; ++round) {
      for (int n = 0; n < 3; ++n)
        for (int64_t i = 0; i < kParams; ++i) replica[n][size_t(i)] -= 0.001f * float(n + 1);
      const bool last = round == 7;
      std::vector<std::thread> threads;
      for (int n = 0; n < 3; ++n)
        threads.emplace_back([&, n] {
          if (last)
            nodes[n]->round(replica[n].data(), 1, ex[n].get(), 2 * round);
          else
            nodes[n]->send_round(replica[n].data(), 1, ex[n].get(), 2 * round);
        });
      for (auto& t : threads) t.join();
      INFO("overlapped round " << round);
      REQUIRE(nodes[0]->global() == nodes[1]->global());
      REQUIRE(nodes[0]->global() == nodes[2]->global());
      if (!last) REQUIRE(replica[0] != replica[1]);  // each goes on from its own steps
    }
    REQUIRE(replica[0] == replica[1]);
    REQUIRE(replica[0] == replica[2]);
  }
}

TEST_CASE("pseudo-gradients: a late starter keeps the newest rounds; strangers and odd ids are dropped",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto heard = [&](MeshExchange& to, uint32_t origin, int64_t round, int32_t workers) {
    transport::Delivery d;
    d.job_id = 1;
    d.origin = d.from = origin;
    d.bytes = *pseudo_gradient_payload(round, workers, {*update(origin, 1, 0, -1)});
    to.on_message(d);
  };
  // node-1 (resumed or rejoining) hears 20 old rounds of the others before its first, round 300.
  for (int64_t round = 260; round < 300; round += 2) {
    heard(*ex[0], 2, round, 1);
    heard(*ex[0], 3, round, 1);
  }
  heard(*ex[0], 2, 300, 1000);  // the weight the sender claims is not believed
  heard(*ex[0], 3, 300, 1);
  heard(*ex[0], 99, 300, 1);    // not a member
  heard(*ex[0], 2, 301, 1);     // not a round id
  core::NodeExchange::PseudoGradient mine;
  mine.workers = 1;
  mine.messages = {*update(1, 1, 0, -1)};
  const auto start = std::chrono::steady_clock::now();
  const auto parts = ex[0]->share_pseudo_gradient(300, mine);
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));  // nothing waited for
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].workers == 1);  // node-2's, as the job has it
}

TEST_CASE("training.sync: auto: the chooser measures every node, and all train its way",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto second = follow_choice(*ex[1], milliseconds(5000));
  auto third = follow_choice(*ex[2], milliseconds(5000));
  // Each probe is answered by both followers (their threads answer while they wait).
  const core::LinkFigures link =
      ex[0]->sync_election().measure(milliseconds(5000), 100000, 10000);
  CHECK(link.rtt_s > 0);
  CHECK(link.rtt_s < 2.0);
  CHECK(link.goodput_bytes_s > 0);
  CHECK(link.step_goodput_bytes_s > 0);
  ex[0]->sync_election().announce({20, "RTT 50 ms: local steps, H = 20"}, milliseconds(5000));
  const core::SyncChoice b = second.get(), c = third.get();
  CHECK(b.local_steps == 20);
  CHECK(c.local_steps == 20);
  CHECK(c.reason == "RTT 50 ms: local steps, H = 20");

  SECTION("a node restarted later hears the choice from the live nodes") {
    mesh.cut(3);
    ex[2] = std::make_unique<MeshExchange>(1, 3, members(3), milliseconds(5000));
    mesh.join(3, *ex[2]);
    auto rejoined = std::async(std::launch::async, [&] {
      return ex[2]->sync_election().await(std::nullopt, milliseconds(5000));
    });
    ex[1]->on_rejoin(3);  // the controller tells the live nodes
    CHECK(rejoined.get().local_steps == 20);
  }
}

TEST_CASE("training.sync: auto: a chooser lost before it chose ends the wait with its name",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto waiting = follow_choice(*ex[1], milliseconds(60000));
  mesh.cut(1);
  const auto start = std::chrono::steady_clock::now();
  ex[1]->on_loss(1);
  CHECK_THAT(user_error_of([&] { waiting.get(); }, "the wait did not end"),
             Catch::Contains("node-1, which chooses training.sync: auto"));
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));  // not the deadline

  SECTION("and a chooser none answers names the probe, not a hang") {
    mesh.cut(2);
    mesh.cut(3);
    CHECK_THAT(user_error_of(
                   [&] { ex[0]->sync_election().measure(milliseconds(300), 100000, 10000); },
                   "no peer answered, yet figures came back"),
               Catch::Contains("no node answered the link probes"));
  }
}

TEST_CASE("a pseudo-gradient that does not fit the model fails the round, never left out",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  for (uint32_t origin : {2u, 3u}) {  // messages of 64 elements, for a model of 32
    transport::Delivery d;
    d.job_id = 1;
    d.origin = d.from = origin;
    d.bytes = *pseudo_gradient_payload(0, 1, {*update(origin, 1, 0, -1)});
    ex[0]->on_message(d);
  }
  core::TrainingSpec t;
  t.sync.mode = "local";
  const std::vector<float> start(32, 0.f);
  core::LocalSteps local(t, core::CodecEngine::get("reference"), start.data(), 32, 0);
  std::vector<float> replica(32, 0.5f);
  CHECK_THAT(user_error_of([&] { local.round(replica.data(), 1, ex[0].get(), 0); },
                           "the round went on"),
             Catch::Contains("pseudo-gradient 2 of 3 of a round does not fit this model"));
}

TEST_CASE("training.sync: auto: a silent peer costs the probes their deadline, not the job",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto second = follow_choice(*ex[1], milliseconds(10000));
  mesh.cut(3);  // silent, not yet declared lost
  const core::LinkFigures link =
      ex[0]->sync_election().measure(milliseconds(300), 100000, 10000);
  CHECK(link.goodput_bytes_s > 0);  // node-2's figures
  ex[0]->sync_election().announce({0, "per-step"}, milliseconds(300));
  CHECK(second.get().local_steps == 0);
}

TEST_CASE("training.sync: auto: a node that attaches after the first probe is probed again",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto third = attach_late(mesh, *ex[2], 3);  // probes to it go nowhere at first
  auto second = follow_choice(*ex[1], milliseconds(10000));
  const auto start = std::chrono::steady_clock::now();
  ex[0]->sync_election().measure(milliseconds(5000), 100000, 10000);
  // Answered by both: no probe waited out its 5 s.
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(3000));
  ex[0]->sync_election().announce({12, "local"}, milliseconds(5000));
  CHECK(second.get().local_steps == 12);
  CHECK(third.get().local_steps == 12);
}

TEST_CASE("a choice made without measuring reaches a node that attaches after it was made",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto third = attach_late(mesh, *ex[2], 3);
  auto second = follow_choice(*ex[1], milliseconds(10000));
  const auto start = std::chrono::steady_clock::now();
  // Chosen at once (a resumed mode, node-local shards): sent once every peer answered a probe.
  ex[0]->sync_election().announce({0, "resumed from a checkpoint of allreduce: allreduce", true},
                                  milliseconds(5000));
  CHECK(second.get().allreduce);
  const core::SyncChoice late = third.get();
  CHECK(late.allreduce);
  CHECK(late.reason == "resumed from a checkpoint of allreduce: allreduce");
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(3000));
}

TEST_CASE("training.sync: auto: only the chooser's word counts; its restart ends the wait",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto second = follow_choice(*ex[1], milliseconds(10000));
  ex[2]->sync_election().announce({20, "not the chooser"}, milliseconds(300));
  ex[0]->sync_election().announce({0, "the chooser"}, milliseconds(5000));
  CHECK(second.get().reason == "the chooser");

  SECTION("a chooser restarted before it chose") {
    FakeMesh fresh;
    std::vector<std::unique_ptr<MeshExchange>> nodes = three_nodes(fresh);
    auto waiting = follow_choice(*nodes[1], milliseconds(60000));
    const auto start = std::chrono::steady_clock::now();
    nodes[1]->on_rejoin(1);  // the controller says node-1 is back: a new process
    CHECK_THAT(user_error_of([&] { waiting.get(); }, "the wait did not end"),
               Catch::Contains("node-1, which chooses training.sync: auto for the job, was lost "
                               "or restarted before it chose"));
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
  }
}

TEST_CASE("training.sync: auto: every node rehearses the chooser's plan with it",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  std::atomic<int> prepared[3] = {0, 0, 0}, steps[3] = {0, 0, 0}, rounds[3] = {0, 0, 0};
  for (int n = 0; n < 3; ++n)
    ex[n]->sync_election().set_rehearsal_work(
        {[&prepared, n] { ++prepared[n]; }, [&steps, n] { ++steps[n]; }, nullptr,
         [&rounds, n] { ++rounds[n]; }});
  auto second = follow_choice(*ex[1], milliseconds(10000));
  auto third = follow_choice(*ex[2], milliseconds(10000));
  ex[0]->sync_election().measure(milliseconds(5000), 100000, 10000);
  const auto start = std::chrono::steady_clock::now();
  const auto figures = ex[0]->sync_election().rehearse({8, 1000, 20000}, milliseconds(5000));
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(3000));  // no wait ran out
  REQUIRE(figures);
  CHECK(figures->steps == 8);
  CHECK(figures->round_bytes == 20000);
  CHECK(figures->lock_step_s > 0);
  CHECK(figures->round_s > 0);
  ex[0]->sync_election().announce({0, "per-step"}, milliseconds(5000));
  CHECK(second.get().local_steps == 0);
  CHECK(third.get().local_steps == 0);
  // Each node took the 8 lock steps and, before each of the 2 rounds, 4 back to back.
  for (int n = 0; n < 3; ++n) {
    CHECK(prepared[n] == 1);
    CHECK(steps[n] == 8 + 2 * 4);
    CHECK(rounds[n] == 2);
  }
}

TEST_CASE("training.mode: auto: every node takes the plan's ring steps, each a real sum",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  std::vector<float> sums[3];
  std::atomic<int> ring_steps[3] = {0, 0, 0};
  for (int n = 0; n < 3; ++n) {
    ex[n]->expect_sums_of(1001);
    ex[n]->sync_election().set_rehearsal_work(
        {nullptr, nullptr, nullptr, nullptr,
         [&, n](int32_t index, milliseconds deadline) {
           sums[n].assign(1001, float(n + 1) + float(index));
           ex[n]->rehearse_ring(sums[n].data(), 1001, index, deadline);
           ++ring_steps[n];
         }});
  }
  auto second = follow_choice(*ex[1], milliseconds(10000));
  auto third = follow_choice(*ex[2], milliseconds(10000));
  ex[0]->sync_election().measure(milliseconds(5000), 100000, 10000);
  const auto figures =
      ex[0]->sync_election().rehearse({4, 1000, 20000, 6}, milliseconds(5000));
  REQUIRE(figures);
  CHECK(figures->ring_steps == 6);
  CHECK(figures->ring_step_s > 0);
  ex[0]->sync_election().announce({0, "allreduce", true}, milliseconds(5000));
  CHECK(second.get().allreduce);
  CHECK(third.get().allreduce);
  for (int n = 0; n < 3; ++n) {
    CHECK(ring_steps[n] == 6);
    // The last step (index 5): (1 + 5) + (2 + 5) + (3 + 5) on every node.
    CHECK(sums[n] == std::vector<float>(1001, 21.f));
  }
}

TEST_CASE("mode allreduce: a part that cannot reach a member is not tried again that round",
          "[mesh_exchange]") {
  // Node-3 is gone but not yet declared lost. Node-2 passes its parts on to it: the first it
  // cannot send ends its sends to node-3 for the round (each would wait out the deadline on a
  // real mesh), where it has 4 parts a step to send; both rounds then wait out theirs.
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  mesh.cut(3);
  const int64_t n = 3 * 4 * core::kRingPartValues;
  REQUIRE(core::ring_parts(n, 3, core::kRingPartValues) == 4);
  auto sum_on = [&](int node) {
    return std::async(std::launch::async, [&, node] {
      std::vector<float> values(size_t(n), 1.f);
      ex[size_t(node)]->rehearse_ring(values.data(), n, 0, milliseconds(300));
    });
  };
  auto first = sum_on(0), second = sum_on(1);
  CHECK_THROWS_WITH(first.get(), Catch::Contains("from node id 3"));
  CHECK_THROWS_WITH(second.get(), Catch::Contains("from node id 1"));
  CHECK(mesh.undelivered(2, 3) == 1);
}

TEST_CASE("training.sync: auto: a rehearsal waits for no lost node, and no stranger counts",
          "[mesh_exchange]") {
  FakeMesh mesh;
  std::vector<std::unique_ptr<MeshExchange>> ex = three_nodes(mesh);
  auto second = follow_choice(*ex[1], milliseconds(10000));
  mesh.cut(3);  // silent: its marks never come
  SECTION("lost: not waited for") {
    ex[0]->on_loss(3);
    ex[1]->on_loss(3);
    const auto start = std::chrono::steady_clock::now();
    CHECK(ex[0]->sync_election().rehearse({4, 100, 100}, milliseconds(5000)));
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(3000));
  }
  SECTION("silent but not yet lost: the rehearsal gives no figures at its deadline") {
    // A stranger (id 9) sends every mark node-3 would: they do not stand in for it.
    for (int32_t s = 0; s < 4; ++s) {
      transport::Delivery d;
      d.job_id = 1;
      d.origin = d.from = 9;
      d.bytes = *rehearsal_mark_payload({false, s}, 0);
      ex[0]->on_message(d);
    }
    CHECK_FALSE(ex[0]->sync_election().rehearse({4, 100, 100}, milliseconds(300)));
  }
  ex[0]->sync_election().announce({0, "per-step"}, milliseconds(300));
  CHECK(second.get().local_steps == 0);
}
