#include "daemon/node/mesh_exchange.h"

#include "daemon/node/mesh_ring.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

#include "core/codec/message_check.h"
#include "core/collective/round_ids.h"
#include "core/spec/job_spec.h"
#include "daemon/protocol/control_messages.h"
#include "core/util/error.h"

namespace dtrain::daemon {

namespace {

// A digest of the replica's bytes: equal digests are equal replicas (BLAKE2b-256 from
// libsodium; collisions are out of reach, and no node gains anything by forging one).
using ReplicaDigest = std::array<uint8_t, 32>;
ReplicaDigest replica_digest(const float* values, int64_t n) {
  ReplicaDigest d{};
  crypto_generichash(d.data(), d.size(), reinterpret_cast<const unsigned char*>(values),
                     static_cast<unsigned long long>(n) * sizeof(float), nullptr, 0);
  return d;
}

std::map<uint32_t, std::string> peers_of(uint32_t self, const std::vector<JobMember>& members) {
  std::map<uint32_t, std::string> peers;
  for (const JobMember& m : members)
    if (m.id != self) peers[m.id] = m.name;
  return peers;
}

}  // namespace

MeshExchange::MeshExchange(uint64_t job_id, uint32_t self, const std::vector<JobMember>& members,
                           std::chrono::milliseconds epoch_deadline)
    : job_id_(job_id),
      self_(self),
      members_(members),
      epoch_deadline_(epoch_deadline),
      election_(peers_of(self, members),
                [this](PayloadBytes bytes) {
                  std::lock_guard<std::mutex> lock(publish_mutex_);
                  send(std::move(bytes), "the mesh took no message of the sync choice");
                }),
      next_message_id_(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count())) {
  for (const JobMember& m : members_) {
    if (m.id == self_) first_worker_ = total_workers_;
    total_workers_ += m.workers;
  }
  ring_post_ = std::make_unique<RingPostOnMesh>(*this);
  ring_ = std::make_unique<core::RingRounds>(self_, *ring_post_);
}

void MeshExchange::set_gate_live(uint32_t id, bool live) {
  core::StepGate* gate = bus_ ? bus_->gate() : nullptr;
  if (!gate) return;
  int first = 0;
  for (const JobMember& m : members_) {
    if (m.id == id)
      for (int w = first; w < first + m.workers; ++w) gate->set_live(w, live);
    first += m.workers;
  }
}

void MeshExchange::set_lost(uint32_t id, bool lost) {
  if (lost) lost_.insert(id);
  else lost_.erase(id);
  set_gate_live(id, !lost);
  // A step's ring waiting for this member looks again (lock order: mutex_, then the ring's).
  ring_->members_changed();
}

const JobMember* MeshExchange::member(uint32_t id) const {
  for (const JobMember& m : members_)
    if (m.id == id) return &m;
  return nullptr;
}

std::string MeshExchange::name_of(uint32_t id) const {
  const JobMember* m = member(id);
  return m ? m->name : "node " + std::to_string(id);
}

void MeshExchange::attach(core::MessageBus& bus, int64_t num_params) {
  std::lock_guard<std::mutex> lock(mutex_);
  bus_ = &bus;
  num_params_ = num_params;
  for (uint32_t id : lost_) set_gate_live(id, false);
  release_pending();
}

void MeshExchange::detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  bus_ = nullptr;
  detached_ = true;
  pending_.clear();
}

bool MeshExchange::deliverable(const Position& at) const {
  return bus_ && !rejoining_ && at.epoch >= first_epoch_ && at.epoch <= current_epoch_;
}

