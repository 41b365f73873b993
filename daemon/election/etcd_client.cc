#include "daemon/election/etcd_client.h"

#include <httplib.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/util/error.h"
#include "transport/security/base64.h"

namespace dtrain::daemon {
namespace {

using Json = nlohmann::json;
using transport::to_base64;
// An answer about the leader key is small (its value is a candidate's name and address: 64 KiB
// is read at most). A page of a listing holds at most kListPage values; the job records are cut
// to 768 KiB (1 MiB in base64, etcd_job_records.h), so a page stays within the 4 MiB that etcd
// 3.4's gateway answers at most before its fix, and nothing larger is read.
constexpr int kListPage = 3;
constexpr size_t kMaxListAnswer = 4 << 20;

std::string unbase64(const std::string& text) {
  std::string out(text.size(), '\0');  // base64 is never shorter than its bytes
  const auto got = transport::from_base64(text, out.data(), out.size());
  if (!got) throw EtcdError("etcd sent a value that is not base64");
  out.resize(*got);
  return out;
}

// The gateway writes int64 fields as JSON strings ("ID": "7587899402547299845"); absent is 0.
int64_t int_field(const Json& j, const char* name) {
  if (!j.is_object() || !j.contains(name)) return 0;
  const Json& v = j[name];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    int64_t out = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    if (ec == std::errc() && end == t.data() + t.size() && !t.empty()) return out;
  }
  throw EtcdError(std::string("etcd sent a field '") + name + "' that is no integer");
}

// A field that must be absent or of the type `is` checks.
const Json* field(const Json& j, const char* name, bool (Json::*is)() const noexcept) {
  if (!j.is_object() || !j.contains(name)) return nullptr;
  if (!(j[name].*is)())
    throw EtcdError(std::string("etcd sent a field '") + name + "' of another type");
  return &j[name];
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

std::string EtcdHttpClient::post(const std::string& path, const std::string& body, size_t most) {
  std::string why;
  for (size_t k = 0; k < endpoints_.size(); ++k) {
    const size_t i = (first_ + k) % endpoints_.size();
    if (auto answer = post_to(endpoints_[i], path, body, most, why)) {
      first_ = i;
      return std::move(*answer);
    }
  }
  throw EtcdError("etcd did not answer " + path + " (" + why + ")");
}

std::optional<std::string> EtcdHttpClient::post_to(const EtcdEndpoint& e, const std::string& path,
                                                   const std::string& body, size_t most,
                                                   std::string& why) {
  httplib::Client c(e.host, e.port);
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout_);
  const auto usecs = std::chrono::duration_cast<std::chrono::microseconds>(timeout_ - secs);
  c.set_connection_timeout(secs.count(), usecs.count());
  c.set_read_timeout(secs.count(), usecs.count());
  c.set_write_timeout(secs.count(), usecs.count());
  // The whole answer within the timeout and `most` bytes: a slow or endless one is cut off as it
  // comes.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::string answer, cut;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response&) {
    if (std::chrono::steady_clock::now() > deadline) cut = "no answer within the timeout";
    return cut.empty();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (answer.size() + n > most) cut = "an answer over " + std::to_string(most >> 10) + " KiB";
    else if (std::chrono::steady_clock::now() > deadline)
      cut = "no whole answer within the timeout";
    if (!cut.empty()) return false;
    answer.append(data, n);
    return true;
  };
  auto res = c.send(req);
  const std::string where = e.host + ":" + std::to_string(e.port) + ": ";
  if (!cut.empty()) why = where + cut;
  else if (!res) why = where + httplib::to_string(res.error());
  else if (res->status != 200)
    why = where + "HTTP " + std::to_string(res->status) + " " + answer.substr(0, 200);
  else return answer;
  return std::nullopt;
}

int64_t EtcdHttpClient::grant_lease(int ttl_s) {
  const Json j = parse(post("/v3/lease/grant", Json{{"TTL", ttl_s}}.dump()));
  const int64_t id = int_field(j, "ID");
  if (id == 0) throw EtcdError("etcd granted no lease: " + j.value("error", std::string("?")));
  return id;
}

