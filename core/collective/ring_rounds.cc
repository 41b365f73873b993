#include "core/collective/ring_rounds.h"

#include <algorithm>
#include <string>

#include "core/collective/ring_allreduce.h"
#include "core/collective/round_ids.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {

int index_of(const RingRounds::Members& members, uint32_t id) {
  auto it = std::find(members.begin(), members.end(), id);
  return it == members.end() ? -1 : int(it - members.begin());
}

bool all_live(const RingRounds::Members& view, const RingRounds::Members& live) {
  for (uint32_t m : view)
    if (index_of(live, m) < 0) return false;
  return true;
}

}  // namespace

// The links of one attempt: segments to the next member of the view, from the previous one.
class RingRounds::AttemptLinks : public RingLinks {
 public:
  AttemptLinks(RingRounds& rounds, int64_t round, const Members& view, int rank,
               const std::function<Members()>& live, std::chrono::milliseconds deadline,
               float* values, int64_t n, uint64_t& seen)
      : rounds_(rounds), round_(round), view_(view), live_(live), deadline_(deadline),
        values_(values), n_(n), seen_(seen),
        next_(view[size_t(rank + 1) % view.size()]),
        previous_(view[(size_t(rank) + view.size() - 1) % view.size()]) {}

  void send_next(int step, const float* values, int64_t n) override {
    rounds_.post_.send_segment(next_, round_, view_, step, values, n);
  }
  RingPart receive_previous(int step) override {
    return rounds_.wait_segment({round_, view_, step}, previous_, view_, live_, deadline_,
                                values_, n_, seen_);
  }

 private:
  RingRounds& rounds_;
  const int64_t round_;
  const Members& view_;
  const std::function<Members()>& live_;
  const std::chrono::milliseconds deadline_;
  float* const values_;
  const int64_t n_;
  uint64_t& seen_;
  const uint32_t next_, previous_;
};

RingRounds::Members RingRounds::sum(float* values, int64_t n, int64_t round,
                                    const std::function<Members()>& live,
                                    std::chrono::milliseconds deadline, bool exact) {
  input_.assign(values, values + n);  // kept from call to call: no fresh pages a step
  for (int tries = 0;; ++tries) {
    // The version first: a loss declared while live() answers is seen by the attempt's waits.
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      seen = members_version_;
      largest_sum_ = std::max(largest_sum_, n);
    }
    const Members view = live();
    if (tries > 0) std::copy(input_.begin(), input_.end(), values);
    try {
      if (view.size() > 1) attempt(values, n, round, view, live, deadline, seen, exact);
      finished(round, view, values, n);
      return view;
    } catch (const ResultArrived& result) {
      finished(round, result.members, values, n);  // `values` holds the result now
      return result.members;
    } catch (const ViewChanged&) {
      // A member of the view was lost: again over the survivors.
    }
  }
}

void RingRounds::attempt(float* values, int64_t n, int64_t round, const Members& view,
                         const std::function<Members()>& live,
                         std::chrono::milliseconds deadline, uint64_t& seen, bool exact) {
  const int rank = index_of(view, self_);
  if (rank < 0)
    throw UserError("this node is not among the job's live nodes for the all-reduce of " +
                        describe_round(round),
                    "the others took it as lost; see their logs");
  AttemptLinks links(*this, round, view, rank, live, deadline, values, n, seen);
  RingWire wire;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wire = wire_;
  }
  if (exact) wire.exact_last = n;
  ring_allreduce(values, n, rank, int(view.size()), links, wire);
}

RingPart RingRounds::wait_segment(const SegmentKey& key, uint32_t from, const Members& view,
                                  const std::function<Members()>& live,
                                  std::chrono::milliseconds deadline, float* values, int64_t n,
                                  uint64_t& seen) {
  const int64_t round = std::get<0>(key);
  std::unique_lock<std::mutex> lock(mutex_);
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (cancelled_) throw UserError("the job was cancelled", "");
    for (auto a = arrived_.begin(); a != arrived_.end(); ++a) {
      const Result& r = a->second;
      if (r.round != round || int64_t(r.values.size()) != n || index_of(view, r.from) < 0)
        continue;
      std::copy(r.values.begin(), r.values.end(), values);
      ResultArrived taken{r.members};
      arrived_.erase(a);
      throw taken;
    }
    auto it = segments_.find(key);
    if (it != segments_.end()) return take_segment(it);
    if (members_version_ != seen) {
      seen = members_version_;
      lock.unlock();
      const Members now = live();
      lock.lock();
      if (!all_live(view, now)) throw ViewChanged{};
      continue;
    }
    if (changed_.wait_until(lock, until) == std::cv_status::timeout)
      throw UserError("the all-reduce of " + describe_round(round) + " waited " +
                          std::to_string(deadline.count()) + " ms for part " +
                          std::to_string(std::get<2>(key) + 1) + " from node id " +
                          std::to_string(from) + ", which was not declared lost",
                      "check that node's log and the network between the nodes");
  }
}

