#pragma once
// An in-process etcd (daemon/election/etcd_client.h's seam) with leases on the test's clock:
// each call may take time on that clock, and a down etcd throws EtcdError. Keys put without a
// lease (0) never expire.
#include <chrono>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/election/etcd_client.h"

namespace dtrain::test {

using EtcdError = daemon::EtcdError;

// etcd's leases and keys, on the test's clock.
class FakeEtcd : public daemon::EtcdClient {
 public:
  explicit FakeEtcd(std::chrono::steady_clock::time_point& now) : now_(now) {}
  bool down = false;
  // Each call takes this long on the test's clock, half each way.
  std::chrono::milliseconds latency{0};

  void erase(const std::string& key) { keys_.erase(key); }

  int64_t grant_lease(int ttl_s) override {
    Call call(*this);
    leases_[++last_] = {now_ + std::chrono::seconds(ttl_s), ttl_s};
    return last_;
  }
  int64_t keep_alive(int64_t lease) override {
    Call call(*this);
    auto it = leases_.find(lease);
    if (it == leases_.end()) return 0;
    it->second.end = now_ + std::chrono::seconds(it->second.ttl);
    return it->second.ttl;
  }
  bool create(const std::string& key, const std::string& value, int64_t lease) override {
    Call call(*this);
    if (!leases_.count(lease)) throw EtcdError("requested lease not found (HTTP 404)");
    if (keys_.count(key)) return false;
    keys_[key] = {value, lease};
    return true;
  }
  std::optional<Value> get(const std::string& key) override {
    Call call(*this);
    auto it = keys_.find(key);
    if (it == keys_.end()) return std::nullopt;
    return Value{it->second.first, it->second.second};
  }
  void revoke(int64_t lease) override {
    Call call(*this);
    leases_.erase(lease);
    expire();
  }
  bool put_if_held(const std::string& key, const std::string& value, const std::string& guard,
                   int64_t lease) override {
    Call call(*this);
    auto it = keys_.find(guard);
    if (it == keys_.end() || it->second.second != lease) return false;
    keys_[key] = {value, 0};
    return true;
  }
  std::vector<std::pair<std::string, std::string>> list(const std::string& prefix) override {
    Call call(*this);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, v] : keys_)
      if (k.rfind(prefix, 0) == 0) out.emplace_back(k, v.first);
    return out;
  }

 private:
  struct Lease {
    std::chrono::steady_clock::time_point end;
    int ttl;
  };
  // A call: half the latency on the way there, etcd's work at that moment, half on the way back.
  struct Call {
    explicit Call(FakeEtcd& e) : etcd(e) {
      if (etcd.down) throw EtcdError("etcd is down (the test's)");
      etcd.now_ += etcd.latency / 2;
      etcd.expire();
    }
    ~Call() { etcd.now_ += etcd.latency / 2; }
    FakeEtcd& etcd;
  };
  void expire() {
    for (auto it = leases_.begin(); it != leases_.end();)
      it = it->second.end <= now_ ? leases_.erase(it) : std::next(it);
    for (auto it = keys_.begin(); it != keys_.end();)
      it = it->second.second == 0 || leases_.count(it->second.second) ? std::next(it)
                                                                       : keys_.erase(it);
  }
  std::chrono::steady_clock::time_point& now_;
  std::map<int64_t, Lease> leases_;
  std::map<std::string, std::pair<std::string, int64_t>> keys_;
  int64_t last_ = 0;
};

}  // namespace dtrain::test