int64_t EtcdHttpClient::keep_alive(int64_t lease) {
  const Json j = parse(post("/v3/lease/keepalive", Json{{"ID", std::to_string(lease)}}.dump()));
  const Json* result = field(j, "result", &Json::is_object);
  if (!result) throw EtcdError("etcd's keepalive answer has no result");
  return int_field(*result, "TTL");  // absent (0) once the lease has expired
}

bool EtcdHttpClient::create(const std::string& key, const std::string& value, int64_t lease) {
  const std::string k = to_base64(key);
  const Json put = {{"key", k}, {"value", to_base64(value)}, {"lease", std::to_string(lease)}};
  const Json txn = {{"compare", {{{"key", k}, {"target", "CREATE"}, {"create_revision", "0"}}}},
                    {"success", {{{"request_put", put}}}},
                    {"failure", Json::array()}};
  const Json j = parse(post("/v3/kv/txn", txn.dump()));
  const Json* succeeded = field(j, "succeeded", &Json::is_boolean);  // left out when false
  return succeeded && succeeded->get<bool>();
}

std::optional<EtcdClient::Value> EtcdHttpClient::get(const std::string& key) {
  const Json j = parse(post("/v3/kv/range", Json{{"key", to_base64(key)}}.dump()));
  const Json* kvs = field(j, "kvs", &Json::is_array);
  if (!kvs || kvs->empty()) return std::nullopt;
  const Json& kv = (*kvs)[0];
  const Json* value = field(kv, "value", &Json::is_string);
  if (!kv.is_object() || !value) throw EtcdError("etcd sent a key-value without a value");
  return Value{unbase64(value->get<std::string>()), int_field(kv, "lease")};
}

void EtcdHttpClient::revoke(int64_t lease) {
  post("/v3/lease/revoke", Json{{"ID", std::to_string(lease)}}.dump());
}

bool EtcdHttpClient::put_if_held(const std::string& key, const std::string& value,
                                 const std::string& guard, int64_t lease) {
  const Json put = {{"key", to_base64(key)}, {"value", to_base64(value)}};
  // etcd compares the guard key's lease (target LEASE); a key that is gone has lease 0.
  const Json txn = {
      {"compare",
       {{{"key", to_base64(guard)}, {"target", "LEASE"}, {"lease", std::to_string(lease)}}}},
      {"success", {{{"request_put", put}}}},
      {"failure", Json::array()}};
  const Json j = parse(post("/v3/kv/txn", txn.dump()));
  const Json* succeeded = field(j, "succeeded", &Json::is_boolean);  // left out when false
  return succeeded && succeeded->get<bool>();
}

std::vector<std::pair<std::string, std::string>> EtcdHttpClient::list(const std::string& prefix) {
  if (prefix.empty() || static_cast<unsigned char>(prefix.back()) == 0xff)
    throw EtcdError("cannot list under '" + prefix + "'");
  std::string end = prefix;
  ++end.back();  // the first key after every key that starts with prefix
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string from = prefix;;) {  // a page at a time: an answer's size stays bounded
    const Json q = {{"key", to_base64(from)}, {"range_end", to_base64(end)}, {"limit", kListPage}};
    const Json j = parse(post("/v3/kv/range", q.dump(), kMaxListAnswer));
    const Json* kvs = field(j, "kvs", &Json::is_array);
    for (const Json& kv : kvs ? *kvs : Json::array()) {
      const Json* k = field(kv, "key", &Json::is_string);
      const Json* v = field(kv, "value", &Json::is_string);
      if (!k) throw EtcdError("etcd sent a key-value without a key");
      out.emplace_back(unbase64(k->get<std::string>()), v ? unbase64(v->get<std::string>()) : "");
    }
    const Json* more = field(j, "more", &Json::is_boolean);
    if (!more || !more->get<bool>() || !kvs || kvs->empty()) return out;
    from = out.back().first + std::string(1, '\0');
  }
}

}  // namespace dtrain::daemon
