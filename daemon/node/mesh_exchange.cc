#include "daemon/node/mesh_exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "core/codec/message_bytes.h"
#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

// The first byte of a mesh message says what it carries.
constexpr uint8_t kUpdate = 'U';  // 'U', epoch (8), minibatch (8), the encoded message
constexpr size_t kUpdateHeader = 1 + 8 + 8;
// 'E', epoch (8), phase (4), updates published in the epoch (8), tau sum (8), workers (4),
// joiners (4), their ids (4 each)
constexpr uint8_t kEpochEnd = 'E';
constexpr size_t kEpochEndBytes = 1 + 8 + 4 + 8 + 8 + 4 + 4;
constexpr size_t kMaxJoiners = 4096;
// 'S', for node (4), epoch (8), tau (4), parameters (8), state (8), then the floats: a live
// node's replica at the end of `epoch`, for a restarted node.
constexpr uint8_t kSnapshot = 'S';
constexpr size_t kSnapshotHeader = 1 + 4 + 8 + 4 + 8 + 8;
constexpr uint8_t kParameters = 'P';  // 'P', round (8 bytes), the parameters (floats)

template <class T>
T read_at(const std::vector<uint8_t>& b, size_t offset) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof v);
  return v;
}

template <class T>
void write_at(std::vector<uint8_t>& b, size_t offset, T v) {
  std::memcpy(b.data() + offset, &v, sizeof v);
}

}  // namespace

MeshExchange::MeshExchange(uint64_t job_id, uint32_t self, const std::vector<JobMember>& members,
                           std::chrono::milliseconds epoch_deadline)
    : job_id_(job_id),
      self_(self),
      members_(members),
      epoch_deadline_(epoch_deadline),
      next_message_id_(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count())) {
  for (const JobMember& m : members_) {
    if (m.id == self_) first_worker_ = total_workers_;
    total_workers_ += m.workers;
  }
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
}

