// dtraind's config: the sample in configs/dtraind parses; every mistake names the key and the fix.
#include <catch2/catch.hpp>

#include "daemon/config/daemon_config.h"
#include "core/spec/spec_reader.h"

using dtrain::daemon::parse_daemon_config;

namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_daemon_config(yaml, "d.yaml");
  } catch (const dtrain::core::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the sample daemon config parses", "[daemon]") {
  const auto c = dtrain::daemon::load_daemon_config("configs/dtraind/dtraind.yaml");
  CHECK(c.name == "node-a");
  CHECK(c.node);
  CHECK(c.controller);
  CHECK(c.controller_host == "10.0.0.1");
  CHECK(c.controller_port == 7070);
  CHECK(c.control_port == 7070);
  CHECK(c.data_network == "10.0.0.0/16");
  CHECK(c.data_port == 40123);
  CHECK(c.http_port == 7080);
  CHECK(c.peer_timeout_ms == 10000);
  CHECK(c.data_tag_threads == 0);
  CHECK(c.data_lanes == 1);
  CHECK(c.data_mtu == 1500);
}

TEST_CASE("defaults: a node of its own host, the documented ports", "[daemon]") {
  const auto c = parse_daemon_config("", "d.yaml");
  CHECK(c.node);
  CHECK_FALSE(c.controller);
  CHECK(c.control_port == 7070);
  CHECK(c.data_port == 40123);
  CHECK(c.http_address == "127.0.0.1");
  CHECK_FALSE(c.name.empty());
  CHECK(c.job_memory_mb == 0);
  CHECK(c.job_memory_bytes() > (int64_t(100) << 20));  // three quarters of the machine's
  const auto set = parse_daemon_config("job_memory_mb: 2048\n", "d.yaml");
  CHECK(set.job_memory_bytes() == (int64_t(2048) << 20));
  CHECK(error_of("job_memory_mb: -1\n").find("job_memory_mb: value -1 is out of range") !=
        std::string::npos);
}

TEST_CASE("daemon config mistakes name the key and the fix", "[daemon]") {
  CHECK(error_of("roles: [node, contoller]\n").find("unknown role 'contoller'") != std::string::npos);
  CHECK(error_of("roles: node\n").find("roles must be a list") != std::string::npos);
  CHECK(error_of("controler: x\n").find("controller") != std::string::npos);  // did you mean
  CHECK(error_of("controller: 10.0.0.1\n").find("is not host:port") != std::string::npos);
  CHECK(error_of("controller: 10.0.0.1:99999\n").find("is not host:port") != std::string::npos);
  CHECK(error_of("data: {network: 10.0.0.0/8, interface: eth0}\n").find("not both") !=
        std::string::npos);
  CHECK(error_of("data: {port: 70000}\n").find("data.port") != std::string::npos);
  CHECK(error_of("data: {tag_threads: 65}\n").find("data.tag_threads: value 65 is out of range") !=
        std::string::npos);
  // The key's path once (it used to read "threads.threads").
  CHECK(error_of("threads: -1\n").find("d.yaml:1:10: threads: value -1") != std::string::npos);
  CHECK(error_of("http: {port: x}\n").find(": http.port: expected") != std::string::npos);
  CHECK(error_of("data: {tag_threds: 2}\n").find("tag_threads") != std::string::npos);  // did you mean
  CHECK(parse_daemon_config("data: {tag_threads: 3}\n", "d.yaml").data_tag_threads == 3);
  CHECK(parse_daemon_config("data: {lanes: 4}\n", "d.yaml").data_lanes == 4);
  CHECK(parse_daemon_config("data: {mtu: 9000}\n", "d.yaml").data_mtu == 9000);
  CHECK(error_of("data: {mtu: 1279}\n").find("data.mtu: value 1279 is out of range") !=
        std::string::npos);
  CHECK(error_of("data: {mtu: 9217}\n").find("data.mtu: value 9217 is out of range") !=
        std::string::npos);
  CHECK(error_of("data: {mtu: jumbo}\n").find("data.mtu") != std::string::npos);
  CHECK(error_of("data: {lanes: 0}\n").find("data.lanes: value 0 is out of range") !=
        std::string::npos);
  CHECK(error_of("data: {lanes: 17}\n").find("data.lanes: value 17 is out of range") !=
        std::string::npos);
  CHECK(parse_daemon_config("", "d.yaml").data_credit_kb == 512);
  CHECK(parse_daemon_config("data: {credit_kb: 8192}\n", "d.yaml").data_credit_kb == 8192);
  CHECK(error_of("data: {credit_kb: 8}\n").find("data.credit_kb: value 8 is out of range") !=
        std::string::npos);
  CHECK(parse_daemon_config("", "d.yaml").data_max_credit_kb == 32768);
  CHECK(parse_daemon_config("data: {max_credit_kb: 4096}\n", "d.yaml").data_max_credit_kb == 4096);
  // A start above the default growth's end: the credit starts and stays there.
  CHECK(parse_daemon_config("data: {credit_kb: 65536}\n", "d.yaml").data_max_credit_kb == 65536);
  CHECK(error_of("data: {credit_kb: 8192, max_credit_kb: 4096}\n")
            .find("data.max_credit_kb: value 4096 is out of range") != std::string::npos);
  CHECK(error_of("heartbeat_ms: 1000\npeer_timeout_ms: 1500\n").find("at least twice") !=
        std::string::npos);
  CHECK(error_of("name: [oops\n").find("d.yaml:") != std::string::npos);
}

