#pragma once
// dtraind's configuration file (YAML; docs/architecture/daemon.md, "Roles, ports and config"),
// validated like a job spec: every problem names the file, line, column, the key and the fix,
// before any socket is opened.
//
//   name: node-a                   # default: the host name
//   roles: [node, controller]      # node hosts workers; controller accepts jobs
//   data_dir: /var/lib/dtrain      # job state, logs, model files
//   key_file: /etc/dtrain/cluster.key
//   clients_dir: /etc/dtrain/clients  # controller: the client credentials it lets in (NAME.cred)
//   controller: 10.0.0.1:7070      # where a node registers (default: this machine); with
//                                  # standby controllers their list: [10.0.0.1:7070, ...]
//   controller_election: {etcd: [http://10.0.0.5:2379], lease_s: 5}  # controller: standbys
//   control: {address: 0.0.0.0, port: 7070}
//   data: {network: 10.0.0.0/16, port: 40123}    # or interface: eth0
//   http: {address: 127.0.0.1, port: 7080}   # beyond loopback: hosts: [names], token_file
//   threads: 0                     # compute threads jobs may use here (0: every core)
//   gpus: all                      # all | none | [0, 1]: the GPUs jobs may use here
//   task_outputs: [/shared/dtrain]  # controller: where eval/infer --cluster may write
//   data_roots: [/srv/datasets]    # node: where jobs may read inputs (default: data_dir and
//                                  # /usr/share/datasets)
//   limits: {default: {running_jobs: 2, nodes: 8}, users: {alice: {running_jobs: 4}}}
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/util/data_roots.h"
#include "transport/faults/fault_injector.h"

