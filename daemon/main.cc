// dtraind: the node daemon (daemon/README.md). `dtraind --config dtraind.yaml` runs the roles the
// config names (node, controller or both) until SIGTERM or SIGINT (SIGHUP reloads the client
// credentials of clients_dir); `dtraind keygen PATH` writes a new cluster key file (mode 0600)
// to copy to every machine, `dtraind keygen --client NAME PATH` a client credential.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/util/error.h"
#include "daemon/config/daemon_config.h"
#include "daemon/controller/controller.h"
#include "daemon/http/status_server.h"
#include "daemon/node/node_agent.h"
#include "transport/control/control_server.h"
#include "transport/security/client_credential.h"
#include "transport/security/cluster_key.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitBadInput = 2;

// The clients the controller lets in, reloaded on SIGHUP; read by every handshake.
class Clients {
 public:
  explicit Clients(std::string dir)
      : dir_(std::move(dir)),
        list_(std::make_shared<dtrain::transport::ClientList>(dtrain::transport::ClientList::load(dir_))) {}
  void reload() {
    try {
      auto fresh = std::make_shared<dtrain::transport::ClientList>(
          dtrain::transport::ClientList::load(dir_));
      std::lock_guard<std::mutex> lock(mutex_);
      list_ = fresh;
      spdlog::info("controller: {} client credentials in {}", fresh->size(), dir_);
    } catch (const std::exception& e) {
      spdlog::error("controller: clients_dir not reloaded, the previous list stays: {}", e.what());
    }
  }
  // Daemons prove themselves with the cluster key, clients with their listed credential.
  dtrain::transport::KeyLookup lookup(const dtrain::transport::ClusterKey& cluster_key) {
    using dtrain::transport::ControlIdentity;
    return [this, cluster_key](const ControlIdentity& who,
                               std::string& refusal) -> std::optional<dtrain::transport::ClusterKey> {
      if (who.role == ControlIdentity::Role::kDaemon) return cluster_key;
      std::shared_ptr<const dtrain::transport::ClientList> list;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        list = list_;
      }
      if (auto key = list->key_of(who.name)) return key;
      refusal = "client '" + who.name + "' is not listed in the controller's clients_dir" +
                (dir_.empty() ? " (none is configured)" : " (or was revoked)");
      return std::nullopt;
    };
  }

 private:
  std::string dir_;
  std::mutex mutex_;
  std::shared_ptr<const dtrain::transport::ClientList> list_;
};

