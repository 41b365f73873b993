// `dtrain-submit timeline JOB > trace.json`: the job's stats history as Chrome trace events
// (the JSON Object Format that chrome://tracing and Perfetto open): a process per node, a
// track per worker with each recorded step split into wait, apply, data, compute and encode, and a
// transport track per peer with what the node sent to it and took from it (MB/s, from the
// per-second link samples) and its retransmissions. Horovod's timeline, for dtrain. Steps are
// every K-th one as the history keeps them (K = 1 for jobs up to 100,000 worker steps).
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "submit/cluster_commands.h"
#include "submit/controller_client.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {

using daemon::Json;

namespace {

// Column name -> index in a row (rows start with the node's name).
std::map<std::string, size_t> index_of(const Json& columns) {
  std::map<std::string, size_t> out;
  for (size_t i = 0; i < columns.size(); ++i) out[columns[i].get<std::string>()] = i;
  return out;
}

double number(const Json& v) { return v.is_number() ? v.get<double>() : 0.0; }

class Trace {
 public:
  // The process of `node` (its name), numbered in order of appearance.
  int process(const std::string& node) {
    auto [it, added] = pids_.emplace(node, int(pids_.size()) + 1);
    if (added) meta("process_name", it->second, 0, node);
    return it->second;
  }
  void thread(int pid, int tid, const std::string& name) {
    if (threads_.emplace(pid * 100000 + tid).second) meta("thread_name", pid, tid, name);
  }
  void span(int pid, int tid, const char* name, double ts_us, double dur_us, const Json& args) {
    if (dur_us <= 0) return;
    events_.push_back({{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", tid},
                       {"ts", ts_us}, {"dur", dur_us}, {"args", args}});
  }
  void counter(int pid, const std::string& name, double ts_us, const Json& args) {
    events_.push_back({{"name", name}, {"ph", "C"}, {"pid", pid}, {"ts", ts_us}, {"args", args}});
  }
  Json json() const { return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}}; }

 private:
  void meta(const char* kind, int pid, int tid, const std::string& name) {
    events_.push_back({{"name", kind}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                       {"args", {{"name", name}}}});
  }
  std::map<std::string, int> pids_;
  std::set<int64_t> threads_;
  Json events_ = Json::array();
};

// Worker tracks: tid = worker + 1 (tid 0 is the node's transport).
void add_steps(Trace& t, const Json& r, double origin_ms) {
  const auto c = index_of(r["step_columns"]);
  for (const Json& row : r["steps"]) {
    const int pid = t.process(row[0].get<std::string>());
    const int worker = int(number(row[c.at("worker")]));
    t.thread(pid, worker + 1, "worker " + std::to_string(worker));
    double at = (number(row[c.at("start_ms")]) - origin_ms) * 1000.0;
    const Json args = {{"iteration", number(row[c.at("iteration")])},
                       {"epoch", number(row[c.at("epoch")])},
                       {"loss", row[c.at("loss")]}};
    for (const char* phase : {"wait", "apply", "data", "compute", "encode"}) {
      const double dur = number(row[c.at(std::string(phase) + "_ms")]) * 1000.0;
      t.span(pid, worker + 1, phase, at, dur, args);
      at += std::max(0.0, dur);
    }
  }
}

// Transport: a counter per peer, the rates between successive cumulative samples.
void add_links(Trace& t, const Json& r, double origin_ms) {
  const auto c = index_of(r["link_columns"]);
  const Json& names = r.value("node_names", Json::object());
  std::map<std::pair<std::string, double>, Json> last;  // (node, peer) -> previous row
  for (const Json& row : r["links"]) {
    const std::string node = row[0].get<std::string>();
    const double peer = number(row[c.at("peer")]);
    const std::string id = std::to_string(int64_t(peer));
    const std::string peer_name = names.value(id, "node " + id);
    const int pid = t.process(node);
    t.thread(pid, 0, "transport");
    auto it = last.find({node, peer});
    if (it != last.end()) {
      const Json& prev = it->second;
      const double dt = (number(row[c.at("time_ms")]) - number(prev[c.at("time_ms")])) / 1000.0;
      if (dt > 0) {
        auto rate = [&](const char* col) {
          return (number(row[c.at(col)]) - number(prev[c.at(col)])) / dt / 1e6;
        };
        t.counter(pid, "MB/s with " + peer_name,
                  (number(row[c.at("time_ms")]) - origin_ms) * 1000.0,
                  {{"sent", rate("bytes_out")}, {"received", rate("bytes_in")},
                   {"retransmits/s", rate("retransmits") * 1e6}});
      }
    }
    last[{node, peer}] = row;
  }
}

}  // namespace

int run_cluster_timeline(const ClusterArgs& a, const std::string& job) {
  uint64_t id = 0;
  if (!job_id_arg(job, id)) return kExitBadInput;
  Json r;
  try {
    r = call(a, daemon::client_request(daemon::RequestKind::Stats, id), nullptr,
             std::chrono::seconds(120));
  } catch (const std::exception& e) {
    return report_error(e);
  }
  // Times from the job's first recorded step (the nodes' clocks, which NTP keeps together).
  double origin = 0;
  const auto sc = index_of(r["step_columns"]);
  for (const Json& row : r["steps"]) {
    const double s = number(row[sc.at("start_ms")]);
    if (s > 0 && (origin == 0 || s < origin)) origin = s;
  }
  Trace trace;
  add_steps(trace, r, origin);
  add_links(trace, r, origin);
  std::printf("%s\n", trace.json().dump().c_str());
  if (r["steps"].empty())
    std::fprintf(stderr, "job %s has no recorded steps (not trained yet?): the trace is empty\n",
                 job.c_str());
  return kExitSuccess;
}

}  // namespace dtrain::submit
