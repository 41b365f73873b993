#include "daemon/node/sync_rehearsal.h"

#include <algorithm>

#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

SyncRehearsal::SyncRehearsal(std::set<uint32_t> peers, Send send)
    : peers_(std::move(peers)), send_(std::move(send)) {}

void SyncRehearsal::on_mark(uint32_t origin, const RehearsalMarkPayload& mark) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!peers_.count(origin)) return;  // a stranger's marks are neither kept nor counted
  heard_.emplace(origin, mark.round, mark.index);
  changed_.notify_all();
}

void SyncRehearsal::on_loss(uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  lost_.insert(id);
  changed_.notify_all();
}

void SyncRehearsal::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  changed_.notify_all();
}

bool SyncRehearsal::exchange(bool round, int32_t index, uint64_t padding,
                             Clock::time_point until) {
  send_(rehearsal_mark_payload({round, index}, size_t(padding)));
  std::unique_lock<std::mutex> lock(mutex_);
  auto all_heard = [&] {
    for (uint32_t id : peers_)
      if (!lost_.count(id) && !heard_.count(Mark{id, round, index})) return false;
    return true;
  };
  changed_.wait_until(lock, until, [&] { return cancelled_ || all_heard(); });
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  return all_heard();
}

bool SyncRehearsal::lock_steps(int32_t steps, uint64_t step_bytes, const Work& work,
                               std::chrono::milliseconds deadline,
                               core::RehearsalFigures& figures) {
  // Timed over the second half: the first absorbs the nodes' different starts (the plan
  // reaches them at different times) and drains what the hosts' queues and a shaped link's
  // bucket take at once.
  const int32_t timed_from = steps / 2;
  Clock::time_point timed_start{};
  for (int32_t s = 0; s < steps; ++s) {
    if (work.step) work.step();
    if (work.share_step) work.share_step();
    if (!exchange(false, s, step_bytes, Clock::now() + deadline)) return false;
    if (s + 1 == timed_from) timed_start = Clock::now();
  }
  figures.steps = steps;
  figures.lock_step_s = seconds_between(timed_start, Clock::now()) / double(steps - timed_from);
  return true;
}

bool SyncRehearsal::free_rounds(int32_t steps, uint64_t round_bytes, const Work& work,
                                std::chrono::milliseconds deadline,
                                core::RehearsalFigures& figures) {
  const int32_t free_steps = std::max(kMinFreeSteps, steps / 4);
  double stepping_s = 0.0;
  for (int32_t r = 0; r < kRehearsalRounds; ++r) {
    const Clock::time_point start = Clock::now();
    for (int32_t s = 0; s < free_steps; ++s)
      if (work.step) work.step();
    const Clock::time_point round_start = Clock::now();
    stepping_s += seconds_between(start, round_start);
    if (work.round) work.round();
    if (!exchange(true, r, round_bytes, round_start + deadline)) return false;
    figures.round_s += seconds_between(round_start, Clock::now()) / kRehearsalRounds;
  }
  figures.free_step_s = stepping_s / double(free_steps * kRehearsalRounds);
  figures.round_bytes = double(round_bytes);
  return true;
}

// Timed over the second half, as the lock steps are; the ring is its own barrier.
bool SyncRehearsal::ring_steps(int32_t steps, const Work& work,
                               std::chrono::milliseconds deadline,
                               core::RehearsalFigures& figures) {
  const int32_t timed_from = steps / 2;
  Clock::time_point timed_start{};
  try {
    for (int32_t s = 0; s < steps; ++s) {
      if (work.step) work.step();
      work.ring_step(s, deadline);
      if (s + 1 == timed_from) timed_start = Clock::now();
    }
  } catch (const core::UserError&) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_) throw;
    return false;  // a node lost or too slow: the choice is made from the probes
  }
  figures.ring_steps = steps;
  figures.ring_step_s = seconds_between(timed_start, Clock::now()) / double(steps - timed_from);
  return true;
}

std::optional<core::RehearsalFigures> SyncRehearsal::run(const RehearsalPlanPayload& plan,
                                                         const Work& work,
                                                         std::chrono::milliseconds deadline) {
  const int32_t steps = std::clamp(plan.steps, kMinRehearsalSteps, kMaxRehearsalSteps);
  if (work.prepare) work.prepare();
  core::RehearsalFigures figures;
  const bool timed = lock_steps(steps, plan.step_bytes, work, deadline, figures) &&
                     free_rounds(steps, plan.round_bytes, work, deadline, figures);
  if (plan.ring_steps > 0 && work.ring_step)
    ring_steps(std::clamp(plan.ring_steps, kMinRehearsalSteps, kMaxRehearsalSteps), work,
               deadline, figures);  // without its figures the other two still count
  if (!timed) return std::nullopt;
  return figures;
}

}  // namespace dtrain::daemon
