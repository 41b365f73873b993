// A lost node's last updates at the epoch's end (docs/architecture/daemon.md, "The mesh
// exchange"). A node lost mid-epoch had its last updates in flight: some survivors received
// them and others did not. At the first barrier each survivor announces, per worker of the job,
// the last minibatch and the number of updates of the epoch it heard; then the survivor that
// announced the most of a lost worker's updates (the first in member order) sends every live
// node that announced fewer those it lacks, and the takeover starts after the furthest minibatch
// this node heard or any other announced. Under bsp with equal shards the lost node's updates
// all precede the announcements, so every survivor starts at the same minibatch. A node
// announces when its own shards are done, so under async or bounded sync, or with a longer
// shard, a lost node's later updates can come after the announcements: where they reach every
// survivor, each heard them itself and starts after them; where they reach only some, the
// survivors start at different minibatches, as before this exchange (not handled: holding a
// lost worker's updates that come after the announcement would be the way). A survivor that no
// longer keeps what another lacks (more than kMaxForwardedUpdates, or past its share of
// kKeptWordsAll) forwards nothing, and the node that lacks them says so in its epoch line.
#include <spdlog/spdlog.h>

#include "daemon/node/mesh_exchange.h"
#include "daemon/protocol/job_id.h"

namespace dtrain::daemon {

int64_t MeshExchange::last_batch_heard(uint32_t g, int64_t epoch) const {
  auto it = last_position_.find(g);
  return it != last_position_.end() && it->second.epoch == epoch ? it->second.batch : -1;
}

int64_t MeshExchange::updates_heard(uint32_t g, int64_t epoch) const {
  auto it = heard_updates_.find(g);
  return it != heard_updates_.end() && it->second.epoch == epoch ? it->second.count : 0;
}

// Each other worker's newest updates, within its share of kKeptWordsAll (an update larger than
// that is counted, not kept).
void MeshExchange::remember(const core::SharedMessage& m) {
  if (m->origin >= uint32_t(total_workers_)) return;  // no worker of the job's
  HeardUpdates& h = heard_updates_[m->origin];
  if (m->epoch < h.epoch) return;  // an earlier epoch's (a relay's late copy): not this one's
  if (m->epoch > h.epoch) h = HeardUpdates{m->epoch};
  ++h.count;
  h.kept.push_back(m);
  h.kept_words += m->words.size();
  const size_t share = std::min(kKeptWords, kKeptWordsAll / size_t(std::max(1, total_workers_)));
  while (!h.kept.empty() && (h.kept.size() > kMaxForwardedUpdates || h.kept_words > share)) {
    h.kept_words -= h.kept.front()->words.size();
    h.kept.pop_front();
  }
}

void MeshExchange::announce_heard(int64_t epoch, EpochEndPayload& e) {
  uint32_t g = 0;
  for (const JobMember& m : members_)
    for (int w = 0; w < m.workers; ++w, ++g) {
      e.last_batches.push_back(last_batch_heard(g, epoch));
      e.heard_updates.push_back(updates_heard(g, epoch));
    }
  own_phase_zero_ = Announcement{};
  own_phase_zero_.last_batches = e.last_batches;
  own_phase_zero_.heard_updates = e.heard_updates;
  own_phase_zero_epoch_ = epoch;
}

const MeshExchange::Announcement* MeshExchange::phase_zero_of(uint32_t id, int64_t epoch) {
  if (id == self_) return own_phase_zero_epoch_ == epoch ? &own_phase_zero_ : nullptr;
  if (lost_.count(id)) return nullptr;
  auto a = announced_[id].find({epoch, 0});
  return a == announced_[id].end() ? nullptr : &a->second;
}

// This node's own figure as it is now (updates that came after it announced count), the
// others' as announced.
int64_t MeshExchange::last_batch_agreed(uint32_t g, int64_t epoch) {
  int64_t agreed = last_batch_heard(g, epoch);
  for (const JobMember& m : members_) {
    const Announcement* a = m.id == self_ ? nullptr : phase_zero_of(m.id, epoch);
    if (a && g < a->last_batches.size()) agreed = std::max(agreed, a->last_batches[g]);
  }
  return agreed;
}

int64_t MeshExchange::most_heard(uint32_t g, int64_t epoch, uint32_t* first) {
  int64_t most = 0;
  if (first) *first = 0;
  for (const JobMember& m : members_) {
    const Announcement* a = phase_zero_of(m.id, epoch);
    if (!a || g >= a->heard_updates.size() || a->heard_updates[g] <= most) continue;
    most = a->heard_updates[g];
    if (first) *first = m.id;
  }
  return most;
}

std::vector<uint32_t> MeshExchange::unfinished_lost_workers(int64_t epoch) {
  std::vector<uint32_t> workers;
  uint32_t g = 0;
  for (const JobMember& m : members_) {
    const bool unfinished = m.id != self_ && lost_.count(m.id) &&
                            !announced_[m.id].count({epoch, 0}) && epoch >= 0;
    for (int w = 0; w < m.workers; ++w, ++g)
      if (unfinished) workers.push_back(g);
  }
  return workers;
}

void MeshExchange::forward_missed_updates(int64_t epoch) {
  std::vector<Forward> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint32_t g : unfinished_lost_workers(epoch)) {
      uint32_t forwarder = 0;
      const int64_t most = most_heard(g, epoch, &forwarder);
      if (forwarder != self_) continue;
      for (const JobMember& m : members_) {
        const Announcement* a = m.id == self_ ? nullptr : phase_zero_of(m.id, epoch);
        if (a && g < a->heard_updates.size() && a->heard_updates[g] < most)
          out.push_back(forward_to(m.id, epoch, g, a->heard_updates[g], most));
      }
    }
  }
  // Built and sent without the exchange's lock (a forward can be megabytes); a forward that
  // cannot be sent leaves its node without those updates, as its epoch line says, and does not
  // fail this node.
  for (const Forward& f : out) {
    spdlog::info("job {}: forwarding {} of worker {}'s updates of epoch {} to {}{}",
                 job_id_text(job_id_), f.updates.size(), f.header.worker, epoch + 1,
                 name_of(f.header.for_node),
                 f.header.complete ? "" : " (no longer kept here: none sent)");
    try {
      std::lock_guard<std::mutex> lock(publish_mutex_);
      send(forwarded_payload(f.header, f.updates), "the mesh took no forwarded update");
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {}", job_id_text(job_id_), e.what());
    }
  }
}

