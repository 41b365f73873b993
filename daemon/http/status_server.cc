#include "daemon/http/status_server.h"

#include <httplib.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/util/error.h"
#include "daemon/http/dashboard_assets.h"
#include "daemon/protocol/job_id.h"

namespace dtrain::daemon {
namespace {

// Writes each metric family's HELP and TYPE once, then its samples.
class MetricsWriter {
 public:
  void sample(const std::string& name, const std::string& type, const std::string& help,
              const std::map<std::string, std::string>& labels, double value) {
    if (declared_.insert(name).second)
      out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    out_ << name;
    if (!labels.empty()) {
      out_ << "{";
      bool first = true;
      for (const auto& [k, v] : labels) {
        out_ << (first ? "" : ",") << k << "=\"" << escape(v) << "\"";
        first = false;
      }
      out_ << "}";
    }
    out_ << " " << (std::isfinite(value) ? value : 0.0) << "\n";
  }
  std::string text() const { return out_.str(); }
  void comment(const std::string& line) {
    std::string clean;
    for (char c : line) clean += (c == '\n' || c == '\r') ? ' ' : c;
    out_ << "# " << clean << "\n";
  }
  MetricsWriter() { out_.precision(15); }  // counters stay exact well past 2^32

 private:
  static std::string escape(const std::string& v) {
    std::string out;
    for (char c : v) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  }
  std::ostringstream out_;
  std::set<std::string> declared_;
};

// Readers that never throw: /metrics leaves an odd or missing figure out (or at 0) rather than
// failing the whole page (a 500 would blind the monitoring exactly when something is wrong).
double number(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}
std::string text(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const Json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  return "";
}
bool flag(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}
const Json& member(const Json& j, const char* key) {
  static const Json empty;
  return j.is_object() && j.contains(key) ? j[key] : empty;
}
// The elements of an array (nothing for anything else).
const std::vector<Json>& elements(const Json& j) {
  static const std::vector<Json> none;
  return j.is_array() ? j.get_ref<const Json::array_t&>() : none;
}

// Runs one section of the page; an exception leaves that section out and is noted in a comment.
template <class F>
void section(MetricsWriter& m, const char* what, F f) {
  try {
    f();
  } catch (const std::exception& e) {
    m.comment(std::string("left out ") + what + ": " + e.what());
  }
}

void job_metrics(MetricsWriter& m, const Json& job) {
  const std::map<std::string, std::string> l = {{"job", text(job, "id")},
                                                {"job_name", text(job, "name")}};
  const Json& p = member(job, "progress");
  m.sample("dtrain_job_epoch", "gauge", "current epoch (1-based)", l, number(p, "epoch"));
  m.sample("dtrain_job_iteration", "gauge", "this node's iterations so far", l,
           number(p, "iteration"));
  m.sample("dtrain_job_loss", "gauge", "loss of the latest minibatch", l, number(p, "loss"));
  m.sample("dtrain_job_samples_per_second", "gauge", "this node's training throughput", l,
           number(p, "samples_per_sec"));
  m.sample("dtrain_job_diverging", "gauge",
           "1 while the smoothed training loss is far above its best (the job fails if an "
           "epoch ends so)", l, flag(p, "diverging") ? 1 : 0);
  for (const Json& w : elements(member(job, "workers"))) {
    auto wl = l;
    wl["worker"] = text(w, "worker");
    m.sample("dtrain_worker_tau", "gauge", "the worker's threshold at its latest step", wl,
             number(w, "tau"));
    m.sample("dtrain_worker_density", "gauge", "fraction of parameters sent at its latest step",
             wl, number(w, "density"));
    m.sample("dtrain_worker_residual_norm", "gauge", "L2 norm of the worker's residual", wl,
             number(w, "residual_norm"));
    m.sample("dtrain_worker_bitmap", "gauge", "1 when the latest message was a bitmap", wl,
             text(w, "encoding") == "bitmap" ? 1 : 0);
    m.sample("dtrain_worker_message_bytes_total", "counter", "encoded bytes the worker produced",
             wl, number(w, "message_bytes_total"));
    m.sample("dtrain_worker_messages_total", "counter", "messages the worker produced", wl,
             number(w, "messages_total"));
  }
}

void peer_metrics(MetricsWriter& m, const Json& p) {
  const std::map<std::string, std::string> l = {{"peer", text(p, "peer")}};
  const std::pair<const char*, const char*> counters[] = {
      {"datagrams_in", "datagrams received"}, {"bytes_in", "bytes received"},
      {"datagrams_out", "datagrams sent"},    {"bytes_out", "bytes sent"},
      {"messages_in", "messages delivered"},  {"messages_out", "messages queued"},
      {"naks_sent", "NAKs sent"},             {"naks_received", "NAKs received"},
      {"retransmits", "datagrams sent again"}, {"credit_stalls", "waits for credit"},
      {"duplicates", "duplicate datagrams"}};
  for (const auto& [key, help] : counters)
    m.sample(std::string("dtrain_transport_") + key + "_total", "counter", help, l,
             number(p, key));
  const Json& drops = member(p, "drops");
  if (drops.is_object())
    for (const auto& [reason, count] : drops.items()) {
      if (!count.is_number()) continue;
      auto dl = l;
      dl["reason"] = reason;
      m.sample("dtrain_transport_drops_total", "counter", "datagrams dropped, by reason", dl,
               count.get<double>());
    }
  m.sample("dtrain_transport_rtt_microseconds", "gauge", "smoothed round-trip time", l,
           number(p, "rtt_us"));
  m.sample("dtrain_transport_credit_offered_bytes", "gauge",
           "what this node lets the peer have unacknowledged towards it", l,
           number(p, "credit_offered"));
  m.sample("dtrain_transport_peer_lost", "gauge", "1 while the peer is declared lost", l,
           flag(p, "lost") ? 1 : 0);
}

void controller_metrics(MetricsWriter& m, const Json& c) {
  std::map<std::string, int> states = {{"queued", 0}, {"running", 0}, {"succeeded", 0},
                                       {"failed", 0}, {"cancelled", 0}};
  for (const Json& j : elements(member(member(c, "jobs"), "jobs"))) {
    const std::string state = text(j, "state");
    if (states.count(state)) ++states[state];
  }
  for (const auto& [state, count] : states)
    m.sample("dtrain_jobs", "gauge", "jobs the controller knows, by state", {{"state", state}},
             count);
  int alive = 0, lost = 0;
  for (const Json& n : elements(member(member(c, "nodes"), "nodes")))
    (text(n, "state") == "alive" ? alive : lost)++;
  m.sample("dtrain_nodes", "gauge", "member nodes, by state", {{"state", "alive"}}, alive);
  m.sample("dtrain_nodes", "gauge", "member nodes, by state", {{"state", "lost"}}, lost);
}

void node_metrics(MetricsWriter& m, const Json& node) {
  const std::string name = text(node, "name");
  m.sample("dtrain_node_up", "gauge", "1 while this node's daemon runs", {{"node", name}}, 1);
  m.sample("dtrain_node_controller_connected", "gauge",
           "1 while the node is registered with the controller", {{"node", name}},
           flag(node, "controller_connected") ? 1 : 0);
  if (member(node, "tag_threads").is_number()) {
    m.sample("dtrain_transport_tag_threads", "gauge",
             "threads beside the data channel's I/O thread that seal and check tags",
             {{"node", name}}, number(node, "tag_threads"));
    m.sample("dtrain_transport_tags_on_workers_total", "counter",
             "datagram tags sealed or checked by those threads", {{"node", name}},
             number(node, "tags_on_workers"));
  }
  for (const Json& g : elements(member(node, "gpus"))) {
    section(m, "a GPU", [&] {
      const std::map<std::string, std::string> gl = {
          {"node", name}, {"gpu", text(g, "index")}, {"name", text(g, "name")}};
      m.sample("dtrain_gpu_memory_bytes", "gauge", "memory of a GPU this node offers to jobs", gl,
               number(g, "memory_bytes"));
      m.sample("dtrain_gpu_memory_used_bytes", "gauge",
               "GPU memory dtrain's workers hold on it now", gl, number(g, "memory_used_bytes"));
    });
  }
  for (const Json& job : elements(member(node, "jobs")))
    section(m, "a job", [&] { job_metrics(m, job); });
  for (const Json& p : elements(member(node, "peers")))
    section(m, "a peer", [&] { peer_metrics(m, p); });
}

}  // namespace

std::string prometheus_text(const Json& status) {
  MetricsWriter m;
  const Json& node = member(status, "node");
  if (node.is_object() && !node.empty()) section(m, "the node", [&] { node_metrics(m, node); });
  const Json& c = member(status, "controller");
  if (c.is_object()) section(m, "the controller", [&] { controller_metrics(m, c); });
  return m.text();
}

namespace {

void send_json(httplib::Response& res, const Json& body, int code = 200) {
  res.status = code;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

// The dashboard: its files, and its JSON, each answered with the reason when it cannot be.
void serve_dashboard(httplib::Server& server, const DashboardApi& api) {
  auto asset = [](const std::string& name, httplib::Response& res) {
    const DashboardAsset* a = find_dashboard_asset(name);
    if (!a) {
      res.status = 404;
      res.set_content("no such file: " + name + "\n", "text/plain");
      return;
    }
    res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
  };
  server.Get("/", [asset](const httplib::Request&, httplib::Response& res) {
    asset("index.html", res);
  });
  server.Get(R"(/assets/([a-z.]+))", [asset](const httplib::Request& req, httplib::Response& res) {
    asset(req.matches[1], res);
  });
  auto answer = [api](httplib::Response& res, const std::function<Json()>& f) {
    if (!api.jobs) {
      return send_json(res, {{"error", "this daemon is not the controller"},
                             {"fix", "open the dashboard on the controller's http port"}}, 404);
    }
    try {
      send_json(res, f());
    } catch (const core::UserError& e) {
      send_json(res, {{"error", e.what_happened()}, {"fix", e.fix()}}, 404);
    } catch (const std::exception& e) {
      send_json(res, {{"error", e.what()}}, 500);
    }
  };
  server.Get("/api/jobs", [answer, api](const httplib::Request&, httplib::Response& res) {
    answer(res, [&] { return api.jobs(); });
  });
  server.Get("/api/nodes", [answer, api](const httplib::Request&, httplib::Response& res) {
    answer(res, [&] { return api.nodes(); });
  });
  server.Get("/api/job", [answer, api](const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      uint64_t id = 0;
      if (!parse_job_id(req.get_param_value("id"), id))
        throw core::UserError("'" + req.get_param_value("id") + "' is not a job id",
                              "use the 16 hex digits the job list shows");
      return api.job(id);
    });
  });
}

}  // namespace

