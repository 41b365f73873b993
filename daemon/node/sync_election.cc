#include "daemon/node/sync_election.h"

#include <algorithm>

#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

const char* const kSetItYourself =
    "set training.sync in the spec (bsp on a fast network, {local: {steps: 50}} on a slow one; "
    "docs/user-guide.md, \"Choosing how workers synchronise\")";

}  // namespace

SyncElection::SyncElection(std::map<uint32_t, std::string> peers, Send send)
    : peers_(std::move(peers)), send_(std::move(send)) {}

void SyncElection::on_probe(uint32_t origin, uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_.count(origin) || choice_) return;
  if (acks_due_.size() == kMaxAcksDue) acks_due_.pop_front();
  acks_due_.push_back(id);
  changed_.notify_all();
}

void SyncElection::on_ack(uint32_t origin, uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id != probe_id_ || !peers_.count(origin) || answered_.count(origin)) return;
  answered_[origin] = std::chrono::duration<double>(Clock::now() - probe_sent_).count();
  changed_.notify_all();
}

void SyncElection::on_choice(uint32_t origin, const SyncChoicePayload& choice) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_.count(origin) || choice_) return;  // the first word stands
  choice_ = core::SyncChoice{choice.local_steps, choice.reason};
  changed_.notify_all();
}

void SyncElection::on_loss(uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  lost_.insert(id);
  changed_.notify_all();
}

void SyncElection::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  changed_.notify_all();
}

bool SyncElection::all_answered() const {
  for (const auto& [id, name] : peers_)
    if (!lost_.count(id) && !answered_.count(id)) return false;
  return true;
}

std::map<uint32_t, double> SyncElection::time_probe(size_t bytes, Clock::time_point until) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = ++probe_id_;
    answered_.clear();
    probe_sent_ = Clock::now();
  }
  send_(link_probe_payload(id, bytes));
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_until(lock, until, [&] { return cancelled_ || all_answered(); });
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  return answered_;
}

core::LinkFigures SyncElection::measure(std::chrono::milliseconds deadline, size_t bytes) {
  const Clock::time_point until = Clock::now() + deadline;
  bytes = std::clamp(bytes, kMinLargeProbeBytes, kMaxLargeProbeBytes);
  const auto first = time_probe(kSmallProbeBytes, until);
  const auto second = time_probe(kSmallProbeBytes, until);
  const auto large = time_probe(bytes, until);
  core::LinkFigures slowest;
  bool any = false;
  for (const auto& [id, seconds] : large) {
    double rtt = seconds;  // answered the large probe only: its whole time counts as delay
    if (first.count(id)) rtt = std::min(rtt, first.at(id));
    if (second.count(id)) rtt = std::min(rtt, second.at(id));
    // A transfer too quick to time is taken as a microsecond: the goodput is then a bound.
    const double goodput = double(bytes) / std::max(seconds - rtt, 1e-6);
    slowest.rtt_s = std::max(slowest.rtt_s, rtt);
    slowest.goodput_bytes_s = any ? std::min(slowest.goodput_bytes_s, goodput) : goodput;
    any = true;
  }
  if (!any)
    throw core::UserError("no node answered the link probes for training.sync: auto within " +
                              std::to_string(deadline.count() / 1000) + " s",
                          "check the data network between the nodes (dtrain-submit nodes), or " +
                              std::string(kSetItYourself));
  return slowest;
}

void SyncElection::announce(const core::SyncChoice& choice) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    choice_ = choice;
  }
  send_(sync_choice_payload({choice.local_steps, choice.reason}));
}

void SyncElection::repeat_for_newcomer() {
  std::optional<core::SyncChoice> known;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    known = choice_;
  }
  if (known) send_(sync_choice_payload({known->local_steps, known->reason}));
}

void SyncElection::send_due_acks(std::unique_lock<std::mutex>& lock) {
  while (!acks_due_.empty()) {
    const uint64_t id = acks_due_.front();
    acks_due_.pop_front();
    lock.unlock();
    send_(link_probe_ack_payload(id));
    lock.lock();
  }
}

core::SyncChoice SyncElection::await(std::optional<uint32_t> chooser,
                                     std::chrono::milliseconds deadline) {
  const Clock::time_point until = Clock::now() + deadline;
  const std::string who = chooser ? name_of(*chooser) : "the live nodes";
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    send_due_acks(lock);
    if (choice_) return *choice_;
    if (cancelled_) throw core::UserError("the job was cancelled", "");
    if (chooser && lost_.count(*chooser))
      throw core::UserError(who + ", which chooses training.sync: auto for the job, was lost "
                                  "before it chose",
                            "resubmit the job, or " + std::string(kSetItYourself));
    if (!changed_.wait_until(lock, until, [&] {
          return !acks_due_.empty() || choice_ || cancelled_ || (chooser && lost_.count(*chooser));
        }))
      throw core::UserError("no choice of training.sync from " + who + " within " +
                                std::to_string(deadline.count() / 1000) + " s",
                            "check " + who + "'s log (journalctl -u dtraind), or " +
                                std::string(kSetItYourself));
  }
}

std::string SyncElection::name_of(uint32_t id) const {
  auto it = peers_.find(id);
  return it == peers_.end() ? "node " + std::to_string(id) : it->second;
}

}  // namespace dtrain::daemon
