#include "daemon/election/etcd_client.h"

#include <httplib.h>
#include <sodium.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

using Json = nlohmann::json;
constexpr int kVariant = sodium_base64_VARIANT_ORIGINAL;
// etcd's own limit on a request is 1.5 MiB; an answer to these requests is far smaller, and
// nothing bigger is read (a value is at most what a candidate wrote: its name and address).
constexpr size_t kMaxAnswer = 64 << 10;

std::string base64(const std::string& bytes) {
  std::string out(sodium_base64_encoded_len(bytes.size(), kVariant), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), kVariant);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

std::string unbase64(const std::string& text) {
  std::string out(text.size(), '\0');
  size_t got = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &got, nullptr, kVariant) != 0)
    throw EtcdError("etcd sent a value that is not base64");
  out.resize(got);
  return out;
}

// The gateway writes int64 fields as JSON strings ("ID": "7587899402547299845").
int64_t int_field(const Json& j, const char* name) {
  if (!j.contains(name)) return 0;
  const Json& v = j[name];
  try {
    if (v.is_string()) return std::stoll(v.get<std::string>());
    if (v.is_number_integer()) return v.get<int64_t>();
  } catch (const std::exception&) {
  }
  throw EtcdError(std::string("etcd sent a field '") + name + "' that is no integer");
}

Json parse(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  if (!j.is_object()) throw EtcdError("etcd sent an answer that is not a JSON object");
  return j;
}

}  // namespace

EtcdEndpoint parse_etcd_endpoint(const std::string& url) {
  static const std::regex form(R"(^http://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\])(:([0-9]{1,5}))?/?$)");
  std::smatch m;
  if (!std::regex_match(url, m, form))
    throw core::UserError("'" + url + "' is not an etcd endpoint",
                          "write http://HOST:PORT, e.g. http://10.0.0.5:2379 (https is not "
                          "supported: keep etcd's client port on a trusted network)");
  EtcdEndpoint e{m[1].str(), m[3].matched ? std::stoi(m[3].str()) : 2379};
  if (e.port < 1 || e.port > 65535)
    throw core::UserError("'" + url + "' has no valid port", "give a port from 1 to 65535");
  return e;
}

EtcdHttpClient::EtcdHttpClient(std::vector<EtcdEndpoint> endpoints,
                               std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {
  if (endpoints_.empty()) throw core::UserError("no etcd endpoint", "list at least one");
}

std::string EtcdHttpClient::post(const std::string& path, const std::string& body) {
  std::string last;
  for (size_t k = 0; k < endpoints_.size(); ++k) {
    const size_t i = (first_ + k) % endpoints_.size();
    httplib::Client c(endpoints_[i].host, endpoints_[i].port);
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout_);
    const auto usecs = std::chrono::duration_cast<std::chrono::microseconds>(timeout_ - secs);
    c.set_connection_timeout(secs.count(), usecs.count());
    c.set_read_timeout(secs.count(), usecs.count());
    c.set_write_timeout(secs.count(), usecs.count());
    auto res = c.Post(path.c_str(), httplib::Headers{}, body, "application/json");
    if (res && res->status == 200 && res->body.size() <= kMaxAnswer) {
      first_ = i;
      return res->body;
    }
    const bool too_big = res && res->body.size() > kMaxAnswer;
    last = endpoints_[i].host + ":" + std::to_string(endpoints_[i].port) + ": " +
           (res ? (too_big ? "an answer over 64 KiB" : "HTTP " + std::to_string(res->status))
                : httplib::to_string(res.error()));
  }
  throw EtcdError("etcd did not answer " + path + " (" + last + ")");
}

int64_t EtcdHttpClient::grant_lease(int ttl_s) {
  const Json j = parse(post("/v3/lease/grant", Json{{"TTL", ttl_s}}.dump()));
  const int64_t id = int_field(j, "ID");
  if (id == 0) throw EtcdError("etcd granted no lease: " + j.value("error", std::string("?")));
  return id;
}

int64_t EtcdHttpClient::keep_alive(int64_t lease) {
  const Json j = parse(post("/v3/lease/keepalive", Json{{"ID", std::to_string(lease)}}.dump()));
  if (!j.contains("result") || !j["result"].is_object())
    throw EtcdError("etcd's keepalive answer has no result");
  return int_field(j["result"], "TTL");  // absent (0) once the lease has expired
}

bool EtcdHttpClient::create(const std::string& key, const std::string& value, int64_t lease) {
  const std::string k = base64(key);
  const Json txn = {
      {"compare", {{{"key", k}, {"target", "CREATE"}, {"create_revision", "0"}}}},
      {"success",
       {{{"request_put", {{"key", k}, {"value", base64(value)}, {"lease", std::to_string(lease)}}}}}},
      {"failure", Json::array()}};
  const Json j = parse(post("/v3/kv/txn", txn.dump()));
  return j.value("succeeded", false);
}

std::optional<std::string> EtcdHttpClient::get(const std::string& key) {
  const Json j = parse(post("/v3/kv/range", Json{{"key", base64(key)}}.dump()));
  if (!j.contains("kvs") || !j["kvs"].is_array() || j["kvs"].empty()) return std::nullopt;
  const Json& kv = j["kvs"][0];
  if (!kv.is_object()) throw EtcdError("etcd sent a key-value that is no object");
  return unbase64(kv.value("value", std::string()));
}

void EtcdHttpClient::revoke(int64_t lease) {
  post("/v3/lease/revoke", Json{{"ID", std::to_string(lease)}}.dump());
}

}  // namespace dtrain::daemon