// Every request passes http_refusal first, but /healthz (a probe's: it says only "ok", so any
// Host may read it; docs/operations.md, "The HTTP port"); a token given as ?token= becomes a
// cookie, so the dashboard's own requests carry it. Nothing served takes a body: 4 KiB is plenty.
void StatusServer::guard(HttpAccess access) {
  server_->set_payload_max_length(4096);
  server_->set_read_timeout(5, 0);
  server_->set_pre_routing_handler([access](const httplib::Request& req,
                                            httplib::Response& res) {
    if (req.path == kHealthPath && req.method == "GET")
      return httplib::Server::HandlerResponse::Unhandled;
    const HttpCredentials presented{req.get_header_value("Host"),
                                    req.get_header_value("Authorization"),
                                    req.get_param_value("token"), req.get_header_value("Cookie")};
    if (auto no = http_refusal(access, presented)) {
      send_json(res, {{"error", no->error}, {"fix", no->fix}}, no->status);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (http_token_matches(access, presented.token_param))  // never an unchecked value
      res.set_header("Set-Cookie", std::string(kHttpTokenCookie) + "=" + presented.token_param +
                                       "; HttpOnly; SameSite=Strict; Path=/");
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

StatusServer::StatusServer(const std::string& address, uint16_t port,
                           std::function<Json()> status, DashboardApi dashboard,
                           HttpAccess access)
    : server_(std::make_unique<httplib::Server>()) {
  guard(std::move(access));
  serve_dashboard(*server_, dashboard);
  // Neither page may fail: bytes that are not UTF-8 are replaced, and a status that cannot be
  // gathered at all still answers (with the reason) instead of a 500.
  server_->Get("/status", [status](const httplib::Request&, httplib::Response& res) {
    std::string body;
    try {
      body = status().dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
    } catch (const std::exception& e) {
      body = Json{{"error", e.what()}}.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
    }
    res.set_content(body, "application/json");
  });
  // Liveness and readiness probes (kubelet sends the pod's address as Host and no token).
  server_->Get(kHealthPath, [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/metrics", [status](const httplib::Request&, httplib::Response& res) {
    std::string body;
    try {
      body = prometheus_text(status());
    } catch (const std::exception& e) {
      body = std::string("# the status could not be gathered: ") + e.what() + "\n";
    }
    res.set_content(body, "text/plain; version=0.0.4");
  });
  const int bound = port == 0 ? server_->bind_to_any_port(address.c_str())
                              : (server_->bind_to_port(address.c_str(), port) ? port : -1);
  if (bound <= 0)
    throw core::UserError("cannot serve HTTP on " + address + ":" + std::to_string(port),
                          "another dtraind may be running, or pick a free http.port");
  port_ = static_cast<uint16_t>(bound);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

StatusServer::~StatusServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dtrain::daemon