void MeshExchange::release_pending() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const Position at{it->message.epoch, it->message.batch};
    if (at.epoch < first_epoch_) {
      it = pending_.erase(it);  // in the snapshot already
    } else if (deliverable(at)) {
      deliver(std::move(it->message), it->origin);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void MeshExchange::deliver(core::EncodedMessage m, uint32_t origin, bool forwarded) {
  std::string error;
  if (!core::check_message(m, num_params_, error)) {
    if (bad_message_.empty())
      bad_message_ = "a malformed update from " + name_of(origin) + ": " + error;
    return;
  }
  const Position at{m.epoch, m.batch};
  if (!forwarded) ++received_[origin][at.epoch];
  auto heard = heard_updates_.find(m.origin);  // found, not made: any origin may come here
  if (!forwarded && heard != heard_updates_.end() && heard->second.epoch == m.epoch &&
      heard->second.forwarded_ids.count(m.id))
    return;  // a relay's late copy of one a survivor forwarded
  Position& last = last_position_[m.origin];
  if (std::make_pair(at.epoch, at.batch) > std::make_pair(last.epoch, last.batch)) last = at;
  auto shared = std::make_shared<const core::EncodedMessage>(std::move(m));
  remember(shared);
  bus_->publish(-1, shared);
}

void MeshExchange::on_message(transport::Delivery d) {
  MeshPayloadIn in = read_mesh_payload(d.bytes.data(), d.bytes.size());
  if (in.kind == MeshPayloadIn::Kind::kRingSegment ||
      in.kind == MeshPayloadIn::Kind::kRingResult)  // mesh_ring.cc: under the ring's own lock
    // A moved vector keeps its buffer, so `in`'s views stay valid.
    return on_ring_payload(in, d.origin,
                           std::make_shared<const std::vector<uint8_t>>(std::move(d.bytes)));
  std::lock_guard<std::mutex> lock(mutex_);
  last_heard_[d.origin] = {std::chrono::steady_clock::now(), describe(in)};
  switch (in.kind) {
    case MeshPayloadIn::Kind::kUpdate:
      on_update(std::move(in.update), d.origin);
      break;
    case MeshPayloadIn::Kind::kEpochEnd:
      on_epoch_end(std::move(in.epoch_end), d.origin);
      break;
    case MeshPayloadIn::Kind::kSnapshot:
      on_snapshot(in.snapshot, d.origin);
      break;
    case MeshPayloadIn::Kind::kParameters: {
      // A round this node has averaged already: from a dropped node's old part, or sent before
      // a rejoining node took part. Kept, it would never be freed.
      if (in.parameters.round <= last_round_) break;
      const FloatView& v = in.parameters.values;
      rounds_[in.parameters.round][d.origin].assign(v.data, v.data + v.size);
      break;
    }
    case MeshPayloadIn::Kind::kPseudoGradient:
      on_pseudo_gradient(std::move(in.pseudo_gradient), d.origin);
      break;
    case MeshPayloadIn::Kind::kLinkProbe:
      election_.on_probe(d.origin, in.probe_id);
      break;
    case MeshPayloadIn::Kind::kLinkProbeAck:
      election_.on_ack(d.origin, in.probe_id);
      break;
    case MeshPayloadIn::Kind::kSyncChoice:
      election_.on_choice(d.origin, in.sync_choice);
      break;
    case MeshPayloadIn::Kind::kRehearsalPlan:
      election_.on_rehearsal_plan(d.origin, in.rehearsal_plan);
      break;
    case MeshPayloadIn::Kind::kRehearsalMark:
      election_.on_rehearsal_mark(d.origin, in.rehearsal_mark);
      break;
    case MeshPayloadIn::Kind::kForwarded:
      on_forwarded(std::move(in.forwarded), d.origin);
      break;
    case MeshPayloadIn::Kind::kMalformed:
      if (bad_message_.empty()) bad_message_ = in.error + " from " + name_of(d.origin);
      break;
    case MeshPayloadIn::Kind::kRingSegment:
    case MeshPayloadIn::Kind::kRingResult:
      break;  // handled above
  }
  changed_.notify_all();
}

static_assert(kMaxPayloadLevels == size_t(core::kMaxPseudoGradientLevels),
              "the mesh believes as many levels as a spec may ask for");

void MeshExchange::on_pseudo_gradient(PseudoGradientPayload g, uint32_t origin) {
  // Not a member's, not a round id (they are even), or a round averaged here already: kept, it
  // would never be freed.
  const JobMember* from = member(origin);
  if (!from || g.round < 0 || g.round % 2 != 0 || g.round <= last_pseudo_round_) return;
  // Its weight is what the job says the node has, not what the message claims.
  pseudo_rounds_[g.round][origin] = PseudoGradient{from->workers, std::move(g.levels)};
  // A live node is at most a round ahead (it waits for this node's message); a node that has
  // not started its rounds (rejoining, resumed) hears the others' old ones: only the newest are
  // kept.
  while (pseudo_rounds_.size() > kPseudoRoundsKept) pseudo_rounds_.erase(pseudo_rounds_.begin());
}

std::vector<core::NodeExchange::PseudoGradient> MeshExchange::share_pseudo_gradient(
    int64_t round, const PseudoGradient& mine) {
  std::unique_lock<std::mutex> lock =
      exchange_round(pseudo_gradient_payload(round, mine.workers, mine.messages),
                     "round " + std::to_string(round / 2 + 1) + " of local steps",
                     [&](uint32_t id) { return pseudo_rounds_[round].count(id) > 0; });
  std::vector<PseudoGradient> parts;
  for (const JobMember& m : members_) {
    if (m.id == self_) {
      parts.push_back(mine);
      continue;
    }
    auto it = pseudo_rounds_[round].find(m.id);
    if (it != pseudo_rounds_[round].end()) parts.push_back(it->second);
  }
  pseudo_rounds_.erase(pseudo_rounds_.begin(), pseudo_rounds_.upper_bound(round));
  last_pseudo_round_ = std::max(last_pseudo_round_, round);
  return parts;
}

bool MeshExchange::replicas_agree(const float* values, int64_t n, int64_t epoch) {
  const ReplicaDigest digest = replica_digest(values, n);
  // The node count, then each bit of the digest: integers up to the nodes' count, sent exact
  // (as fp32, where a job of precision bf16 rounds its ring's values: bf16 counts no further
  // than 256).
  std::vector<float> bits(1 + 8 * digest.size());
  bits[0] = 1.f;
  for (size_t i = 0; i < 8 * digest.size(); ++i)
    bits[1 + i] = float((digest[i / 8] >> (i % 8)) & 1);
  ring_->sum(bits.data(), int64_t(bits.size()), core::epoch_end_round_id(epoch),
             [this] { return live_members(); }, epoch_deadline_, /*exact=*/true);
  const float nodes = bits[0];
  return std::all_of(bits.begin() + 1, bits.end(),
                     [nodes](float sum) { return sum == 0.f || sum == nodes; });
}

void MeshExchange::on_update(core::EncodedMessage m, uint32_t origin) {
  if (detached_) return;  // after training: nobody applies it
  if (deliverable({m.epoch, m.batch}))
    deliver(std::move(m), origin);
  else if (m.epoch >= first_epoch_)
    pending_.push_back({origin, std::move(m)});
}

void MeshExchange::on_epoch_end(EpochEndPayload e, uint32_t origin) {
  announced_[origin][{e.epoch, e.phase}] =
      Announcement{e.published, e.tau_sum, e.workers, std::move(e.joiners),
                   StateSum{std::move(e.state_sum), e.state_workers},
                   std::move(e.last_batches), std::move(e.heard_updates)};
}

void MeshExchange::send(PayloadBytes bytes, const std::string& failure) {
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    if (publishing_++ == 0) publishing_since_ = std::chrono::steady_clock::now();
  }
  const bool ok = mesh_->publish(next_message_id_++, std::move(bytes), epoch_deadline_);
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    if (--publishing_ == 0) reported_ = 0;
  }
  if (!ok)
    throw core::UserError(failure,
                          "check the data network between the nodes (dtrain-submit nodes)");
}

