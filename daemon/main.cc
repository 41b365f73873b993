// dtraind: the node daemon (docs/architecture/daemon.md). `dtraind --config dtraind.yaml` runs the
// roles the config names (node, controller or both) until SIGTERM or SIGINT (SIGHUP reloads the
// client credentials of clients_dir); `dtraind keygen PATH` writes a new cluster key file (mode
// 0600) to copy to every machine, `dtraind keygen --client NAME PATH` a client credential.
#include <signal.h>
#include <unistd.h>
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
#include "daemon/controller/nccl_ids.h"
#include "daemon/election/elected_controller.h"
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
  // The list's digest (ClientList::digest), for standby controllers' comparison.
  std::string digest() {
    std::lock_guard<std::mutex> lock(mutex_);
    return list_->digest();
  }
  // Daemons prove themselves with the cluster key, clients with their listed credential.
  dtrain::transport::KeyLookup lookup(const dtrain::transport::ClusterKey& cluster_key) {
    using dtrain::transport::ControlIdentity;
    return [this, cluster_key](ControlIdentity& who,
                               std::string& refusal) -> std::optional<dtrain::transport::ClusterKey> {
      if (who.role == ControlIdentity::Role::kDaemon) return cluster_key;
      std::shared_ptr<const dtrain::transport::ClientList> list;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        list = list_;
      }
      if (auto key = list->key_of(who.name)) {
        who.operator_role = list->is_operator(who.name);
        return key;
      }
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

// The roles the config names, started in order and stopped in reverse.
class Daemon {
 public:
  // The config, key and client list; false (said on stderr) when one cannot be read.
  bool load(const std::string& config_path);
  // Starts the controller, the node and the status server; false (said) when one cannot start.
  bool start();
  // Until SIGTERM or SIGINT (SIGHUP reloads the client credentials).
  void wait_for_stop(sigset_t& signals);
  void stop();

 private:
  void start_controller();
  // With controller_election: this daemon is one candidate (docs/operations.md, "Standby
  // controllers").
  void start_candidate();
  void start_status_server();
  dtrain::daemon::Json controller_status();
  dtrain::daemon::DashboardApi dashboard_api();
  dtrain::daemon::HttpAccess http_access() const;

  dtrain::daemon::DaemonConfig config_;
  dtrain::transport::ClusterKey key_;
  std::unique_ptr<Clients> clients_;
  std::unique_ptr<dtrain::daemon::Controller> controller_;
  std::unique_ptr<dtrain::daemon::ElectedController> elected_;
  std::atomic<dtrain::daemon::ElectedController*> candidate_{nullptr};  // elected_, once made
  std::unique_ptr<dtrain::transport::ControlServer> control_;
  std::unique_ptr<dtrain::daemon::NodeAgent> node_;
  std::unique_ptr<dtrain::daemon::StatusServer> http_;
  std::atomic<bool> stop_{false};
  std::thread node_thread_;
};

bool Daemon::load(const std::string& config_path) {
  using namespace dtrain;
  try {
    config_ = daemon::load_daemon_config(config_path);
    // This binary even after an upgrade replaced its file (its resolved path then ends in
    // " (deleted)"): a spawned child runs what /proc/self/exe is for its parent.
    config_.helper_program = "/proc/self/exe";
    key_ = transport::load_cluster_key(config_.key_file);
    if (config_.controller) clients_ = std::make_unique<Clients>(config_.clients_dir);
    std::filesystem::create_directories(config_.data_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtraind: %s\n", e.what());
    return false;
  }
  return true;
}

void Daemon::start_controller() {
  using namespace dtrain;
  if (!config_.election.enabled()) controller_ = std::make_unique<daemon::Controller>(config_);
  control_ = std::make_unique<transport::ControlServer>(
      config_.control_address, config_.control_port, clients_->lookup(key_),
      [this](transport::ControlConnection& c) {
        if (controller_) controller_->serve(c);
        else if (daemon::ElectedController* e = candidate_.load()) e->serve(c);
      });
  if (controller_) controller_->set_control_port(control_->port());
  spdlog::info("controller: control channel on {}:{}", config_.control_address, control_->port());
  if (!config_.controller_named) {  // this daemon's node reaches its own controller
    config_.controller_host =
        config_.control_address == "0.0.0.0" ? "127.0.0.1" : config_.control_address;
    config_.controller_port = control_->port();
    config_.controllers = {{config_.controller_host, config_.controller_port}};
  }
  if (config_.election.enabled()) start_candidate();
}

void Daemon::start_candidate() {
  // Where nodes and clients reach this candidate (controller_election.address, checked).
  elected_ = std::make_unique<dtrain::daemon::ElectedController>(
      config_, config_.election.address + ":" + std::to_string(control_->port()),
      [this] { return clients_->digest(); });
  candidate_ = elected_.get();
}

dtrain::daemon::Json Daemon::controller_status() {
  if (elected_) return elected_->status();
  return {{"jobs", controller_->jobs_json()}, {"nodes", controller_->nodes_json()}};
}

// The dashboard's view: the controller's, or the elected one's while it leads (empty lists on a
// standby).
dtrain::daemon::DashboardApi Daemon::dashboard_api() {
  using dtrain::daemon::Json;
  if (controller_)
    return {[this] { return controller_->jobs_json()["jobs"]; },
            [this] { return controller_->nodes_json()["nodes"]; },
            [this](uint64_t id) { return controller_->dashboard_job(id); }};
  if (!elected_) return {};
  return {[this] {
            auto term = elected_->current();
            return term ? term->jobs_json()["jobs"] : Json::array();
          },
          [this] {
            auto term = elected_->current();
            return term ? term->nodes_json()["nodes"] : Json::array();
          },
          [this](uint64_t id) {
            auto term = elected_->current();
            if (!term)
              throw dtrain::core::UserError("this controller is a standby",
                                            "open the leader's dashboard (its /status names it)");
            return term->dashboard_job(id);
          }};
}

void Daemon::start_status_server() {
  using namespace dtrain;
  auto status = [this] {
    daemon::Json j = daemon::Json::object();
    if (node_) j["node"] = node_->status();
    if (controller_ || elected_) j["controller"] = controller_status();
    return j;
  };
  const daemon::DashboardApi dashboard = dashboard_api();
  http_ = std::make_unique<daemon::StatusServer>(config_.http_address, config_.http_port, status,
                                                 dashboard, http_access());
  spdlog::info("status: http://{}:{}/status and /metrics", config_.http_address, http_->port());
}

// The Host names the status port answers, and its token when it is bound beyond loopback
// (docs/operations.md, "The HTTP port").
dtrain::daemon::HttpAccess Daemon::http_access() const {
  dtrain::daemon::HttpAccess access;
  access.hosts = config_.http_hosts;
  access.hosts.push_back(config_.http_address);
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0 && host[0]) access.hosts.push_back(host);
  if (dtrain::daemon::loopback_address(config_.http_address)) return access;
  const std::string path = config_.http_token_file.empty() ? config_.data_dir + "/http.token"
                                                           : config_.http_token_file;
  access.token = dtrain::daemon::load_or_make_http_token(path);
  spdlog::info("status: bound beyond loopback, so requests need the token in {} "
               "(Authorization: Bearer TOKEN, or /?token=TOKEN once in a browser)", path);
  return access;
}

bool Daemon::start() {
  try {
    if (config_.controller) start_controller();
    if (config_.node) {
      node_ = std::make_unique<dtrain::daemon::NodeAgent>(config_, key_);
      node_thread_ = std::thread([this] { node_->run(stop_); });
    }
    start_status_server();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtraind: %s\n", e.what());
    stop_ = true;
    if (node_thread_.joinable()) node_thread_.join();
    return false;
  }
  spdlog::info("dtraind {} ready (roles:{}{}, data_dir {})", config_.name,
               config_.node ? " node" : "", config_.controller ? " controller" : "",
               config_.data_dir);
  return true;
}

void Daemon::wait_for_stop(sigset_t& signals) {
  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGHUP)
    if (clients_) clients_->reload();
  spdlog::info("dtraind {}: {} received, shutting down", config_.name,
               signal == SIGTERM ? "SIGTERM" : "SIGINT");
}