TEST_CASE("gpus: all by default, none, or a list of device numbers", "[daemon][gpu]") {
  using Choice = dtrain::daemon::DaemonConfig::GpuChoice;
  CHECK(parse_daemon_config("", "d.yaml").gpus == Choice::kAll);
  CHECK(parse_daemon_config("gpus: none\n", "d.yaml").gpus == Choice::kNone);
  const auto c = parse_daemon_config("gpus: [0, 2]\n", "d.yaml");
  CHECK(c.gpus == Choice::kList);
  CHECK(c.gpu_ids == std::vector<int>{0, 2});
  CHECK(error_of("gpus: some\n").find("gpus is 'some'") != std::string::npos);
  CHECK(error_of("gpus: [0, 0]\n").find("GPU 0 is listed twice") != std::string::npos);
  CHECK(error_of("gpus: [-1]\n").find("0 to 255") != std::string::npos);
  CHECK(error_of("gpus: []\n").find("gpus: [0, 1]") != std::string::npos);  // the fix
}

TEST_CASE("limits: a default for every owner, named users' keys replacing it", "[daemon]") {
  const auto c = parse_daemon_config(
      "limits:\n  default: {running_jobs: 2, nodes: 8}\n  users: {alice: {running_jobs: 4}}\n",
      "d.yaml");
  CHECK(c.limits.of("bob").running_jobs == 2);
  CHECK(c.limits.of("bob").nodes == 8);
  CHECK(c.limits.of("alice").running_jobs == 4);
  CHECK(c.limits.of("alice").nodes == 8);  // the default's, where alice's entry says nothing
  const auto none = parse_daemon_config("", "d.yaml");
  CHECK(none.limits.of("anyone").running_jobs == 0);  // no limit
  CHECK(error_of("limits: {default: {running_job: 1}}\n").find("running_jobs") !=
        std::string::npos);  // did you mean
  CHECK(error_of("limits: {users: [alice]}\n").find("limits.users must map client names") !=
        std::string::npos);
  CHECK(error_of("limits: {default: {nodes: -1}}\n").find("limits.default.nodes: value -1") !=
        std::string::npos);
}

