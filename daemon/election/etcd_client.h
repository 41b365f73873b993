#pragma once
// What a controller candidate asks of etcd (docs/architecture/daemon.md, "Standby controllers"):
// leases, a key created only when absent under a lease, and reads. EtcdClient is the seam the
// election is tested through with an in-process fake; EtcdHttpClient speaks etcd's v3 JSON
// gateway (POST /v3/lease/grant, /v3/lease/keepalive, /v3/kv/txn, /v3/kv/range,
// /v3/lease/revoke; keys and values base64) over cpp-httplib, already the status port's
// library, to the first of its endpoints that answers.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::daemon {

// etcd could not be reached, was too slow, or answered something else than the API says.
struct EtcdError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class EtcdClient {
 public:
  virtual ~EtcdClient() = default;
  // A lease of ttl_s seconds; its id.
  virtual int64_t grant_lease(int ttl_s) = 0;
  // Renews the lease; the seconds it has left, 0 when it had already expired.
  virtual int64_t keep_alive(int64_t lease) = 0;
  // Puts key = value under the lease if the key does not exist; whether it did.
  virtual bool create(const std::string& key, const std::string& value, int64_t lease) = 0;
  // The key's value and the lease it is under, or nothing.
  struct Value {
    std::string value;
    int64_t lease = 0;
  };
  virtual std::optional<Value> get(const std::string& key) = 0;
  virtual void revoke(int64_t lease) = 0;
  // Puts key = value (no lease: it outlives the writer) only while `guard` is held under
  // `lease`, in one transaction; whether it did (false: the guard key is gone or another's).
  virtual bool put_if_held(const std::string& key, const std::string& value,
                           const std::string& guard, int64_t lease) = 0;
  // Every key under `prefix` and its value, in key order.
  virtual std::vector<std::pair<std::string, std::string>> list(const std::string& prefix) = 0;
};

// "http://10.0.0.5:2379" (http only: etcd's client TLS is not supported here).
struct EtcdEndpoint {
  std::string host;
  int port = 2379;
};
// Parses an endpoint; throws core::UserError naming the fix.
EtcdEndpoint parse_etcd_endpoint(const std::string& url);

class EtcdHttpClient : public EtcdClient {
 public:
  EtcdHttpClient(std::vector<EtcdEndpoint> endpoints, std::chrono::milliseconds timeout);
  int64_t grant_lease(int ttl_s) override;
  int64_t keep_alive(int64_t lease) override;
  bool create(const std::string& key, const std::string& value, int64_t lease) override;
  std::optional<Value> get(const std::string& key) override;
  void revoke(int64_t lease) override;
  bool put_if_held(const std::string& key, const std::string& value, const std::string& guard,
                   int64_t lease) override;
  std::vector<std::pair<std::string, std::string>> list(const std::string& prefix) override;

 private:
  // POSTs the JSON body to path at each endpoint in turn until one answers 200 within the
  // timeout (the whole answer, not each read) and `most` bytes; its body.
  std::string post(const std::string& path, const std::string& body, size_t most = 64 << 10);
  // One endpoint's answer, or why there is none.
  std::optional<std::string> post_to(const EtcdEndpoint& e, const std::string& path,
                                     const std::string& body, size_t most, std::string& why);

  std::vector<EtcdEndpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  size_t first_ = 0;  // the endpoint that answered last
};

}  // namespace dtrain::daemon
