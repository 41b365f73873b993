#include "daemon/http/status_server.h"

#include <httplib.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/util/error.h"

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

double number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

}  // namespace

std::string prometheus_text(const Json& status) {
  MetricsWriter m;
  const Json& node = status.value("node", Json::object());
  if (!node.empty()) {
    const std::string name = node.value("name", "");
    m.sample("dtrain_node_up", "gauge", "1 while this node's daemon runs",
             {{"node", name}}, 1);
    m.sample("dtrain_node_controller_connected", "gauge",
             "1 while the node is registered with the controller", {{"node", name}},
             node.value("controller_connected", false) ? 1 : 0);
    for (const Json& g : node.value("gpus", Json::array())) {
      const std::map<std::string, std::string> gl = {
          {"node", name}, {"gpu", std::to_string(g.value("index", 0))}, {"name", g.value("name", "")}};
      m.sample("dtrain_gpu_memory_bytes", "gauge", "memory of a GPU this node offers to jobs", gl,
               number(g, "memory_bytes"));
      m.sample("dtrain_gpu_memory_used_bytes", "gauge",
               "GPU memory dtrain's workers hold on it now", gl, number(g, "memory_used_bytes"));
    }
    for (const Json& job : node.value("jobs", Json::array())) {
      const std::map<std::string, std::string> l = {{"job", job.value("id", "")},
                                                    {"job_name", job.value("name", "")}};
      const Json& p = job["progress"];
      m.sample("dtrain_job_epoch", "gauge", "current epoch (1-based)", l, number(p, "epoch"));
      m.sample("dtrain_job_iteration", "gauge", "this node's iterations so far", l,
               number(p, "iteration"));
      m.sample("dtrain_job_loss", "gauge", "loss of the latest minibatch", l, number(p, "loss"));
      m.sample("dtrain_job_samples_per_second", "gauge", "this node's training throughput", l,
               number(p, "samples_per_sec"));
      m.sample("dtrain_job_diverging", "gauge",
               "1 while the smoothed training loss is far above its best (the job fails if an "
               "epoch ends so)", l, p.value("diverging", false) ? 1 : 0);
      for (const Json& w : job["workers"]) {
        auto wl = l;
        wl["worker"] = std::to_string(w.value("worker", 0));
        m.sample("dtrain_worker_tau", "gauge", "the worker's threshold at its latest step", wl,
                 number(w, "tau"));
        m.sample("dtrain_worker_density", "gauge", "fraction of parameters sent at its latest step",
                 wl, number(w, "density"));
        m.sample("dtrain_worker_residual_norm", "gauge", "L2 norm of the worker's residual", wl,
                 number(w, "residual_norm"));
        m.sample("dtrain_worker_bitmap", "gauge", "1 when the latest message was a bitmap", wl,
                 w.value("encoding", "") == "bitmap" ? 1 : 0);
        m.sample("dtrain_worker_message_bytes_total", "counter", "encoded bytes the worker produced",
                 wl, number(w, "message_bytes_total"));
        m.sample("dtrain_worker_messages_total", "counter", "messages the worker produced", wl,
                 number(w, "messages_total"));
      }
    }
    for (const Json& p : node.value("peers", Json::array())) {
      const std::map<std::string, std::string> l = {{"peer", std::to_string(p.value("peer", 0))}};
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
      for (const auto& [reason, count] : p.value("drops", Json::object()).items()) {
        auto dl = l;
        dl["reason"] = reason;
        m.sample("dtrain_transport_drops_total", "counter", "datagrams dropped, by reason", dl,
                 count.get<double>());
      }
      m.sample("dtrain_transport_rtt_microseconds", "gauge", "smoothed round-trip time", l,
               number(p, "rtt_us"));
      m.sample("dtrain_transport_peer_lost", "gauge", "1 while the peer is declared lost", l,
               p.value("lost", false) ? 1 : 0);
    }
  }
  if (status.contains("controller")) {
    const Json& c = status["controller"];
    std::map<std::string, int> states = {{"queued", 0}, {"running", 0}, {"succeeded", 0},
                                         {"failed", 0}, {"cancelled", 0}};
    for (const Json& j : c["jobs"]["jobs"]) ++states[j.value("state", "failed")];
    for (const auto& [state, count] : states)
      m.sample("dtrain_jobs", "gauge", "jobs the controller knows, by state", {{"state", state}},
               count);
    int alive = 0, lost = 0;
    for (const Json& n : c["nodes"]["nodes"]) (n.value("state", "") == "alive" ? alive : lost)++;
    m.sample("dtrain_nodes", "gauge", "member nodes, by state", {{"state", "alive"}}, alive);
    m.sample("dtrain_nodes", "gauge", "member nodes, by state", {{"state", "lost"}}, lost);
  }
  return m.text();
}

StatusServer::StatusServer(const std::string& address, uint16_t port,
                           std::function<Json()> status)
    : server_(std::make_unique<httplib::Server>()) {
  server_->Get("/status", [status](const httplib::Request&, httplib::Response& res) {
    res.set_content(status().dump(2) + "\n", "application/json");
  });
  server_->Get("/metrics", [status](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(status()), "text/plain; version=0.0.4");
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