// A publish blocked on the data channel's backpressure (peers that do not acknowledge what
// this node sent them) is a stall as well: the watchdog reports it like a barrier's wait,
// naming the peers that hold this node's bytes (backlog()).
void MeshExchange::start_watchdog(std::function<std::vector<std::string>()> backlog) {
  backlog_ = std::move(backlog);
  watchdog_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!watch_stop_) {
      watch_cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (publishing_ == 0 || watch_stop_) continue;
      const auto waited = std::chrono::steady_clock::now() - publishing_since_;
      const int64_t due = waited / stall_after_;
      if (due <= reported_) continue;
      reported_ = due;
      const auto since = publishing_since_;
      lock.unlock();
      std::vector<std::string> waiting = backlog_ ? backlog_() : std::vector<std::string>{};
      if (waiting.empty()) waiting.push_back("the data channel");
      std::string line;
      {
        std::lock_guard<std::mutex> state(mutex_);
        line = stall_line("publishing this node's update", since, waiting);
      }
      if (on_stall) on_stall(line);
      lock.lock();
    }
  });
}

MeshExchange::~MeshExchange() {
  election_.finish();  // its repeats publish through members declared after it
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void MeshExchange::on_loss(uint32_t lost) {
  election_.on_loss(lost);
  std::lock_guard<std::mutex> lock(mutex_);
  set_lost(lost, true);
  if (joining_.count(lost)) {
    // The silence of its old process, noticed after the controller said it is back (a quick
    // restart, as under systemd): it stays in the mesh so that it misses nothing.
    mesh_->add_member(lost);
  } else {
    readmitted_.erase(lost);  // lost again: a later restart may rejoin again
  }
  changed_.notify_all();
}

void MeshExchange::cancel() {
  election_.cancel();
  ring_->cancel();
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  changed_.notify_all();
}

std::vector<std::string> MeshExchange::lost_names() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_names_locked();
}