void RingRounds::finished(int64_t round, const Members& view, const float* values, int64_t n) {
  auto result = std::make_shared<Result>();
  result->round = round;
  result->members = view;
  result->values.assign(values, values + n);
  Answer answer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_ = result;
    answer.result = result;
    for (auto a = arrived_.begin(); a != arrived_.end();)
      a = a->second.round <= round ? arrived_.erase(a) : std::next(a);
    // Segments of this round over another view: a member started the round again without a
    // node this one counted; it gets this round's result instead.
    for (auto it = segments_.begin(); it != segments_.end();) {
      const int64_t r = std::get<0>(it->first);
      if (r == round && std::get<1>(it->first) != view) owe(std::get<1>(it->first), answer);
      if (r > round) break;  // keys are ordered by round first
      auto next = std::next(it);
      take_segment(it);
      it = next;
    }
    for (auto it = answered_.begin(); it != answered_.end();)
      it = it->first < round ? answered_.erase(it) : std::next(it);
  }
  send(answer);
}

void RingRounds::owe(const Members& view, Answer& answer) {
  for (uint32_t m : view)
    if (m != self_ && index_of(last_->members, m) >= 0 &&
        index_of(answer.to, m) < 0 && answered_.insert({last_->round, m}).second)
      answer.to.push_back(m);
}

void RingRounds::send(const Answer& answer) {
  if (answer.to.empty() || !answer.result) return;
  const Result& r = *answer.result;
  post_.send_result(answer.to, r.round, r.members, r.values.data(), int64_t(r.values.size()));
}

RingPart RingRounds::take_segment(std::map<SegmentKey, RingPart>::iterator it) {
  held_values_ -= it->second.size();  // before the move empties it
  RingPart segment = std::move(it->second);
  segments_.erase(it);
  return segment;
}

void RingRounds::on_segment(uint32_t from, int64_t round, Members members, int step,
                            RingPart values) {
  const int rank = index_of(members, self_);
  if (rank < 0 || members.size() < 2) return;
  // Only the previous member of that ring sends this node segments.
  if (from != members[(size_t(rank) + members.size() - 1) % members.size()]) return;
  Answer answer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (round == last_->round) {
      answer.result = last_;
      owe(members, answer);
    } else {
      // Round ids increase but need not be consecutive (the daemon's carry the epoch), so a
      // later round is held whatever its id, within the bounds on what is held.
      const int64_t room = std::max(kMinHeldValues, 4 * largest_sum_) - held_values_;
      const int ranks = int(members.size());
      if (round < last_->round || step < 0 || step >= 2 * (ranks - 1) * ring_max_parts(ranks) ||
          segments_.size() >= kMaxHeldSegments || values.size() > room)
        return;
      const int64_t size = values.size();
      const bool fresh = segments_.emplace(SegmentKey{round, std::move(members), step},
                                           std::move(values)).second;
      if (fresh) held_values_ += size;  // a repeat is dropped: the first is kept
      changed_.notify_all();
      return;
    }
  }
  send(answer);
}

void RingRounds::on_result(uint32_t from, int64_t round, Members members,
                           std::vector<float> values) {
  if (index_of(members, self_) < 0 || index_of(members, from) < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (round <= last_->round) return;
  Result& slot = arrived_[from];
  if (slot.round > round) return;  // the sender's newer one stays
  slot = Result{round, std::move(members), std::move(values), from};
  changed_.notify_all();
}

void RingRounds::expect_values(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  largest_sum_ = std::max(largest_sum_, n);
}

void RingRounds::set_wire(const RingWire& wire) {
  std::lock_guard<std::mutex> lock(mutex_);
  wire_ = wire;
}

void RingRounds::members_changed() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++members_version_;
  changed_.notify_all();
}

void RingRounds::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  changed_.notify_all();
}

}  // namespace dtrain::core
