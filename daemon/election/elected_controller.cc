#include "daemon/election/elected_controller.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/util/error.h"
#include "daemon/election/etcd_job_records.h"
#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/control_frames.h"

namespace dtrain::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// The key the leader holds under its lease (docs/architecture/daemon.md, "Standby controllers"):
// the election's, and the guard of every record the leader writes.
std::string leader_key(const ControllerElection& e) { return e.prefix + "/controller/leader"; }

std::vector<EtcdEndpoint> endpoints(const ControllerElection& e) {
  std::vector<EtcdEndpoint> out;
  for (const std::string& url : e.etcd) out.push_back(parse_etcd_endpoint(url));
  return out;
}

// etcd's answers within a third of the lease: a renewal must land before the lease runs out.
std::chrono::milliseconds etcd_timeout(const ControllerElection& e) {
  return std::chrono::milliseconds(e.lease_s * 1000 / 3);
}

int64_t ticks(Clock::time_point t) { return t.time_since_epoch().count(); }

}  // namespace

std::string leader_address(const std::string& leader_value) {
  const size_t space = leader_value.rfind(' ');
  return space == std::string::npos ? "" : leader_value.substr(space + 1);
}

ElectedController::ElectedController(const DaemonConfig& config, const std::string& address,
                                     std::function<std::string()> clients_digest)
    : config_(config),
      self_(config.name + " " + address),
      election_etcd_(endpoints(config.election), etcd_timeout(config.election)),
      clients_digest_(std::move(clients_digest)),
      election_(election_etcd_, ElectionConfig{leader_key(config.election),
                                               self_, int(config.election.lease_s)}) {
  std::error_code ec;  // the stats store's folder (the records are in etcd)
  std::filesystem::create_directories(config.data_dir + "/controller", ec);
  if (ec)
    throw core::UserError("cannot create " + config.data_dir + "/controller: " + ec.message(),
                          "make data_dir (" + config.data_dir + ") writable for dtraind");
  spdlog::info("controller election: candidate {} on etcd {} (lease {} s)", self_,
               config.election.etcd.front(), config.election.lease_s);
  thread_ = std::thread([this] { run(); });
}

ElectedController::~ElectedController() { stop(); }

void ElectedController::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    const LeaderElection::Role role = election_.step(Clock::now());
    follow_role(role);
    compare_clients(role == LeaderElection::Role::kLeader);
    lock.lock();
    // Woken early by a fenced-out write or a stop.
    wake_.wait_until(lock, election_.next_step(), [this] { return stopping_ || !fenced_.empty(); });
  }
}

void ElectedController::follow_role(LeaderElection::Role role) {
  std::string fenced;
  bool has_term = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    leader_ = election_.leader();
    error_ = election_.last_error();
    fenced.swap(fenced_);
    has_term = term_ != nullptr;
  }
  const bool leads = role == LeaderElection::Role::kLeader && fenced.empty();
  if (leads) {  // first: an earlier term's threads act no more, nor end this one
    std::lock_guard<std::mutex> lock(mutex_);
    term_lease_ = election_.lease();
  }
  acts_until_ = leads ? ticks(election_.acts_until()) : 0;
  if (leads && !has_term) return begin_term();
  if (leads || !has_term) return;
  end_term(!fenced.empty() ? fenced
           : !error_.empty() ? error_
                             : "the election's key is another candidate's");
  if (!fenced.empty()) election_.resign();  // let a candidate that can write lead
}

void ElectedController::begin_term() {
  const int64_t lease = election_.lease();
  const auto acts = [this, lease] { return acts_now(lease); };
  auto etcd = std::make_unique<EtcdHttpClient>(endpoints(config_.election),
                                               etcd_timeout(config_.election));
  auto records = std::make_unique<EtcdJobRecords>(
      std::move(etcd), config_.election.prefix,
      LeaderFence{acts, leader_key(config_.election), lease});
  std::shared_ptr<Controller> term;
  const auto began = Clock::now();
  try {  // reads every record and adopts the running jobs (their records saved: fenced too)
    term = std::make_shared<Controller>(config_, std::move(records));
  } catch (const std::exception& e) {
    // Taking over runs before the lease's next renewal: a history read slower than a lease
    // is fenced out, and says how long it took.
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began);
    spdlog::error("controller election: won, but could not take over ({} ms into it, lease {} s; "
                  "a longer controller_election.lease_s gives a slow etcd more time): {}; "
                  "resigning", took.count(), config_.election.lease_s, e.what());
    election_.resign();
    acts_until_ = 0;
    return;
  }
  term->set_fence(acts);
  published_.clear();  // this term publishes its digest anew
  spdlog::info("controller election: leading (lease {:x}); the jobs' records are in etcd under "
               "{}/jobs/", lease, config_.election.prefix);
  std::lock_guard<std::mutex> lock(mutex_);
  term_ = std::move(term);
  leading_since_ = unix_now();
}