std::vector<std::string> MeshExchange::lost_names_locked() const {
  std::vector<std::string> out;
  for (uint32_t id : lost_)
    if (!vacant_.count(id)) out.push_back(name_of(id));  // a vacant slot is nobody lost
  return out;
}

void MeshExchange::publish(const core::SharedMessage& message) {
  PayloadBytes bytes = update_payload(*message);
  const size_t size = bytes->size();
  std::lock_guard<std::mutex> lock(publish_mutex_);
  ++published_in_[message->epoch];
  send(std::move(bytes), "this node could not hand an update to the mesh within " +
                             std::to_string(epoch_deadline_.count()) + " ms");
  ++published_;
  bytes_published_ += size;
}

// A round's payload to every node (not counted in published_: that counts updates), then the
// wait until every live member's is in (`has`), with stall reports; a member that misses the
// epoch deadline is named in the log and left out. Throws if the job was cancelled.
std::unique_lock<std::mutex> MeshExchange::exchange_round(PayloadBytes bytes,
                                                          const std::string& what,
                                                          const std::function<bool(uint32_t)>& has) {
  {
    const size_t size = bytes->size();
    std::lock_guard<std::mutex> lock(publish_mutex_);
    send(std::move(bytes), "this node could not send its part of " + what + " within " +
                               std::to_string(epoch_deadline_.count()) + " ms");
    bytes_published_ += size;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::string> missing;
  auto complete = [&] {
    missing.clear();
    for (const JobMember& m : members_)
      if (m.id != self_ && !lost_.count(m.id) && !has(m.id)) missing.push_back(m.name);
    return missing.empty() || cancelled_;
  };
  if (!wait_reporting(lock, what, missing, complete)) {
    std::string names;
    for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
    spdlog::warn("job {}: {} went on without {} (nothing within {} ms)", job_id_text(job_id_),
                 what, names, epoch_deadline_.count());
  }
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  return lock;
}

void MeshExchange::average_parameters(float* params, int64_t n, int64_t round) {
  std::unique_lock<std::mutex> lock =
      exchange_round(parameters_payload(round, params, n),
                     "averaging round " + std::to_string(round),
                     [&](uint32_t id) { return rounds_[round].count(id) > 0; });
  // Summed in member order on every node: the same floats everywhere.
  std::vector<double> sum(size_t(n), 0.0);
  int count = 0;
  for (const JobMember& m : members_) {
    const float* p = nullptr;
    if (m.id == self_) {
      p = params;
    } else {
      auto it = rounds_[round].find(m.id);
      if (it == rounds_[round].end() || int64_t(it->second.size()) != n) continue;
      p = it->second.data();
    }
    for (int64_t i = 0; i < n; ++i) sum[i] += p[i];
    ++count;
  }
  for (int64_t i = 0; i < n; ++i) params[i] = static_cast<float>(sum[i] / count);
  rounds_.erase(rounds_.begin(), rounds_.upper_bound(round));
  last_round_ = std::max(last_round_, round);
}

void MeshExchange::meet(Barrier barrier, double tau_sum, int workers, const StateSum* state) {
  std::vector<uint32_t> joiners;
  EpochEndPayload heard;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (barrier.second == 1) joiners.assign(joining_.begin(), joining_.end());
    if (barrier.second == 0) announce_heard(barrier.first, heard);
  }
  {
    std::lock_guard<std::mutex> lock(publish_mutex_);
    EpochEndPayload e{barrier.first, barrier.second, published_in_[barrier.first], tau_sum,
                      workers, joiners, {}, 0, std::move(heard.last_batches),
                      std::move(heard.heard_updates)};
    if (state) e.state_sum = state->sum, e.state_workers = state->workers;
    send(epoch_end_payload(e), "this node could not announce the end of epoch " +
                                   std::to_string(barrier.first + 1) + " to the mesh");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::string> waiting;
  auto complete = [&] {
    waiting.clear();
    for (const JobMember& m : members_) {
      if (m.id == self_ || lost_.count(m.id)) continue;
      auto a = announced_[m.id].find(barrier);
      if (a == announced_[m.id].end() || received_[m.id][barrier.first] < a->second.published)
        waiting.push_back(m.name);
    }
    return waiting.empty() || !bad_message_.empty() || cancelled_;
  };
  const std::string what = "the end of epoch " + std::to_string(barrier.first + 1) +
                           (barrier.second == 1 ? " (its second barrier)" : "");
  if (!wait_reporting(lock, what, waiting, complete)) {
    std::string names;
    for (const std::string& n : waiting) names += (names.empty() ? "" : ", ") + n;
    throw core::UserError("epoch " + std::to_string(barrier.first + 1) + " did not end within " +
                              std::to_string(epoch_deadline_.count()) +
                              " ms: still waiting for updates from " + names,
                          "check those nodes (dtrain-submit nodes) and the data network");
  }
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  if (!bad_message_.empty())
    throw core::UserError(bad_message_, "run the same dtrain release on every node");
  if (barrier.second == 1 && barrier.first >= 0)
    admit(barrier.first, agreed_joiners(barrier, joiners));
}

// The joiners every live node announced at this barrier: the same set everywhere. A node that
// has not heard of a joiner yet (the controller's news reaches the nodes at different moments)
// has no route to it and would send it nothing, so it waits for the next epoch end, when all have.
std::vector<uint32_t> MeshExchange::agreed_joiners(Barrier barrier,
                                                   const std::vector<uint32_t>& mine) {
  std::vector<uint32_t> agreed;
  for (uint32_t j : mine) {
    bool everyone = true;
    for (const JobMember& m : members_) {
      if (m.id == self_ || lost_.count(m.id)) continue;
      const std::vector<uint32_t>& theirs = announced_[m.id][barrier].joiners;
      everyone = everyone && std::find(theirs.begin(), theirs.end(), j) != theirs.end();
    }
    if (everyone) agreed.push_back(j);
  }
  return agreed;
}

void MeshExchange::admit(int64_t epoch, std::vector<uint32_t> joiners) {
  if (epoch + 1 >= epochs_) return;  // no epoch left to rejoin for
  std::sort(joiners.begin(), joiners.end());
  joiners.erase(std::unique(joiners.begin(), joiners.end()), joiners.end());
  for (uint32_t id : joiners) {
    if (id == self_) continue;
    set_lost(id, false);
    joining_.erase(id);
    admitted_now_.push_back(id);
    admitted_since_start_.insert(id);
    if (readmitted_.insert(id).second) mesh_->add_member(id);
    spdlog::info("job {}: {} is admitted back from epoch {}", job_id_text(job_id_), name_of(id),
                 epoch + 2);
    if (node_collective_)  // every node admits it at this epoch end: all leave NCCL together
      node_collective_->leave(name_of(id) + " joined the job at the end of epoch " +
                              std::to_string(epoch + 1) +
                              ", and NCCL's communicator cannot take a node in");
  }
}

void MeshExchange::set_rejoining(const std::vector<uint32_t>& lost) {
  std::lock_guard<std::mutex> lock(mutex_);
  rejoining_ = true;
  for (uint32_t id : lost) set_lost(id, true);  // the gate learns of them at attach()
}

void MeshExchange::set_epochs(int64_t epochs) {
  std::lock_guard<std::mutex> lock(mutex_);
  epochs_ = epochs;
}

void MeshExchange::on_rejoin(uint32_t id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id == self_) return;
    set_lost(id, true);  // its old process's updates of this epoch are covered by the takeover
    joining_.insert(id);
    if (readmitted_.insert(id).second) mesh_->add_member(id);
    changed_.notify_all();
  }
  election_.on_restarted(id);
  election_.repeat_for_newcomer();  // a job of training.sync: auto trains one way
}

