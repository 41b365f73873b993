#include "daemon/config/daemon_config.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/spec/spec_reader.h"
#include "daemon/election/etcd_client.h"

namespace dtrain::daemon {
namespace {

using core::SpecReader;

// "host:port" (port required) at `at` (a scalar), for the key `key`.
ControllerAddress host_port(const SpecReader& r, const YAML::Node& at, const std::string& key) {
  const std::string value = at.IsScalar() ? at.as<std::string>() : "";
  const std::optional<ControllerAddress> address = parse_host_port(value);
  if (!address)
    r.fail(at, key, "'" + value + "' is not host:port",
           "write it like 10.0.0.1:7070 (the controller's control port)");
  return *address;
}

// controller: HOST:PORT, or a list of them (standby controllers, tried in turn).
void parse_controllers(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  const YAML::Node n = root["controller"];
  c.controller_named = bool(n);
  if (!n) {
    c.controllers = {{c.controller_host, c.controller_port}};
    return;
  }
  if (n.IsSequence()) {
    if (n.size() == 0 || n.size() > 16)
      r.fail(n, "controller", "controller must be HOST:PORT or a list of 1 to 16 of them",
             "write controller: [10.0.0.1:7070, 10.0.0.2:7070]");
    for (const YAML::Node& item : n) c.controllers.push_back(host_port(r, item, "controller"));
  } else {
    c.controllers = {host_port(r, n, "controller")};
  }
  c.controller_host = c.controllers[0].host;
  c.controller_port = c.controllers[0].port;
}

// controller_election: {etcd: [http://HOST:PORT, ...], lease_s, prefix}.
void parse_election(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  const YAML::Node n = root["controller_election"];
  if (!n) return;
  r.expect_map(n, "controller_election", {"etcd", "lease_s", "prefix", "address"});
  if (!c.controller)
    r.fail(n, "controller_election", "controller_election is for controllers",
           "add controller to roles, or leave controller_election out on nodes");
  const YAML::Node etcd = n["etcd"];
  if (!etcd || !etcd.IsSequence() || etcd.size() == 0 || etcd.size() > 16)
    r.fail(etcd ? etcd : n, "controller_election.etcd", "etcd must list 1 to 16 endpoints",
           "write etcd: [http://10.0.0.5:2379] (each member's client URL)");
  for (const YAML::Node& e : etcd) {
    const std::string url = e.IsScalar() ? e.as<std::string>() : "";
    try {
      parse_etcd_endpoint(url);
    } catch (const core::UserError& bad) {
      r.fail(e, "controller_election.etcd", bad.what_happened(), bad.fix());
    }
    c.election.etcd.push_back(url);
  }
  c.election.lease_s = r.integer(n, "lease_s", "controller_election", c.election.lease_s, 2, 60);
  c.election.prefix = r.text(n, "prefix", "controller_election", c.election.prefix);
  const std::string& p = c.election.prefix;
  if (p.size() < 2 || p.size() > 200 || p[0] != '/' || p.back() == '/' ||
      p.find_first_of(" \t\n") != std::string::npos)
    r.fail(n["prefix"], "controller_election.prefix", "'" + p + "' is not a key prefix",
           "write prefix: /dtrain (a '/' first, none last; one per cluster sharing an etcd)");
  // Standbys send nodes and clients to the leader's address: it must be one they can reach.
  c.election.address = r.text(n, "address", "controller_election", c.control_address);
  const std::string& a = c.election.address;
  if (a.empty() || a == "0.0.0.0" || a == "::" || a.size() > 253 ||
      a.find_first_of(" \t\n,") != std::string::npos)
    r.fail(n["address"] ? n["address"] : n, "controller_election.address",
           "'" + a + "' is not an address nodes and clients can reach this controller at",
           "bind control.address to this machine's cluster address, or give "
           "controller_election.address (e.g. address: 10.0.0.1)");
}

// gpus: all | none | [ordinals]. Whether the listed GPUs exist is checked when the node starts
// (daemon/node/gpu_inventory), not here: a config is valid on any machine.
void parse_gpus(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  const YAML::Node n = root["gpus"];
  if (!n) return;
  const std::string fix = "write gpus: all (every GPU found), gpus: none, or a list of CUDA "
                          "device numbers such as gpus: [0, 1]";
  if (n.IsScalar()) {
    const std::string v = n.as<std::string>();
    if (v == "all") c.gpus = DaemonConfig::GpuChoice::kAll;
    else if (v == "none") c.gpus = DaemonConfig::GpuChoice::kNone;
    else r.fail(n, "gpus", "gpus is '" + v + "'", fix);
    return;
  }
  if (!n.IsSequence() || n.size() == 0) r.fail(n, "gpus", "gpus must be all, none or a list", fix);
  c.gpus = DaemonConfig::GpuChoice::kList;
  for (const YAML::Node& item : n) {
    int64_t id = -1;
    try {
      id = item.IsScalar() ? item.as<int64_t>() : -1;
    } catch (const YAML::Exception&) {
      id = -1;
    }
    if (id < 0 || id > 255) r.fail(item, "gpus", "a GPU number must be 0 to 255", fix);
    for (int seen : c.gpu_ids)
      if (seen == id) r.fail(item, "gpus", "GPU " + std::to_string(id) + " is listed twice", fix);
    c.gpu_ids.push_back(int(id));
  }
}

// name and roles: who this daemon is.
void parse_identity(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  char host[256] = "dtrain-node";
  gethostname(host, sizeof host - 1);
  c.name = r.text(root, "name", "", std::string(host));
  if (c.name.empty() || c.name.size() > 64)
    r.fail(root["name"], "name", "the node name must be 1 to 64 characters",
           "use the host name or a short label such as node-a");
  const YAML::Node roles = root["roles"];
  if (!roles) return;
  if (!roles.IsSequence() || roles.size() == 0)
    r.fail(roles, "roles", "roles must be a list: [node], [controller] or [node, controller]",
           "write roles: [node, controller] for a one-machine cluster");
  c.node = c.controller = false;
  for (const YAML::Node& role : roles) {
    const std::string name = role.IsScalar() ? role.as<std::string>() : "";
    if (name == "node") c.node = true;
    else if (name == "controller") c.controller = true;
    else r.fail(role, "roles", "unknown role '" + name + "'", "roles are node and controller");
  }
}

// `key`: a list of absolute folders (`example` one of them, for the fixes).
std::vector<std::string> absolute_folders(const SpecReader& r, const YAML::Node& list,
                                          const std::string& key, const std::string& example) {
  if (!list.IsSequence())
    r.fail(list, key, key + " must be a list of folders", "write " + key + ": [" + example + "]");
  std::vector<std::string> out;
  for (const YAML::Node& o : list) {
    const std::string folder = o.IsScalar() ? o.as<std::string>() : "";
    if (folder.empty() || folder[0] != '/')
      r.fail(o, key, "'" + folder + "' is not an absolute folder",
             "give absolute paths, e.g. " + example);
    out.push_back(folder);
  }
  return out;
}

// data_dir, key_file, clients_dir, task_outputs, data_roots: where it keeps things, may write
// task outputs, and lets jobs read inputs (default: data_dir and /usr/share/datasets).
void parse_paths(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  c.data_dir = r.text(root, "data_dir", "", c.data_dir);
  c.key_file = r.text(root, "key_file", "", c.key_file);
  c.clients_dir = r.text(root, "clients_dir", "", c.clients_dir);
  if (const YAML::Node outputs = root["task_outputs"])
    c.task_outputs = absolute_folders(r, outputs, "task_outputs", "/shared/dtrain-out");
  c.data_roots = {c.data_dir, "/usr/share/datasets"};
  if (const YAML::Node roots = root["data_roots"])
    c.data_roots = absolute_folders(r, roots, "data_roots", "/srv/datasets");
}

// limits.default and limits.users.NAME: {running_jobs, nodes}.
UserLimits parse_user_limits(const SpecReader& r, const YAML::Node& n, const std::string& p,
                             const UserLimits& base) {
  r.expect_map(n, p, {"running_jobs", "nodes"});
  UserLimits u;
  u.running_jobs = r.integer(n, "running_jobs", p, base.running_jobs, 0, 1 << 20);
  u.nodes = r.integer(n, "nodes", p, base.nodes, 0, 1 << 20);
  return u;
}

void parse_limits(const SpecReader& r, const YAML::Node& n, SchedulingLimits& limits) {
  r.expect_map(n, "limits", {"default", "users"});
  if (const YAML::Node d = n["default"])
    limits.defaults = parse_user_limits(r, d, "limits.default", UserLimits{});
  const YAML::Node users = n["users"];
  if (!users) return;
  if (!users.IsMap())
    r.fail(users, "limits.users", "limits.users must map client names to their limits",
           "write users: {alice: {running_jobs: 1, nodes: 4}}");
  for (const auto& entry : users) {
    const std::string name = entry.first.as<std::string>();
    limits.users[name] =
        parse_user_limits(r, entry.second, "limits.users." + name, limits.defaults);
  }
}

// data.faults: the transport's seeded fault injector, for tests of delivery under loss.
void parse_faults(const SpecReader& r, const YAML::Node& f, transport::FaultSpec& faults) {
  const std::string p = "data.faults";
  r.expect_map(f, p, {"drop", "duplicate", "reorder", "delay_us", "seed"});
  faults.drop = r.number(f, "drop", p, 0.0, 0.0, 0.5, false);
  faults.duplicate = r.number(f, "duplicate", p, 0.0, 0.0, 0.5, false);
  faults.reorder = r.number(f, "reorder", p, 0.0, 0.0, 0.5, false);
  faults.delay = std::chrono::microseconds(r.integer(f, "delay_us", p, 0, 0, 10000000));
  faults.seed = uint64_t(r.integer(f, "seed", p, 1, 0, int64_t(1) << 62));
}

uint16_t port_of(const SpecReader& r, const YAML::Node& map, const std::string& path,
                 uint16_t fallback) {
  return static_cast<uint16_t>(r.integer(map, "port", path, fallback, 0, 65535));
}

// data: the UDP data channel.
void parse_data(const SpecReader& r, const YAML::Node& n, DaemonConfig& c) {
  r.expect_map(n, "data", {"network", "interface", "port", "allow_loopback", "reassembly_mb",
                           "tag_threads", "lanes", "mtu", "credit_kb", "max_credit_kb",
                           "faults"});
  if (n["network"] && n["interface"])
    r.fail(n, "data", "give data.network or data.interface, not both",
           "keep the one that identifies the cluster network");
  c.data_network = r.text(n, n["interface"] ? "interface" : "network", "data", "");
  c.data_allow_excluded = r.boolean(n, "allow_loopback", "data", false);
  c.data_port = port_of(r, n, "data", c.data_port);
  c.data_reassembly_mb = r.integer(n, "reassembly_mb", "data", c.data_reassembly_mb, 1, 1 << 20);
  c.data_tag_threads = r.integer(n, "tag_threads", "data", c.data_tag_threads, 0, 64);
  c.data_lanes = r.integer(n, "lanes", "data", c.data_lanes, 1, DaemonConfig::kMaxDataLanes);
  c.data_mtu = r.integer(n, "mtu", "data", c.data_mtu, DaemonConfig::kMinDataMtu,
                         DaemonConfig::kMaxDataMtu);
  c.data_credit_kb = r.integer(n, "credit_kb", "data", c.data_credit_kb, 64, 1 << 19);
  c.data_max_credit_kb =
      r.integer(n, "max_credit_kb", "data", std::max(c.data_max_credit_kb, c.data_credit_kb),
                c.data_credit_kb, 1 << 19);
  if (const YAML::Node f = n["faults"]) parse_faults(r, f, c.data_faults);
}

// controller, control, data, http: whom it talks to and where it listens.
void parse_network(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  parse_controllers(r, root, c);
  if (const YAML::Node n = root["control"]) {
    r.expect_map(n, "control", {"address", "port"});
    c.control_address = r.text(n, "address", "control", c.control_address);
    c.control_port = port_of(r, n, "control", c.control_port);
  }
  if (const YAML::Node n = root["data"]) parse_data(r, n, c);
  if (const YAML::Node n = root["http"]) {
    r.expect_map(n, "http", {"address", "port", "hosts", "token_file"});
    c.http_address = r.text(n, "address", "http", c.http_address);
    c.http_port = port_of(r, n, "http", c.http_port);
    c.http_token_file = r.text(n, "token_file", "http", c.http_token_file);
    if (const YAML::Node hosts = n["hosts"]) {
      if (!hosts.IsSequence())
        r.fail(hosts, "http.hosts", "http.hosts must be a list of host names",
               "write hosts: [dtrain-head.example.org]");
      for (const YAML::Node& h : hosts) {
        const std::string name = h.IsScalar() ? h.as<std::string>() : "";
        if (name.empty() || name.size() > 253)
          r.fail(h, "http.hosts", "'" + name + "' is not a host name",
                 "give the names browsers and scrapers use for this machine");
        c.http_hosts.push_back(name);
      }
    }
  }
}

// threads, gpus, job_memory_mb, heartbeat_ms, peer_timeout_ms: what jobs may use and how soon
// a peer is lost.
void parse_resources(const SpecReader& r, const YAML::Node& root, DaemonConfig& c) {
  c.threads = r.integer(root, "threads", "", c.threads, 0, 4096);
  c.job_memory_mb = r.integer(root, "job_memory_mb", "", c.job_memory_mb, 0, int64_t(1) << 30);
  parse_gpus(r, root, c);
  c.heartbeat_ms = r.integer(root, "heartbeat_ms", "", c.heartbeat_ms, 50, 60000);
  c.peer_timeout_ms = r.integer(root, "peer_timeout_ms", "", c.peer_timeout_ms, 500, 600000);
  if (c.peer_timeout_ms < 2 * c.heartbeat_ms)
    r.fail(root["peer_timeout_ms"], "peer_timeout_ms",
           "peer_timeout_ms must be at least twice heartbeat_ms",
           "raise peer_timeout_ms (default 10000) or lower heartbeat_ms (default 1000)");
}

}  // namespace

std::optional<ControllerAddress> parse_host_port(const std::string& text, int default_port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    if (text.empty() || default_port < 1 || default_port > 65535) return std::nullopt;
    return ControllerAddress{text, uint16_t(default_port)};
  }
  const std::string digits = text.substr(colon + 1);
  if (colon == 0 || digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int port = std::stoi(digits);
  if (port < 1 || port > 65535) return std::nullopt;
  return ControllerAddress{text.substr(0, colon), uint16_t(port)};
}

int64_t DaemonConfig::job_memory_bytes() const {
  if (job_memory_mb > 0) return job_memory_mb << 20;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page / 4 * 3 : 0;
}

DaemonConfig parse_daemon_config(const std::string& text, const std::string& source_name) {
  SpecReader r(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw core::SpecError(source_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                              std::to_string(e.mark.column + 1),
                          "not valid YAML: " + e.msg, "fix the syntax at that position");
  }
  DaemonConfig c;
  c.source = source_name;
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  r.expect_map(root, "", {"name", "roles", "data_dir", "key_file", "clients_dir", "controller",
                          "control", "data", "http", "threads", "gpus", "heartbeat_ms",
                          "peer_timeout_ms", "task_outputs", "limits", "data_roots",
                          "job_memory_mb", "controller_election"});
  parse_identity(r, root, c);
  parse_paths(r, root, c);
  parse_network(r, root, c);
  parse_resources(r, root, c);
  parse_election(r, root, c);
  if (const YAML::Node n = root["limits"]) parse_limits(r, n, c.limits);
  return c;
}

core::DataRoots DaemonConfig::input_roots() const {
  // What the daemon keeps in data_dir is nobody's input: jobs' models and checkpoints, models
  // of earlier releases, tasks' shipped models, the controller's records, the token, the id.
  return core::DataRoots{data_roots,
                         {data_dir + "/jobs", data_dir + "/models", data_dir + "/tasks",
                          data_dir + "/controller", data_dir + "/http.token",
                          data_dir + "/node_id"}};
}

UserLimits SchedulingLimits::of(const std::string& owner) const {
  auto it = users.find(owner);
  return it == users.end() ? defaults : it->second;
}

DaemonConfig load_daemon_config(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw core::UserError("cannot read the daemon config '" + path + "'",
                          "give an existing file with --config (a sample is "
                          "configs/dtraind/dtraind.yaml)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_daemon_config(text.str(), path);
}

}  // namespace dtrain::daemon
