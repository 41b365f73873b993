#pragma once
// Several nodes' MeshExchanges in one process over a fake mesh (daemon/node/mesh_port.h),
// connected directly, each driven from its own thread as the daemon's job runners would: the
// mesh exchange's tests and those of what rides on it (NCCL between nodes).
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/node/mesh_exchange.h"

namespace dtrain::testing {

using daemon::JobMember;
using daemon::MeshExchange;
using daemon::MeshPort;
using std::chrono::milliseconds;

// Every publish reaches every other attached exchange at once (the real mesh relays over
// UDP; what the exchange relies on is the same: each message once, per origin in order).
class FakeMesh {
 public:
  class Port : public MeshPort {
   public:
    Port(FakeMesh& mesh, uint32_t self) : mesh_(mesh), self_(self) {}
    bool publish(uint64_t message_id, std::shared_ptr<const std::vector<uint8_t>> bytes,
                 milliseconds) override {
      mesh_.deliver(self_, message_id, *bytes);
      return true;
    }
    bool send_to(uint32_t to, uint64_t message_id,
                 std::shared_ptr<const std::vector<uint8_t>> bytes, bool, milliseconds) override {
      return mesh_.deliver_to(self_, to, message_id, *bytes);
    }
    void add_member(uint32_t id) override { mesh_.added.push_back(id); }
    void add_new_member(const transport::MeshMember& m) override { mesh_.added.push_back(m.id); }
    uint32_t relay_of(uint32_t member) const override {
      auto it = mesh_.relays.find(member);
      return it == mesh_.relays.end() || self_ == it->second ? member : it->second;
    }

   private:
    FakeMesh& mesh_;
    uint32_t self_;
  };

  void join(uint32_t id, MeshExchange& exchange) {
    std::lock_guard<std::mutex> lock(mutex_);
    nodes_[id] = &exchange;
    ports_[id] = std::make_unique<Port>(*this, id);
    exchange.set_mesh(ports_[id].get());
  }
  // The node's process is gone: it neither sends nor receives any more.
  void cut(uint32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    nodes_.erase(id);
  }
  // `origin`'s published messages stop reaching `to` (they were in flight when it died).
  void block(uint32_t origin, uint32_t to) {
    std::lock_guard<std::mutex> lock(mutex_);
    blocked_.insert({origin, to});
  }
  // Waits until `origin` has published `n` messages (true), or `deadline` passes (false).
  bool wait_published(uint32_t origin, int n, milliseconds deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return published_cv_.wait_for(lock, deadline, [&] { return published_[origin] >= n; });
  }
  void deliver(uint32_t origin, uint64_t message_id, const std::vector<uint8_t>& bytes) {
    std::vector<MeshExchange*> to;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!nodes_.count(origin)) return;
      ++published_[origin];
      published_cv_.notify_all();
      for (auto& [id, ex] : nodes_)
        if (id != origin && !blocked_.count({origin, id})) to.push_back(ex);
    }
    for (MeshExchange* ex : to) {
      transport::Delivery d;
      d.job_id = 1;
      d.origin = d.from = origin;
      d.message_id = message_id;
      d.bytes = bytes;
      ex->on_message(d);
    }
  }
  // Point to point (mode allreduce's ring), under the job's direct id.
  bool deliver_to(uint32_t origin, uint32_t to, uint64_t message_id,
                  const std::vector<uint8_t>& bytes) {
    MeshExchange* ex = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!nodes_.count(origin) || !nodes_.count(to)) {
        ++undelivered_[{origin, to}];
        return false;
      }
      ex = nodes_[to];
    }
    transport::Delivery d;
    d.job_id = 1;  // the data channel routes the direct id to the job
    d.origin = d.from = origin;
    d.message_id = message_id;
    d.bytes = bytes;
    ex->on_message(d);
    return true;
  }
  // Point-to-point messages from `origin` that could not reach `to` (it was cut).
  int undelivered(uint32_t origin, uint32_t to) {
    std::lock_guard<std::mutex> lock(mutex_);
    return undelivered_[{origin, to}];
  }
  std::vector<uint32_t> added;
  std::map<uint32_t, uint32_t> relays;  // member -> the node its messages come through

 private:
  std::mutex mutex_;
  std::map<uint32_t, MeshExchange*> nodes_;
  std::map<uint32_t, std::unique_ptr<Port>> ports_;
  std::map<std::pair<uint32_t, uint32_t>, int> undelivered_;
  std::set<std::pair<uint32_t, uint32_t>> blocked_;  // (origin, to)
  std::map<uint32_t, int> published_;  // messages each origin published
  std::condition_variable published_cv_;
};

inline std::vector<JobMember> members(int nodes) {
  std::vector<JobMember> out;
  for (int i = 0; i < nodes; ++i)
    out.push_back({uint32_t(i + 1), "node-" + std::to_string(i + 1), 1});
  return out;
}

// Three nodes' exchanges on `mesh`, node-1 to node-3 (ids 1 to 3).
inline std::vector<std::unique_ptr<MeshExchange>> three_nodes(FakeMesh& mesh) {
  std::vector<std::unique_ptr<MeshExchange>> ex;
  for (uint32_t id = 1; id <= 3; ++id) {
    ex.push_back(std::make_unique<MeshExchange>(1, id, members(3), milliseconds(5000)));
    mesh.join(id, *ex.back());
  }
  return ex;
}

// Epoch 1's takeover barrier on the live nodes `a` and `b`, which admits newcomer `c` (it took a
// vacant slot: on_join), then node-1 (`a`) sends it the replica; returns the epoch `c` resumes
// at (-1: it did not). `params`: the model's size.
inline int64_t admit_at_first_epoch_end(MeshExchange& a, MeshExchange& b, MeshExchange& c,
                                        int64_t params) {
  auto take_b = std::async(std::launch::async, [&] { b.end_takeover(0, {}); });
  a.end_takeover(0, {});
  take_b.get();
  auto resumed = std::async(std::launch::async, [&] {
    core::NodeExchange::Resume r;
    return c.resume(r) ? r.next_epoch : -1;
  });
  std::vector<float> replica(size_t(params), 0.25f);
  b.epoch_applied(0, replica.data(), params, nullptr, 0, 0.5f, {});
  a.epoch_applied(0, replica.data(), params, nullptr, 0, 0.5f, {});
  return resumed.get();
}

}  // namespace dtrain::testing