// Updates after+1 .. most of worker g (counted from 1 in the epoch), if this node keeps them.
MeshExchange::Forward MeshExchange::forward_to(uint32_t to, int64_t epoch, uint32_t g,
                                               int64_t after, int64_t most) {
  const HeardUpdates& h = heard_updates_[g];
  const int64_t oldest = h.count - int64_t(h.kept.size()) + 1;  // the number of kept.front()
  Forward f{{to, epoch, g, after, false, {}}, {}};
  if (h.epoch == epoch && after + 1 >= oldest && most <= h.count &&
      most - after <= int64_t(kMaxForwardedUpdates)) {
    for (int64_t n = after + 1; n <= most; ++n) f.updates.push_back(h.kept[size_t(n - oldest)]);
    f.header.complete = true;
  }
  return f;
}

void MeshExchange::await_forwarded_updates(int64_t epoch) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (auto it = forwards_in_.begin(); it != forwards_in_.end();)
    it = it->first < epoch ? forwards_in_.erase(it) : std::next(it);
  std::vector<std::pair<uint32_t, uint32_t>> due;  // (worker, the node that forwards)
  for (uint32_t g : unfinished_lost_workers(epoch)) {
    uint32_t forwarder = 0;
    const int64_t most = most_heard(g, epoch, &forwarder);
    if (forwarder != 0 && forwarder != self_ && updates_heard(g, epoch) < most)
      due.push_back({g, forwarder});
  }
  if (due.empty()) return;
  std::vector<std::string> waiting;
  auto done = [&] {
    waiting.clear();
    for (const auto& [g, forwarder] : due)
      if (!forwards_in_.count({epoch, g}) && !lost_.count(forwarder))
        waiting.push_back(name_of(forwarder));
    return waiting.empty() || cancelled_ || !bad_message_.empty();
  };
  // Past the deadline the takeover goes on without them, and the epoch line counts them.
  wait_reporting(lock, "a lost node's updates forwarded at the end of epoch " +
                           std::to_string(epoch + 1), waiting, done);
}

void MeshExchange::on_forwarded(ForwardedPayload f, uint32_t origin) {
  // Only for the epoch whose end this node is at (a forward is sent at its first barrier).
  if (f.for_node != self_ || !member(origin) || detached_ || !bus_ ||
      f.epoch != current_epoch_ || f.worker >= uint32_t(total_workers_))
    return;
  // Any of them that came since this node announced (a relay's late copies) is not taken twice.
  int64_t have = updates_heard(f.worker, f.epoch) - f.after;
  for (core::EncodedMessage& m : f.updates) {
    if (m.origin != f.worker || m.epoch != f.epoch || have-- > 0 ||
        !deliverable({m.epoch, m.batch}))
      continue;
    const uint64_t id = m.id;
    deliver(std::move(m), origin, /*forwarded=*/true);
    heard_updates_[f.worker].forwarded_ids.insert(id);  // after: a first update starts the set
  }
  forwards_in_.insert({f.epoch, f.worker});
}

}  // namespace dtrain::daemon
