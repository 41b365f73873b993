#pragma once
// The controller role where standby controllers run (docs/architecture/daemon.md, "Standby
// controllers"). Every candidate runs the election (leader_election.h) on a thread of its own.
// The leader runs a Controller whose job records are in etcd, every write fenced by its lease
// (etcd_job_records.h); it starts as a restarted controller does, adopting the running jobs as
// their nodes register. A standby answers every connection with the leader's control address,
// which nodes and dtrain-submit follow. A term ends when the election says so, when a write
// was fenced out, or at a stop: the Controller abdicates (its sessions end without a word to the
// nodes, whose jobs keep training) and the next leader adopts the jobs.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/config/daemon_config.h"
#include "daemon/controller/controller.h"
#include "daemon/election/etcd_client.h"
#include "daemon/election/leader_election.h"
#include "transport/control/control_connection.h"

namespace dtrain::daemon {

class ElectedController {
 public:
  // `address`: this candidate's control address as nodes and clients reach it (host:port).
  // `clients_digest`: its client list's (ClientList::digest; every candidate reads its own
  // clients_dir), which the leader publishes and standbys compare. Throws core::UserError for
  // an endpoint it cannot use.
  ElectedController(const DaemonConfig& config, const std::string& address,
                    std::function<std::string()> clients_digest);
  ~ElectedController();

  // The leader's Controller serves it; a standby refuses it, naming the leader.
  void serve(transport::ControlConnection& c);
  // The term's Controller (nullptr on a standby), for /status and the dashboard.
  std::shared_ptr<Controller> current();
  // {"role", "leader", "error", "leading_since"} and, on the leader, the Controller's jobs and
  // nodes.
  Json status();
  // Ends the election: the leader resigns (a standby leads within a step, not a lease) and its
  // Controller abdicates, leaving the jobs to the next leader.
  void stop();

 private:
  void run();
  // After each step: a term begins or ends as the role says.
  void follow_role(LeaderElection::Role role);
  void begin_term();
  void end_term(const std::string& why);
  // A write of the term of `lease` was fenced out in some connection's thread: the loop ends
  // that term (a late report of an earlier term is ignored).
  void fenced(int64_t lease, const std::string& why);
  // A standby's answer: the leader's address, which the other side follows.
  void refuse(transport::ControlConnection& c);
  // Whether the term of `lease` may act now (this candidate leads with that lease, by its own
  // count).
  bool acts_now(int64_t lease) const;
  // The leader publishes its client list's digest (PREFIX/controller/clients); a standby says
  // when its own differs (a credential it would refuse or let in that the leader would not).
  void compare_clients(bool leads);

  DaemonConfig config_;
  std::string self_;  // "name host:port", the leader key's value
  EtcdHttpClient election_etcd_;
  std::function<std::string()> clients_digest_;
  std::string published_;  // the digest the leader last put
  LeaderElection election_;

  mutable std::mutex mutex_;  // guards the fields below
  std::shared_ptr<Controller> term_;
  std::string leader_, error_, fenced_;
  bool clients_match_ = true;
  double leading_since_ = 0;
  // Until when this candidate may act (steady clock, ns), 0 on a standby: read by every write.
  std::atomic<int64_t> acts_until_{0};
  std::atomic<int64_t> term_lease_{0};

  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// The control address ("host:port") at the end of a leader key's value ("name host:port").
std::string leader_address(const std::string& leader_value);

}  // namespace dtrain::daemon