namespace dtrain::daemon {

// What one owner's jobs may hold at once on a controller (0: no limit). Jobs submitted with the
// cluster key have none.
struct UserLimits {
  int64_t running_jobs = 0;
  int64_t nodes = 0;
};
// Controller: the limits of every owner (`default`) and of named ones (`users`, each key it gives
// replacing the default's).
struct SchedulingLimits {
  UserLimits defaults;
  std::map<std::string, UserLimits> users;
  UserLimits of(const std::string& owner) const;
};

// One controller's control address.
struct ControllerAddress {
  std::string host;
  uint16_t port = 7070;
  std::string text() const { return host + ":" + std::to_string(port); }
};
// "host:port": split at the last colon, the host not empty, the port digits only in 1-65535.
// Without a colon, `default_port` when it is one (dtrain-submit's 7070), else nothing. Each
// caller says what was wrong in its own words (dtraind.yaml's key, --controller, a leader hint).
std::optional<ControllerAddress> parse_host_port(const std::string& text, int default_port = 0);

// Controller: standby controllers that elect their leader through etcd (docs/operations.md,
// "Standby controllers"); off (a single controller) without endpoints.
struct ControllerElection {
  std::vector<std::string> etcd;  // http://HOST:PORT of each etcd member
  int64_t lease_s = 5;            // how long a silent leader keeps the role
  std::string prefix = "/dtrain";  // the keys: PREFIX/controller/leader, PREFIX/jobs/ID
  // The host nodes and clients reach this candidate at, named to them by standbys (default
  // control.address, which must then not be 0.0.0.0).
  std::string address;
  bool enabled() const { return !etcd.empty(); }
};

struct DaemonConfig {
  std::string source;  // the file, for messages
  std::string name;
  bool node = true;
  bool controller = false;
  std::string data_dir = "/var/lib/dtrain";
  std::string key_file = "/etc/dtrain/cluster.key";
  std::string clients_dir;  // empty: no client credentials (only the cluster key)
  std::string controller_host = "127.0.0.1";
  uint16_t controller_port = 7070;
  // false when dtraind.yaml names no `controller`: a daemon that is the controller then reaches
  // its own control port, the one it bound (control.port: 0 lets the kernel pick it).
  bool controller_named = true;
  // Node: every controller it may register with, in order (the first is controller_host and
  // controller_port); more than one where standby controllers run.
  std::vector<ControllerAddress> controllers;
  ControllerElection election;
  std::string control_address = "0.0.0.0";
  uint16_t control_port = 7070;
  std::string data_network;  // CIDR or interface name; empty: the first suitable interface
  bool data_allow_excluded = false;  // allow lo/docker*/veth* (local clusters, tests)
  uint16_t data_port = 40123;
  // Memory for messages being reassembled, shared fairly between the peers sending them; a
  // message larger than it (a snapshot or an averaging round's parameters) cannot arrive.
  int64_t data_reassembly_mb = 512;
  // Threads beside the data channel's I/O thread that seal and check datagram tags
  // (transport::EndpointConfig::tag_threads): for nodes with cores to spare on a fast link.
  int64_t data_tag_threads = 0;
  // I/O threads of the data channel, each with a socket on the data port
  // (transport::EndpointConfig::lanes); the same on every node of a cluster.
  int64_t data_lanes = 1;
  // The MTU of the network between the nodes: the data channel's datagrams are this less
  // transport::kMtuOverhead, rounded down to a multiple of 8 (transport::datagram_for_mtu: 1,408
  // bytes at 1500). 9000 where every link and switch carries jumbo frames (docs/operations.md,
  // "Jumbo frames"); checked against the interface's MTU; the same on every node.
  int64_t data_mtu = 1500;
  // What a peer may have unacknowledged towards this node, per link
  // (transport::EndpointConfig::credit_window): one link carries at most this much a round
  // trip, 512 KiB = 10 MB/s at 50 ms, so long fat links want more (docs/operations.md, "Long
  // links"). The socket's receive buffer is asked for twice it.
  int64_t data_credit_kb = 512;
  // What that credit may grow to across a link with a long round trip
  // (transport::EndpointConfig::max_credit_window); the receive buffer is asked for it too, and
  // net.core.rmem_max caps both.
  int64_t data_max_credit_kb = 32 << 10;
  static constexpr int64_t kMaxDataLanes = 16;  // transport::kMaxLanes (node_agent.cc checks)
  // transport::kSmallestMtu (IPv6's least) and kLargestMtu (node_agent.cc checks).
  static constexpr int64_t kMinDataMtu = 1280, kMaxDataMtu = 9216;
  // Seeded faults on the data channel's send path (data.faults: drop, duplicate, reorder,
  // delay_us, seed): for tests of exactly-once delivery under loss; off unless configured, and
  // the node says so in its log and /status when on.
  transport::FaultSpec data_faults;
  std::string http_address = "127.0.0.1";
  uint16_t http_port = 7080;
  // Host names the status port answers besides loopback ones and its bound address; and, when it
  // is bound beyond loopback, the file of its token (empty: data_dir/http.token, made at the
  // first start). daemon/http/http_access.h.
  std::vector<std::string> http_hosts;
  std::string http_token_file;
  int64_t threads = 0;  // compute threads for jobs on this node; 0 = every core
  // GPUs jobs may use: every one found (all), none, or the listed CUDA device ordinals.
  enum class GpuChoice { kAll, kNone, kList };
  GpuChoice gpus = GpuChoice::kAll;
  std::vector<int> gpu_ids;  // kList
  // Controller: the folders under which cluster evaluation and inference jobs may write (infer
  // --output, eval --roc-csv), shared with every node; none by default.
  std::vector<std::string> task_outputs;
  SchedulingLimits limits;
  // Not from dtraind.yaml: dtraind's own binary, which the controller runs as the helper that
  // makes each job's NCCL id (daemon/controller/nccl_ids.h); empty: made in-process (tests).
  std::string helper_program;
  // Node: the folders jobs and tasks may read their inputs from (absolute; default data_dir and
  // /usr/share/datasets). What the daemon keeps in data_dir (jobs/, models/, tasks/,
  // controller/, http.token, node_id) is never an input: another job's model or the
  // controller's records cannot be named as data.
  std::vector<std::string> data_roots;
  core::DataRoots input_roots() const;
  int64_t heartbeat_ms = 1000;
  int64_t peer_timeout_ms = 10000;
  // Node: what one job's data may take in memory (core/train/data_memory.h); 0: three quarters
  // of the machine's memory.
  int64_t job_memory_mb = 0;
  int64_t job_memory_bytes() const;
};

// Throws core::SpecError (a UserError) naming the problem and the fix.
DaemonConfig load_daemon_config(const std::string& path);
DaemonConfig parse_daemon_config(const std::string& text, const std::string& source_name);

}  // namespace dtrain::daemon