void MeshExchange::on_withdrawn(uint32_t id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id == self_) return;
    joining_.erase(id);  // not coming: from here on like any lost member
  }
  on_loss(id);
}

void MeshExchange::set_vacant(const std::vector<uint32_t>& slots) {
  for (uint32_t id : slots) election_.on_loss(id);  // no probe waits for a slot's answer
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint32_t id : slots) {
    vacant_.insert(id);
    set_lost(id, true);  // the gate learns of them at attach()
  }
}

void MeshExchange::on_join(uint32_t slot, uint32_t id, const std::string& name,
                           const transport::MeshMember& where) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id == self_) return;
    bool known = false;
    for (JobMember& m : members_) {
      if (m.id == slot && vacant_.count(slot)) {  // the slot's workers (and shards) become its
        m.id = id;
        m.name = name;
        vacant_.erase(slot);
        lost_.erase(slot);
      }
      known = known || m.id == id;
    }
    if (!known) return;  // no such slot here (a repeat finds the node in it: a rejoin)
    set_lost(id, true);  // waited for only once admitted
    joining_.insert(id);
    if (readmitted_.insert(id).second) mesh_->add_new_member(where);
    changed_.notify_all();
  }
  election_.repeat_for_newcomer();
}

void MeshExchange::on_snapshot(const SnapshotPayload& in, uint32_t origin) {
  if (in.for_node != self_ || !rejoining_ || snapshot_) return;
  Snapshot s;
  s.epoch = in.epoch;
  s.tau = in.tau;
  s.from = origin;
  s.params.assign(in.params.data, in.params.data + in.params.size);
  s.state.assign(in.state.data, in.state.data + in.state.size);
  s.outer_momentum.assign(in.outer_momentum.data, in.outer_momentum.data + in.outer_momentum.size);
  s.applied = {in.applied_messages, in.applied_digest};
  snapshot_ = std::move(s);
}

