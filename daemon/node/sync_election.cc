#include "daemon/node/sync_election.h"

#include <algorithm>

#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

const char* const kSetItYourself =
    "set training.sync in the spec (bsp on a fast network, {local: {steps: 20}} on a slow one; "
    "docs/user-guide.md, \"Choosing how workers synchronise\")";

std::set<uint32_t> ids_of(const std::map<uint32_t, std::string>& peers) {
  std::set<uint32_t> ids;
  for (const auto& [id, name] : peers) ids.insert(id);
  return ids;
}

}  // namespace

SyncElection::SyncElection(std::map<uint32_t, std::string> peers, Send send)
    : peers_(std::move(peers)), send_(std::move(send)), rehearsal_(ids_of(peers_), send_) {}

SyncElection::~SyncElection() { finish(); }

void SyncElection::on_probe(uint32_t origin, uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_.count(origin) || choice_) return;
  if (acks_due_.size() == kMaxAcksDue) acks_due_.pop_front();
  acks_due_.emplace_back(origin, id);
  changed_.notify_all();
}

void SyncElection::on_ack(uint32_t origin, uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto sent = sent_at_.find(id);
  if (id < series_first_id_ || sent == sent_at_.end() || !peers_.count(origin) ||
      answered_.count(origin))
    return;
  answered_[origin] = std::chrono::duration<double>(Clock::now() - sent->second).count();
  changed_.notify_all();
}

void SyncElection::on_choice(uint32_t origin, const SyncChoicePayload& choice) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_.count(origin) || heard_.count(origin)) return;  // each member's first word stands
  heard_[origin] = core::SyncChoice{choice.local_steps, choice.reason, choice.allreduce};
  changed_.notify_all();
}

void SyncElection::on_rehearsal_plan(uint32_t origin, const RehearsalPlanPayload& plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_.count(origin) || plans_.count(origin)) return;
  plans_[origin] = plan;
  changed_.notify_all();
}

void SyncElection::on_rehearsal_mark(uint32_t origin, const RehearsalMarkPayload& mark) {
  rehearsal_.on_mark(origin, mark);
}

void SyncElection::on_loss(uint32_t id) {
  rehearsal_.on_loss(id);
  std::lock_guard<std::mutex> lock(mutex_);
  lost_.insert(id);
  changed_.notify_all();
}

void SyncElection::on_restarted(uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (choice_) return;  // it will be told
  restarted_.insert(id);
  changed_.notify_all();
}

void SyncElection::cancel() {
  rehearsal_.cancel();
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  changed_.notify_all();
}

bool SyncElection::all_answered() const {
  for (const auto& [id, name] : peers_)
    if (!lost_.count(id) && !answered_.count(id)) return false;
  return true;
}

std::map<uint32_t, double> SyncElection::time_probe(size_t bytes, Clock::time_point until,
                                                    std::chrono::milliseconds resend) {
  std::unique_lock<std::mutex> lock(mutex_);
  series_first_id_ = next_probe_id_ + 1;
  sent_at_.clear();
  answered_.clear();
  for (;;) {
    const uint64_t id = ++next_probe_id_;
    sent_at_[id] = Clock::now();
    lock.unlock();
    send_(link_probe_payload(id, bytes));
    lock.lock();
    const Clock::time_point next =
        resend.count() > 0 ? std::min(until, Clock::now() + resend) : until;
    changed_.wait_until(lock, next, [&] { return cancelled_ || all_answered(); });
    if (cancelled_) throw core::UserError("the job was cancelled", "");
    if (all_answered() || Clock::now() >= until) return answered_;
  }
}

std::pair<double, double> SyncElection::time_transfer(size_t bytes,
                                                     const std::map<uint32_t, double>& small,
                                                     std::chrono::milliseconds deadline) {
  bytes = std::clamp(bytes, kMinLargeProbeBytes, kMaxLargeProbeBytes);
  const auto large = time_probe(bytes, Clock::now() + deadline, std::chrono::milliseconds(0));
  double slowest = 0.0, rtt_s = 0.0;
  bool any = false;
  for (const auto& [id, seconds] : large) {
    auto shortest = small.find(id);
    if (shortest == small.end()) continue;  // no round trip to take off
    const double rtt = std::min(seconds, shortest->second);
    // A transfer too quick to time is taken as a microsecond: the goodput is then a bound.
    const double goodput = double(bytes) / std::max(seconds - rtt, 1e-6);
    rtt_s = std::max(rtt_s, rtt);
    slowest = any ? std::min(slowest, goodput) : goodput;
    any = true;
  }
  return {slowest, rtt_s};
}