void Daemon::stop() {
  http_.reset();
  if (controller_) controller_->stop();
  if (elected_) elected_->stop();  // resigns: a standby takes the jobs over
  stop_ = true;
  if (node_thread_.joinable()) node_thread_.join();
  node_.reset();
  if (control_) control_->stop();
  spdlog::info("dtraind {}: stopped", config_.name);
}

int run_daemon(const std::string& config_path) {
  Daemon daemon;
  if (!daemon.load(config_path)) return kExitBadInput;
  // Signals are taken by this thread alone (sigwait), never by a worker in the middle of a step.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!daemon.start()) return kExitBadInput;
  sd_notify(0, "READY=1");
  daemon.wait_for_stop(signals);
  sd_notify(0, "STOPPING=1");
  daemon.stop();
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
      "(its copy goes in the controller's clients_dir)\n"
      "  dtraind keygen --client carol --operator carol.cred   the same for an operator, who may "
      "act on every user's jobs\n\n"
      "Ports: TCP 7070 control, UDP 40123 data, TCP 7080 status. Every key is in the sample "
      "config: /etc/dtrain/dtraind.yaml as the package installs it, configs/dtraind/ in the "
      "source. Under systemd: systemctl enable --now dtraind; journalctl -u dtraind.",
      "dtraind"};
  std::string config_path;
  app.add_option("--config", config_path, "daemon config (YAML)");
  auto* keygen = app.add_subcommand(
      "keygen", "write a new random cluster key file, or with --client a client credential (mode 0600)");
  std::string key_path, client_name;
  bool operator_role = false;
  keygen->add_option("path", key_path, "where to write it (refuses to overwrite)")->required();
  auto* client_option = keygen->add_option(
      "--client", client_name,
      "a credential for the client NAME (dtrain-submit --credential) instead of a cluster key");
  keygen->add_flag("--operator", operator_role,
                   "with --client: an operator's credential, which may cancel, resume, fetch and "
                   "read every user's jobs (others act on their own only)")
      ->needs(client_option);
  auto* nccl_id = app.add_subcommand(
      "nccl-id", "internal: the controller's helper that makes a job's NCCL id and serves its "
                 "bootstrap until its stdin ends (docs/architecture/daemon.md)");
  nccl_id->group("");  // not listed in --help: only the controller runs it
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitBadInput;
  }
  if (*nccl_id) return dtrain::daemon::run_nccl_id_helper();
  if (*keygen) {
    try {
      if (client_name.empty())
        dtrain::transport::generate_cluster_key(key_path);
      else
        dtrain::transport::generate_client_credential(key_path, client_name, operator_role);
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