bool MeshExchange::resume(Resume& resume) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!rejoining_) return false;
  spdlog::info("job {}: rejoining; waiting for parameters from a live node",
               job_id_text(job_id_));
  if (!changed_.wait_for(lock, epoch_deadline_,
                         [&] { return snapshot_ || cancelled_ || !bad_message_.empty(); }))
    throw core::UserError("no live node sent its parameters within " +
                              std::to_string(epoch_deadline_.count()) + " ms of rejoining",
                          "check the other nodes (dtrain-submit nodes) and the data network");
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  if (!bad_message_.empty())
    throw core::UserError(bad_message_, "run the same dtrain release on every node");
  // It may come before attach(); averaging never attaches (the trainer checks the size).
  if (num_params_ != 0 && int64_t(snapshot_->params.size()) != num_params_)
    throw core::UserError(name_of(snapshot_->from) + " sent " +
                              std::to_string(snapshot_->params.size()) +
                              " parameters; this model has " + std::to_string(num_params_),
                          "run the same dtrain release and job spec on every node");
  resume.next_epoch = snapshot_->epoch + 1;
  resume.tau = snapshot_->tau;
  resume.params = std::move(snapshot_->params);
  resume.state = std::move(snapshot_->state);
  resume.outer_momentum = std::move(snapshot_->outer_momentum);
  resume.applied = snapshot_->applied;
  first_epoch_ = current_epoch_ = resume.next_epoch;
  rejoining_ = false;
  release_pending();
  const std::string from = name_of(snapshot_->from);
  lock.unlock();
  spdlog::info("job {}: rejoined at epoch {} with parameters from {}", job_id_text(job_id_),
               resume.next_epoch + 1, from);
  if (on_resumed) on_resumed(resume.next_epoch, from);
  return true;
}

void MeshExchange::epoch_applied(int64_t epoch, const float* params, int64_t num_params,
                                 const float* state, int64_t num_state, float tau,
                                 const core::AppliedTotals& applied) {
  std::vector<uint32_t> send_to;
  std::vector<float> momentum;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    momentum = outer_momentum_;
    current_epoch_ = epoch + 1;
    release_pending();
    // The first live member that was not just admitted sends the parameters.
    for (const JobMember& m : members_) {
      if (lost_.count(m.id) || std::count(admitted_now_.begin(), admitted_now_.end(), m.id))
        continue;
      if (m.id == self_) send_to = admitted_now_;
      break;
    }
    admitted_now_.clear();
  }
  for (uint32_t target : send_to) {
    PayloadBytes bytes =
        snapshot_payload(target, epoch, tau, params, num_params, state, num_state,
                         applied.messages, applied.digest, momentum);
    const size_t size = bytes->size();
    std::lock_guard<std::mutex> lock(publish_mutex_);
    send(std::move(bytes), "this node could not send its parameters to " + name_of(target));
    bytes_published_ += size;
    spdlog::info("job {}: sent the parameters of epoch {} to {}", job_id_text(job_id_),
                 epoch + 1, name_of(target));
  }
}