int run_daemon(const std::string& config_path) {
  using namespace dtrain;
  daemon::DaemonConfig config;
  transport::ClusterKey key;
  std::unique_ptr<Clients> clients;
  try {
    config = daemon::load_daemon_config(config_path);
    key = transport::load_cluster_key(config.key_file);
    if (config.controller) clients = std::make_unique<Clients>(config.clients_dir);
    std::filesystem::create_directories(config.data_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtraind: %s\n", e.what());
    return kExitBadInput;
  }
  // Signals are taken by this thread alone (sigwait), never by a worker in the middle of a step.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<daemon::Controller> controller;
  std::unique_ptr<transport::ControlServer> control;
  std::unique_ptr<daemon::NodeAgent> node;
  std::unique_ptr<daemon::StatusServer> http;
  std::atomic<bool> stop{false};
  std::thread node_thread;
  try {
    if (config.controller) {
      controller = std::make_unique<daemon::Controller>(config);
      control = std::make_unique<transport::ControlServer>(
          config.control_address, config.control_port, clients->lookup(key),
          [&controller](transport::ControlConnection& c) { controller->serve(c); });
      controller->set_control_port(control->port());
      spdlog::info("controller: control channel on {}:{}", config.control_address, control->port());
      if (!config.controller_named) {  // this daemon's node reaches its own controller
        config.controller_host =
            config.control_address == "0.0.0.0" ? "127.0.0.1" : config.control_address;
        config.controller_port = control->port();
      }
    }
    if (config.node) {
      node = std::make_unique<daemon::NodeAgent>(config, key);
      node_thread = std::thread([&] { node->run(stop); });
    }
    http = std::make_unique<daemon::StatusServer>(config.http_address, config.http_port, [&] {
      daemon::Json status = daemon::Json::object();
      if (node) status["node"] = node->status();
      if (controller)
        status["controller"] = {{"jobs", controller->jobs_json()},
                                {"nodes", controller->nodes_json()}};
      return status;
    }, controller ? daemon::DashboardApi{
                        [&] { return controller->jobs_json()["jobs"]; },
                        [&] { return controller->nodes_json()["nodes"]; },
                        [&](uint64_t id) { return controller->dashboard_job(id); }}
                  : daemon::DashboardApi{});
    spdlog::info("status: http://{}:{}/status and /metrics", config.http_address, http->port());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtraind: %s\n", e.what());
    stop = true;
    if (node_thread.joinable()) node_thread.join();
    return kExitBadInput;
  }
  spdlog::info("dtraind {} ready (roles:{}{}, data_dir {})", config.name,
               config.node ? " node" : "", config.controller ? " controller" : "", config.data_dir);
  sd_notify(0, "READY=1");
  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGHUP)
    if (clients) clients->reload();
  spdlog::info("dtraind {}: {} received, shutting down", config.name,
               signal == SIGTERM ? "SIGTERM" : "SIGINT");
  sd_notify(0, "STOPPING=1");
  http.reset();
  if (controller) controller->stop();
  stop = true;
  if (node_thread.joinable()) node_thread.join();
  node.reset();
  if (control) control->stop();
  spdlog::info("dtraind {}: stopped", config.name);
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dtraind: the dtrain daemon. Runs on every machine of a cluster; hosts workers (role "
      "node) and/or accepts jobs and builds the mesh (role controller).\n\n"
      "  dtraind --config /etc/dtrain/dtraind.yaml   run until SIGTERM\n"
      "  dtraind keygen /etc/dtrain/cluster.key      make a cluster key (copy it to every "
      "machine, mode 0600)\n"
      "  dtraind keygen --client alice alice.cred    make a client credential for dtrain-submit "
      "(its copy goes in the controller's clients_dir)\n\n"
      "Ports: TCP 7070 control, UDP 40123 data, TCP 7080 status. Every key is in the sample "
      "config: /etc/dtrain/dtraind.yaml as the package installs it, configs/dtraind/ in the "
      "source. Under systemd: systemctl enable --now dtraind; journalctl -u dtraind.",
      "dtraind"};
  std::string config_path;
  app.add_option("--config", config_path, "daemon config (YAML)");
  auto* keygen = app.add_subcommand(
      "keygen", "write a new random cluster key file, or with --client a client credential (mode 0600)");
  std::string key_path, client_name;
  keygen->add_option("path", key_path, "where to write it (refuses to overwrite)")->required();
  keygen->add_option("--client", client_name,
                     "a credential for the client NAME (dtrain-submit --credential) instead of a "
                     "cluster key");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitBadInput;
  }
  if (*keygen) {
    try {
      if (client_name.empty())
        dtrain::transport::generate_cluster_key(key_path);
      else
        dtrain::transport::generate_client_credential(key_path, client_name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtraind keygen: %s\n", e.what());
      return kExitBadInput;
    }
    if (client_name.empty())
      std::printf("wrote %s (mode 0600): copy it to every machine of the cluster\n", key_path.c_str());
    else
      std::printf("wrote %s (mode 0600): give it to %s (dtrain-submit --credential %s), and put a "
                  "copy named %s.cred in the controller's clients_dir, then SIGHUP the controller\n",
                  key_path.c_str(), client_name.c_str(), key_path.c_str(), client_name.c_str());
    return kExitOk;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "%s\ndtraind: no config given\n  fix: dtraind --config /etc/dtrain/dtraind.yaml\n",
                 app.help().c_str());
    return kExitBadInput;
  }
  return run_daemon(config_path);
}