core::LinkFigures SyncElection::measure(std::chrono::milliseconds deadline, size_t round_bytes,
                                        size_t step_bytes) {
  std::map<uint32_t, double> small =
      time_probe(kSmallProbeBytes, Clock::now() + deadline, kResendAfter);
  for (const auto& [id, seconds] :
       time_probe(kSmallProbeBytes, Clock::now() + deadline, kResendAfter))
    small[id] = small.count(id) ? std::min(small[id], seconds) : seconds;
  const auto [step_goodput, step_rtt] = time_transfer(step_bytes, small, deadline);
  const auto [round_goodput, round_rtt] = time_transfer(round_bytes, small, deadline);
  if (round_goodput <= 0 || step_goodput <= 0)
    throw core::UserError("no node answered the link probes for training.sync: auto within " +
                              std::to_string(deadline.count() / 1000) + " s",
                          "check the data network between the nodes (dtrain-submit nodes), or " +
                              std::string(kSetItYourself));
  core::LinkFigures slowest;
  slowest.rtt_s = std::max(step_rtt, round_rtt);
  slowest.goodput_bytes_s = round_goodput;
  slowest.step_goodput_bytes_s = step_goodput;
  return slowest;
}

void SyncElection::set_rehearsal_work(SyncRehearsal::Work work) {
  std::lock_guard<std::mutex> lock(mutex_);
  rehearsal_work_ = std::move(work);
}

std::optional<core::RehearsalFigures> SyncElection::rehearse(const RehearsalPlanPayload& plan,
                                                             std::chrono::milliseconds deadline) {
  SyncRehearsal::Work work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work = rehearsal_work_;
  }
  send_(rehearsal_plan_payload(plan));
  return rehearsal_.run(plan, work, deadline);
}

void SyncElection::rehearse_if_asked(std::unique_lock<std::mutex>& lock,
                                     std::optional<uint32_t> chooser,
                                     std::chrono::milliseconds deadline) {
  if (rehearsed_ || !chooser) return;
  auto plan = plans_.find(*chooser);
  if (plan == plans_.end()) return;
  rehearsed_ = true;
  const RehearsalPlanPayload asked = plan->second;
  const SyncRehearsal::Work work = rehearsal_work_;
  lock.unlock();
  // A part that did not come costs the chooser its figures, not this node its job: it waits on.
  rehearsal_.run(asked, work, deadline);
  lock.lock();
}

void SyncElection::announce(const core::SyncChoice& choice, std::chrono::milliseconds deadline) {
  // Every live peer answers a probe first: one that attaches to the job after the choice went
  // would never get it (the transport does not resend what it delivered), and a choice made
  // without measuring (node-local shards, a resumed mode) goes at once.
  time_probe(kSmallProbeBytes, Clock::now() + deadline, kResendAfter);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    choice_ = choice;
  }
  send_(sync_choice_payload({choice.local_steps, choice.reason, choice.allreduce}));
}

void SyncElection::repeat_for_newcomer() {
  std::optional<core::SyncChoice> known;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    known = choice_;
  }
  if (!known) return;
  std::lock_guard<std::mutex> lock(repeats_mutex_);
  repeats_.emplace_back([this, c = *known] {
    try {
      send_(sync_choice_payload({c.local_steps, c.reason, c.allreduce}));
    } catch (const std::exception&) {
      // The mesh took nothing: the newcomer's wait names what it waited for.
    }
  });
}

void SyncElection::finish() {
  std::vector<std::thread> repeats;
  {
    std::lock_guard<std::mutex> lock(repeats_mutex_);
    repeats.swap(repeats_);
  }
  for (std::thread& t : repeats) t.join();
}

void SyncElection::send_due_acks(std::unique_lock<std::mutex>& lock,
                                 std::optional<uint32_t> chooser) {
  while (!acks_due_.empty() && !cancelled_) {
    const auto [origin, id] = acks_due_.front();
    acks_due_.pop_front();
    if (!chooser || origin != *chooser) continue;  // only the chooser measures
    lock.unlock();
    send_(link_probe_ack_payload(id));
    lock.lock();
  }
}

const core::SyncChoice* SyncElection::usable_choice(std::optional<uint32_t> chooser) const {
  if (!chooser) return heard_.empty() ? nullptr : &heard_.begin()->second;
  auto it = heard_.find(*chooser);
  return it == heard_.end() ? nullptr : &it->second;
}

core::SyncChoice SyncElection::await(std::optional<uint32_t> chooser,
                                     std::chrono::milliseconds deadline) {
  const Clock::time_point until = Clock::now() + deadline;
  const std::string who = chooser ? name_of(*chooser) : "the live nodes";
  std::unique_lock<std::mutex> lock(mutex_);
  auto gone = [&] {
    return chooser && (lost_.count(*chooser) > 0 || restarted_.count(*chooser) > 0);
  };
  for (;;) {
    send_due_acks(lock, chooser);
    rehearse_if_asked(lock, chooser, kRehearsalWait);
    if (const core::SyncChoice* c = usable_choice(chooser)) {
      choice_ = *c;  // what this node repeats to a newcomer
      return *c;
    }
    if (cancelled_) throw core::UserError("the job was cancelled", "");
    if (gone())
      throw core::UserError(who + ", which chooses training.sync: auto for the job, was lost or "
                                  "restarted before it chose",
                            "resubmit the job, or " + std::string(kSetItYourself));
    if (!changed_.wait_until(lock, until, [&] {
          return !acks_due_.empty() || usable_choice(chooser) || cancelled_ || gone() ||
                 (!rehearsed_ && chooser && plans_.count(*chooser));
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