int MeshExchange::live_first_worker(int* live_workers) const {
  int first = 0, total = 0;
  for (const JobMember& m : members_) {
    if (lost_.count(m.id)) continue;
    if (m.id == self_) first = total;
    total += m.workers;
  }
  *live_workers = total;
  return first;
}

core::NodeExchange::EpochEnd MeshExchange::end_epoch(int64_t epoch, double local_tau_sum,
                                                     int local_workers) {
  meet({epoch, 0}, local_tau_sum, local_workers);
  forward_missed_updates(epoch);
  await_forwarded_updates(epoch);
  std::lock_guard<std::mutex> lock(mutex_);
  EpochEnd end;
  end.tau_sum = local_tau_sum;
  end.workers = local_workers;
  for (const JobMember& m : members_) {
    if (m.id == self_) continue;
    auto a = announced_[m.id].find({epoch, 0});
    if (a == announced_[m.id].end()) continue;
    end.tau_sum += a->second.tau_sum;
    end.workers += a->second.workers;
  }
  // Lost before it finished its shards: what any survivor's messages from it show it did stays
  // done, the same list on every survivor (mesh_takeover.cc).
  for (uint32_t g : unfinished_lost_workers(epoch)) {
    const int64_t agreed = last_batch_agreed(g, epoch);
    end.missed_batches += agreed - last_batch_heard(g, epoch);
    end.takeover.push_back({int(g), agreed + 1});
  }
  end.live_first_worker = live_first_worker(&end.live_workers);
  end.lost = lost_names_locked();
  return end;
}

std::vector<float> MeshExchange::end_takeover(int64_t epoch, const StateSum& local) {
  meet({epoch, 1}, 0.0, 0, &local);
  return mean_state(epoch, local);
}

// Averaging publishes no updates, so the barrier is only the exchange of known joiners (phase
// 1 of meet): every live node admits the same ones at the same epoch end, and from the next
// round on every live node waits for their parameters.
std::vector<float> MeshExchange::end_averaging_epoch(int64_t epoch, const StateSum& local) {
  meet({epoch, 1}, 0.0, 0, &local);
  return mean_state(epoch, local);
}

// Summed in member order, self included in its place, so every node gets the same bits. A
// node whose state has another length (it cannot be the same model) is left out.
std::vector<float> MeshExchange::mean_state(int64_t epoch, const StateSum& local) {
  if (local.sum.empty() || local.workers <= 0) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<double> sum(local.sum.size(), 0.0);
  int64_t workers = 0;
  for (const JobMember& m : members_) {
    const StateSum* s = &local;
    if (m.id != self_) {
      if (lost_.count(m.id)) continue;
      auto a = announced_[m.id].find({epoch, 1});
      if (a == announced_[m.id].end()) continue;
      s = &a->second.state;
    }
    if (s->sum.size() != sum.size() || s->workers <= 0) continue;
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += s->sum[i];
    workers += s->workers;
  }
  std::vector<float> mean(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / double(workers));
  return mean;
}

core::NodeExchange::EvaluationShard MeshExchange::evaluation_shard() {
  std::lock_guard<std::mutex> lock(mutex_);
  EvaluationShard part{0, 0};
  for (const JobMember& m : members_) {
    if (lost_.count(m.id)) continue;
    if (m.id == self_) part.index = part.count;
    ++part.count;
  }
  return part;
}

// The stall report (docs/architecture/daemon.md, "Stall reports"): a wait that passes the threshold
// names who it waits for, since when, and what was last heard from each; again at every further
// threshold, until it ends or reaches the epoch deadline.
bool MeshExchange::wait_reporting(std::unique_lock<std::mutex>& lock, const std::string& what,
                                  const std::vector<std::string>& waiting,
                                  const std::function<bool()>& done) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + epoch_deadline_;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return done();
    const auto next = std::min(deadline, now + stall_after_);
    if (changed_.wait_until(lock, next, done)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (on_stall) on_stall(stall_line(what, start, waiting));
  }
}