TEST_CASE("controller: one address or a list of standby controllers", "[daemon]") {
  const auto one = parse_daemon_config("controller: 10.0.0.1:7071\n", "d.yaml");
  REQUIRE(one.controllers.size() == 1);
  CHECK(one.controllers[0].text() == "10.0.0.1:7071");
  CHECK(one.controller_host == "10.0.0.1");
  const auto three =
      parse_daemon_config("controller: [a:7070, b:7071, '[::1]:7072']\n", "d.yaml");
  REQUIRE(three.controllers.size() == 3);
  CHECK(three.controllers[1].text() == "b:7071");
  CHECK(three.controllers[2].host == "[::1]");
  CHECK(three.controller_host == "a");  // the first, for what reads one address
  CHECK(parse_daemon_config("", "d.yaml").controllers.size() == 1);  // this machine's
  CHECK(error_of("controller: []\n").find("a list of 1 to 16") != std::string::npos);
  CHECK(error_of("controller: [a:7070, b]\n").find("'b' is not host:port") != std::string::npos);
}

TEST_CASE("host:port, as dtraind.yaml, dtrain-submit and a standby's leader hint read it",
          "[daemon]") {
  auto parsed = [](const std::string& text, int default_port = 0) {
    const auto a = dtrain::daemon::parse_host_port(text, default_port);
    return a ? a->text() : std::string("none");
  };
  CHECK(parsed("10.0.0.1:7070") == "10.0.0.1:7070");
  CHECK(parsed("[::1]:7071") == "[::1]:7071");  // the last colon splits
  CHECK(parsed("ctl.example:1") == "ctl.example:1");
  CHECK(parsed("ctl.example:65535") == "ctl.example:65535");
  CHECK(parsed("ctl.example") == "none");
  CHECK(parsed("ctl.example", 7070) == "ctl.example:7070");
  CHECK(parsed("", 7070) == "none");
  CHECK(parsed(":7070") == "none");
  CHECK(parsed("h:") == "none");
  CHECK(parsed("h:0") == "none");
  CHECK(parsed("h:65536") == "none");
  CHECK(parsed("h:+80") == "none");
  CHECK(parsed("h:80x") == "none");
  CHECK(parsed("h: 80") == "none");
  CHECK(parsed("h:0000080") == "none");
}

TEST_CASE("controller_election: etcd endpoints, a lease, a prefix; controllers only",
          "[daemon]") {
  const auto c = parse_daemon_config(
      "roles: [controller]\ncontrol: {address: 10.0.0.1}\n"
      "controller_election: {etcd: [http://10.0.0.5:2379], lease_s: 3}\n",
      "d.yaml");
  CHECK(c.election.enabled());
  CHECK(c.election.lease_s == 3);
  CHECK(c.election.prefix == "/dtrain");
  CHECK_FALSE(parse_daemon_config("roles: [controller]\n", "d.yaml").election.enabled());
  const std::string base = "roles: [controller]\ncontrol: {address: 10.0.0.1}\n"
                           "controller_election: ";
  CHECK(error_of("controller_election: {etcd: [http://e:2379]}\n").find("is for controllers") !=
        std::string::npos);
  CHECK(error_of(base + "{etcd: []}\n").find("etcd must list 1 to 16") != std::string::npos);
  CHECK(error_of(base + "{lease_s: 5}\n").find("etcd must list") != std::string::npos);
  CHECK(error_of(base + "{etcd: [https://e:2379]}\n").find("not an etcd endpoint") !=
        std::string::npos);
  CHECK(error_of(base + "{etcd: [http://e:2379], lease_s: 1}\n").find("lease_s") !=
        std::string::npos);
  CHECK(error_of(base + "{etcd: [http://e:2379], prefix: dtrain/}\n").find("not a key prefix") !=
        std::string::npos);
  CHECK(error_of(base + "{etcd: [http://e:2379], leas_s: 4}\n").find("lease_s") !=
        std::string::npos);  // did you mean
  // Standbys name the leader's address to nodes: never "every interface".
  CHECK(c.election.address == "10.0.0.1");  // control.address
  CHECK(error_of("roles: [controller]\ncontroller_election: {etcd: [http://e:2379]}\n")
            .find("not an address nodes") != std::string::npos);  // control.address: 0.0.0.0
  const auto named = parse_daemon_config(base + "{etcd: [http://e:2379], address: head-1}\n",
                                         "d.yaml");
  CHECK(named.election.address == "head-1");
}