std::string MeshExchange::name_of(uint32_t id) const {
  for (const JobMember& m : members_)
    if (m.id == id) return m.name;
  return "node " + std::to_string(id);
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
    if (it->at.epoch < first_epoch_) {
      it = pending_.erase(it);  // in the snapshot already
    } else if (deliverable(it->at)) {
      deliver(it->bytes.data(), it->bytes.size(), it->origin, it->at);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void MeshExchange::deliver(const uint8_t* data, size_t size, uint32_t origin, Position at) {
  core::EncodedMessage m;
  std::string error;
  if (!core::message_from_bytes(data, size, num_params_, m, error)) {
    if (bad_message_.empty())
      bad_message_ = "a malformed update from " + name_of(origin) + ": " + error;
    return;
  }
  Position& last = last_position_[m.origin];
  if (std::make_pair(at.epoch, at.batch) > std::make_pair(last.epoch, last.batch)) last = at;
  m.epoch = at.epoch;
  m.batch = at.batch;
  bus_->publish(-1, std::make_shared<const core::EncodedMessage>(std::move(m)));
  ++received_[origin][at.epoch];
}

void MeshExchange::on_message(const transport::Delivery& d) {
  if (d.bytes.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (d.bytes[0] == kUpdate && d.bytes.size() >= kUpdateHeader) {
    if (detached_) return;  // after training: nobody applies it
    const Position at{read_at<int64_t>(d.bytes, 1), read_at<int64_t>(d.bytes, 9)};
    if (deliverable(at))
      deliver(d.bytes.data() + kUpdateHeader, d.bytes.size() - kUpdateHeader, d.origin, at);
    else if (at.epoch >= first_epoch_)
      pending_.push_back(
          {d.origin, at, std::vector<uint8_t>(d.bytes.begin() + kUpdateHeader, d.bytes.end())});
  } else if (d.bytes[0] == kSnapshot && d.bytes.size() >= kSnapshotHeader) {
    on_snapshot(d);
  } else if (d.bytes[0] == kParameters && d.bytes.size() >= 9 && (d.bytes.size() - 9) % 4 == 0) {
    std::vector<float>& p = rounds_[read_at<int64_t>(d.bytes, 1)][d.origin];
    p.resize((d.bytes.size() - 9) / 4);
    std::memcpy(p.data(), d.bytes.data() + 9, p.size() * 4);
  } else if (d.bytes[0] == kEpochEnd && d.bytes.size() >= kEpochEndBytes) {
    const Barrier barrier{read_at<int64_t>(d.bytes, 1), read_at<int32_t>(d.bytes, 9)};
    const uint32_t joiners = read_at<uint32_t>(d.bytes, 33);
    if (joiners <= kMaxJoiners && d.bytes.size() == kEpochEndBytes + 4 * size_t(joiners)) {
      Announcement a{read_at<uint64_t>(d.bytes, 13), read_at<double>(d.bytes, 21),
                     read_at<int32_t>(d.bytes, 29), {}};
      for (uint32_t i = 0; i < joiners; ++i)
        a.joiners.push_back(read_at<uint32_t>(d.bytes, kEpochEndBytes + 4 * i));
      announced_[d.origin][barrier] = std::move(a);
    }
  }
  changed_.notify_all();
}

void MeshExchange::on_loss(uint32_t lost) {
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
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  changed_.notify_all();
}

std::vector<std::string> MeshExchange::lost_names() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (uint32_t id : lost_) out.push_back(name_of(id));
  return out;
}

void MeshExchange::publish(const core::SharedMessage& message) {
  const int64_t epoch = message->epoch, batch = message->batch;
  std::vector<uint8_t> bytes = core::message_to_bytes(*message);
  bytes.insert(bytes.begin(), kUpdateHeader, 0);
  bytes[0] = kUpdate;
  write_at(bytes, 1, epoch);
  write_at(bytes, 9, batch);
  const size_t size = bytes.size();
  auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  std::lock_guard<std::mutex> lock(publish_mutex_);
  ++published_in_[epoch];
  if (!mesh_->publish(job_id_, next_message_id_++, shared, epoch_deadline_))
    throw core::UserError("this node could not hand an update to the mesh within " +
                              std::to_string(epoch_deadline_.count()) + " ms",
                          "check the data network between the nodes (dtrain-submit nodes)");
  ++published_;
  bytes_published_ += size;
}

void MeshExchange::average_parameters(float* params, int64_t n, int64_t round) {
  {
    std::vector<uint8_t> bytes(9 + size_t(n) * 4);
    bytes[0] = kParameters;
    std::memcpy(bytes.data() + 1, &round, 8);
    std::memcpy(bytes.data() + 9, params, size_t(n) * 4);
    std::lock_guard<std::mutex> lock(publish_mutex_);
    if (!mesh_->publish(job_id_, next_message_id_++,
                        std::make_shared<const std::vector<uint8_t>>(std::move(bytes)),
                        epoch_deadline_))
      throw core::UserError("this node could not send its parameters within " +
                                std::to_string(epoch_deadline_.count()) + " ms",
                            "check the data network between the nodes (dtrain-submit nodes)");
    bytes_published_ += 9 + size_t(n) * 4;  // not counted in published_: that counts updates
  }
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::string> missing;
  auto complete = [&] {
    missing.clear();
    for (const JobMember& m : members_)
      if (m.id != self_ && !lost_.count(m.id) && !rounds_[round].count(m.id))
        missing.push_back(m.name);
    return missing.empty() || cancelled_;
  };
  if (!changed_.wait_for(lock, epoch_deadline_, complete)) {
    std::string names;
    for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
    spdlog::warn("job {}: averaging round {} went on without {} (nothing within {} ms)",
                 job_id_, round, names, epoch_deadline_.count());
  }
  if (cancelled_) throw core::UserError("the job was cancelled", "");
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
  rounds_.erase(round);
}

void MeshExchange::meet(Barrier barrier, double tau_sum, int workers) {
  std::vector<uint32_t> joiners;
  if (barrier.second == 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    joiners.assign(joining_.begin(), joining_.end());
  }
  {
    std::lock_guard<std::mutex> lock(publish_mutex_);
    std::vector<uint8_t> bytes(kEpochEndBytes + 4 * joiners.size());
    bytes[0] = kEpochEnd;
    write_at(bytes, 1, barrier.first);
    write_at(bytes, 9, int32_t(barrier.second));
    write_at(bytes, 13, published_in_[barrier.first]);
    write_at(bytes, 21, tau_sum);
    write_at(bytes, 29, int32_t(workers));
    write_at(bytes, 33, uint32_t(joiners.size()));
    for (size_t i = 0; i < joiners.size(); ++i) write_at(bytes, kEpochEndBytes + 4 * i, joiners[i]);
    mesh_->publish(job_id_, next_message_id_++,
                   std::make_shared<const std::vector<uint8_t>>(std::move(bytes)),
                   epoch_deadline_);
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
  if (!changed_.wait_for(lock, epoch_deadline_, complete)) {
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
  if (barrier.second == 1 && barrier.first >= 0) {
    // Every live node now has every live node's list: the same union everywhere.
    for (const JobMember& m : members_)
      if (m.id != self_ && !lost_.count(m.id))
        for (uint32_t j : announced_[m.id][barrier].joiners) joiners.push_back(j);
    admit(barrier.first, std::move(joiners));
  }
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
    if (readmitted_.insert(id).second) mesh_->add_member(id);
    spdlog::info("job {}: {} is admitted back from epoch {}", job_id_, name_of(id), epoch + 2);
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
  std::lock_guard<std::mutex> lock(mutex_);
  if (id == self_) return;
  set_lost(id, true);  // its old process's updates of this epoch are covered by the takeover
  joining_.insert(id);
  if (readmitted_.insert(id).second) mesh_->add_member(id);
  changed_.notify_all();
}

void MeshExchange::on_snapshot(const transport::Delivery& d) {
  const uint32_t target = read_at<uint32_t>(d.bytes, 1);
  if (target != self_ || !rejoining_ || snapshot_) return;
  const uint64_t n = read_at<uint64_t>(d.bytes, 17), ns = read_at<uint64_t>(d.bytes, 25);
  if (n > (uint64_t(1) << 32) || ns > (uint64_t(1) << 32) ||
      d.bytes.size() != kSnapshotHeader + 4 * (n + ns)) {
    if (bad_message_.empty()) bad_message_ = "a malformed snapshot from " + name_of(d.origin);
    return;
  }
  Snapshot s;
  s.epoch = read_at<int64_t>(d.bytes, 5);
  s.tau = read_at<float>(d.bytes, 13);
  s.from = d.origin;
  s.params.resize(n);
  s.state.resize(ns);
  std::memcpy(s.params.data(), d.bytes.data() + kSnapshotHeader, 4 * n);
  std::memcpy(s.state.data(), d.bytes.data() + kSnapshotHeader + 4 * n, 4 * ns);
  snapshot_ = std::move(s);
}

bool MeshExchange::resume(Resume& resume) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!rejoining_) return false;
  spdlog::info("job {}: rejoining; waiting for parameters from a live node", job_id_);
  if (!changed_.wait_for(lock, epoch_deadline_,
                         [&] { return snapshot_ || cancelled_ || !bad_message_.empty(); }))
    throw core::UserError("no live node sent its parameters within " +
                              std::to_string(epoch_deadline_.count()) + " ms of rejoining",
                          "check the other nodes (dtrain-submit nodes) and the data network");
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  if (!bad_message_.empty())
    throw core::UserError(bad_message_, "run the same dtrain release on every node");
  if (int64_t(snapshot_->params.size()) != num_params_)  // it may come before attach()
    throw core::UserError(name_of(snapshot_->from) + " sent " +
                              std::to_string(snapshot_->params.size()) +
                              " parameters; this model has " + std::to_string(num_params_),
                          "run the same dtrain release and job spec on every node");
  resume.next_epoch = snapshot_->epoch + 1;
  resume.tau = snapshot_->tau;
  resume.params = std::move(snapshot_->params);
  resume.state = std::move(snapshot_->state);
  first_epoch_ = current_epoch_ = resume.next_epoch;
  rejoining_ = false;
  release_pending();
  const std::string from = name_of(snapshot_->from);
  lock.unlock();
  spdlog::info("job {}: rejoined at epoch {} with parameters from {}", job_id_,
               resume.next_epoch + 1, from);
  if (on_resumed) on_resumed(resume.next_epoch, from);
  return true;
}

void MeshExchange::epoch_applied(int64_t epoch, const float* params, int64_t num_params,
                                 const float* state, int64_t num_state, float tau) {
  std::vector<uint32_t> send_to;
  {
    std::lock_guard<std::mutex> lock(mutex_);
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
    std::vector<uint8_t> bytes(kSnapshotHeader + 4 * size_t(num_params + num_state));
    bytes[0] = kSnapshot;
    write_at(bytes, 1, target);
    write_at(bytes, 5, epoch);
    write_at(bytes, 13, tau);
    write_at(bytes, 17, uint64_t(num_params));
    write_at(bytes, 25, uint64_t(num_state));
    std::memcpy(bytes.data() + kSnapshotHeader, params, 4 * size_t(num_params));
    if (num_state > 0)
      std::memcpy(bytes.data() + kSnapshotHeader + 4 * num_params, state, 4 * size_t(num_state));
    const size_t size = bytes.size();
    std::lock_guard<std::mutex> lock(publish_mutex_);
    if (!mesh_->publish(job_id_, next_message_id_++,
                        std::make_shared<const std::vector<uint8_t>>(std::move(bytes)),
                        epoch_deadline_))
      throw core::UserError("this node could not send its parameters to " + name_of(target),
                            "check the data network between the nodes (dtrain-submit nodes)");
    bytes_published_ += size;
    spdlog::info("job {}: sent the parameters of epoch {} to {}", job_id_, epoch + 1,
                 name_of(target));
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
  std::lock_guard<std::mutex> lock(mutex_);
  EpochEnd end;
  end.tau_sum = local_tau_sum;
  end.workers = local_workers;
  int global = 0;
  for (const JobMember& m : members_) {
    const int first = global;
    global += m.workers;
    if (m.id == self_) continue;
    auto a = announced_[m.id].find({epoch, 0});
    if (a != announced_[m.id].end()) {
      end.tau_sum += a->second.tau_sum;
      end.workers += a->second.workers;
    } else if (lost_.count(m.id) && epoch >= 0) {
      // Lost before it finished its shards: what its messages show it did stays done.
      for (int g = first; g < global; ++g) {
        const Position& at = last_position_[uint32_t(g)];
        end.takeover.push_back({g, at.epoch == epoch ? at.batch + 1 : 0});
      }
    }
  }
  end.live_first_worker = live_first_worker(&end.live_workers);
  for (uint32_t id : lost_) end.lost.push_back(name_of(id));
  return end;
}

void MeshExchange::end_takeover(int64_t epoch) { meet({epoch, 1}, 0.0, 0); }

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

}  // namespace dtrain::daemon