void ElectedController::end_term(const std::string& why) {
  std::shared_ptr<Controller> term;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    term.swap(term_);
    leading_since_ = 0;
    term_lease_ = 0;  // a late report of the ended term ends nothing
  }
  acts_until_ = 0;
  if (!term) return;
  term->abdicate();
  spdlog::warn("controller election: stopped leading: {}; the running jobs keep training on "
               "their nodes until a leader adopts them", why);
}

bool ElectedController::acts_now(int64_t lease) const {
  return term_lease_.load() == lease && ticks(Clock::now()) < acts_until_.load();
}

void ElectedController::fenced(int64_t lease, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (lease == 0 || term_lease_.load() != lease) return;  // an ended term's thread, late
  if (fenced_.empty()) fenced_ = why;
  wake_.notify_all();
}

void ElectedController::compare_clients(bool leads) {
  const std::string key = config_.election.prefix + "/controller/clients";
  const std::string mine = clients_digest_ ? clients_digest_() : "";
  bool match = true;
  // One request more after a step: only when etcd answered it and the lease has room for it.
  const auto room = election_.acts_until() - Clock::now();
  if (!election_.last_error().empty() ||
      (leads && room < 2 * etcd_timeout(config_.election)))
    return;
  try {
    if (leads) {
      if (mine != published_ &&
          election_etcd_.put_if_held(key, mine, leader_key(config_.election),
                                     election_.lease()))
        published_ = mine;
    } else {
      published_.clear();  // a leader again publishes anew
      const auto theirs = election_etcd_.get(key);
      match = !theirs || theirs->value == mine;
    }
  } catch (const EtcdError&) {
    return;  // the election's own step says what etcd did
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (match == clients_match_) return;
  clients_match_ = match;
  if (!match)
    spdlog::warn("controller election: this candidate's clients_dir ({}) differs from the "
                 "leader's: were it to lead, it would let in or refuse other clients; copy the "
                 "leader's .cred files here and SIGHUP this daemon", config_.clients_dir);
  else
    spdlog::info("controller election: this candidate's clients_dir matches the leader's again");
}

std::shared_ptr<Controller> ElectedController::current() {
  std::lock_guard<std::mutex> lock(mutex_);
  return term_;
}

void ElectedController::serve(transport::ControlConnection& c) {
  std::shared_ptr<Controller> term;
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    term = term_;
    lease = term_lease_;
  }
  if (!term || !acts_now(lease)) return refuse(c);
  try {
    term->serve(c);
  } catch (const FencedOut& e) {
    spdlog::warn("controller election: a write was fenced out: {}", e.what());
    term->abdicate();  // at once: no session sends another frame
    fenced(lease, e.what());
    // Not a standby's answer, which clients follow: part of the request may have taken effect
    // (a job saved, then its start fenced out), and a retry elsewhere could do it twice.
    try {
      c.send(reply_error("controller " + config_.name + " stopped leading while it answered (" +
                             e.what() + "); the request may or may not have taken effect",
                         "see `dtrain-submit status` (it finds the new leader) before trying "
                         "again"));
    } catch (const std::exception&) {  // the other side went away
    }
  }
}

// The first frame is read before the answer: closed with unread bytes, the connection would be
// reset and the answer lost.
void ElectedController::refuse(transport::ControlConnection& c) {
  std::string leader;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    leader = leader_ == self_ ? "" : leader_;
  }
  try {
    const std::vector<uint8_t> first =
        c.receive_at_most(std::chrono::seconds(10), kClientRequestFrameBytes);
    // A task's model follows its request unasked; unread, it would reset the connection and
    // lose the answer. Read (within the bound any controller takes) and dropped.
    const control::Request* q = read_control_frame(first).body_as_Request();
    if (q && q->data_bytes() > 0 && q->data_bytes() <= kMaxRequestDataBytes &&
        c.peer_identity().role == transport::ControlIdentity::Role::kClient)
      c.receive_at_most(std::chrono::seconds(60), uint32_t(q->data_bytes()) + 1024);
    const std::string said = leader.empty() ? "no controller leads at the moment"
                                            : "the leader is " + leader;
    c.send(reply_not_leader(
        "controller " + config_.name + " is a standby: " + said,
        "nodes and dtrain-submit go to the leader by themselves; list every controller "
        "(dtraind.yaml's controller, dtrain-submit --controller A,B,C)",
        leader_address(leader)));
  } catch (const std::exception&) {  // the other side went away: nothing to tell it
  }
}

Json ElectedController::status() {
  std::shared_ptr<Controller> term;
  Json election;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    term = term_;
    election = {{"role", term && acts_now(term_lease_) ? "leader" : "standby"},
                {"leader", leader_},
                {"error", error_},
                {"leading_since", leading_since_},
                {"clients_match_leader", clients_match_}};
  }
  Json j = {{"election", election}};
  if (term) {
    j["jobs"] = term->jobs_json();
    j["nodes"] = term->nodes_json();
  }
  return j;
}

void ElectedController::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  end_term("this controller is stopping");
  election_.resign();
}

}  // namespace dtrain::daemon