std::string MeshExchange::stall_line(const std::string& what,
                                     std::chrono::steady_clock::time_point since,
                                     const std::vector<std::string>& waiting) const {
  const auto now = std::chrono::steady_clock::now();
  auto seconds = [](std::chrono::steady_clock::duration d) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s",
                  std::chrono::duration<double>(d).count());
    return std::string(text);
  };
  auto heard = [&](uint32_t id) {
    auto it = last_heard_.find(id);
    return it == last_heard_.end()
               ? std::string("nothing heard from it in this job")
               : "last heard " + seconds(now - it->second.at) + " ago: " + it->second.what;
  };
  std::string line = "stalled: " + what + " has waited " + seconds(now - since) + " for ";
  for (size_t i = 0; i < waiting.size(); ++i) {
    line += (i ? "; " : "") + waiting[i];
    const JobMember* m = member_named(waiting[i].substr(0, waiting[i].find(' ')));
    if (!m) continue;
    line += " (" + heard(m->id) + ")";
    // Its messages come through another node (the root, in plain mode): a silent relay
    // holds up everyone behind it, so it is named too.
    const uint32_t relay = mesh_ ? mesh_->relay_of(m->id) : m->id;
    if (relay != m->id && relay != self_)
      line += ", relayed by " + name_of(relay) + " (" + heard(relay) + ")";
  }
  return line;
}

// A step waiting at the step gate (training.sync) for the messages of global workers
// `waiting`: reported by their nodes.
void MeshExchange::step_stalled(std::chrono::milliseconds waited, int64_t epoch, int64_t batch,
                                const std::vector<int>& waiting) {
  std::vector<std::string> nodes;
  int first = 0;
  for (const JobMember& m : members_) {
    for (int w : waiting)
      if (w >= first && w < first + m.workers && m.id != self_) {
        nodes.push_back(m.name);
        break;
      }
    first += m.workers;
  }
  if (nodes.empty()) return;
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    line = stall_line("minibatch " + std::to_string(batch + 1) + " of epoch " +
                          std::to_string(epoch + 1) + " (training.sync)",
                      std::chrono::steady_clock::now() - waited, nodes);
  }
  if (on_stall) on_stall(line);
}

const JobMember* MeshExchange::member_named(const std::string& name) const {
  for (const JobMember& m : members_)
    if (m.name == name) return &m;
  return nullptr;
}

std::string MeshExchange::describe(const MeshPayloadIn& in) {
  switch (in.kind) {
    case MeshPayloadIn::Kind::kUpdate:
      return "an update of epoch " + std::to_string(in.update.epoch + 1) + ", minibatch " +
             std::to_string(in.update.batch + 1);
    case MeshPayloadIn::Kind::kEpochEnd:
      return "the end of its epoch " + std::to_string(in.epoch_end.epoch + 1);
    case MeshPayloadIn::Kind::kSnapshot:
      return "a parameter snapshot";
    case MeshPayloadIn::Kind::kParameters:
      return "its parameters for averaging round " + std::to_string(in.parameters.round);
    case MeshPayloadIn::Kind::kPseudoGradient:
      return "its pseudo-gradient for round " + std::to_string(in.pseudo_gradient.round / 2 + 1) +
             " of local steps";
    case MeshPayloadIn::Kind::kLinkProbe:
      return "a link probe (training.sync: auto)";
    case MeshPayloadIn::Kind::kLinkProbeAck:
      return "an answer to a link probe";
    case MeshPayloadIn::Kind::kSyncChoice:
      return "the job's choice of training.sync";
    case MeshPayloadIn::Kind::kRehearsalPlan:
      return "a plan to rehearse training (training.sync: auto)";
    case MeshPayloadIn::Kind::kRehearsalMark:
      return "its part in rehearsing training";
    case MeshPayloadIn::Kind::kRingSegment:
      return "part " + std::to_string(in.ring.step + 1) + " of its all-reduce of " +
             core::describe_round(in.ring.round);
    case MeshPayloadIn::Kind::kRingResult:
      return "the result of the all-reduce of " + core::describe_round(in.ring.round);
    case MeshPayloadIn::Kind::kForwarded:
      return "a lost node's updates it forwards";
    case MeshPayloadIn::Kind::kMalformed:
      return "a malformed message";
  }
  return "?";
}

}  // namespace dtrain::daemon
