#include "daemon/node/mesh_exchange.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "core/codec/message_bytes.h"
#include "core/util/error.h"

namespace dtrain::daemon {
namespace {

// The first byte of a mesh message says what it carries.
constexpr uint8_t kUpdate = 'U';
constexpr uint8_t kEpochEnd = 'E';
constexpr size_t kEpochEndBytes = 1 + 8 + 8 + 8 + 4;
constexpr uint8_t kParameters = 'P';  // 'P', round (8 bytes), the parameters (floats)

}  // namespace

MeshExchange::MeshExchange(uint64_t job_id, uint32_t self, const std::vector<JobMember>& members,
                           std::chrono::milliseconds epoch_deadline)
    : job_id_(job_id), self_(self), members_(members), epoch_deadline_(epoch_deadline) {
  for (const JobMember& m : members_) {
    if (m.id == self_) first_worker_ = total_workers_;
    total_workers_ += m.workers;
  }
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
  for (auto& [origin, bytes] : early_) deliver(bytes.data(), bytes.size(), origin);
  early_.clear();
}

void MeshExchange::deliver(const uint8_t* data, size_t size, uint32_t origin) {
  core::EncodedMessage m;
  std::string error;
  if (!core::message_from_bytes(data, size, num_params_, m, error)) {
    if (bad_message_.empty())
      bad_message_ = "a malformed update from " + name_of(origin) + ": " + error;
    return;
  }
  bus_->publish(-1, std::make_shared<const core::EncodedMessage>(std::move(m)));
  ++received_[origin];
}

void MeshExchange::on_message(const transport::Delivery& d) {
  if (d.bytes.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (d.bytes[0] == kUpdate) {
    if (bus_) deliver(d.bytes.data() + 1, d.bytes.size() - 1, d.origin);
    else early_.emplace_back(d.origin, std::vector<uint8_t>(d.bytes.begin() + 1, d.bytes.end()));
  } else if (d.bytes[0] == kParameters && d.bytes.size() >= 9 && (d.bytes.size() - 9) % 4 == 0) {
    int64_t round;
    std::memcpy(&round, d.bytes.data() + 1, 8);
    std::vector<float>& p = rounds_[round][d.origin];
    p.resize((d.bytes.size() - 9) / 4);
    std::memcpy(p.data(), d.bytes.data() + 9, p.size() * 4);
  } else if (d.bytes[0] == kEpochEnd && d.bytes.size() == kEpochEndBytes) {
    int64_t epoch;
    Announcement a;
    std::memcpy(&epoch, d.bytes.data() + 1, 8);
    std::memcpy(&a.published, d.bytes.data() + 9, 8);
    std::memcpy(&a.tau_sum, d.bytes.data() + 17, 8);
    std::memcpy(&a.workers, d.bytes.data() + 25, 4);
    announced_[d.origin][epoch] = a;
  }
  changed_.notify_all();
}

void MeshExchange::on_loss(uint32_t lost) {
  std::lock_guard<std::mutex> lock(mutex_);
  lost_.insert(lost);
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
  std::vector<uint8_t> bytes = core::message_to_bytes(*message);
  bytes.insert(bytes.begin(), kUpdate);
  const size_t size = bytes.size();
  auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  std::lock_guard<std::mutex> lock(publish_mutex_);
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

core::NodeExchange::EpochEnd MeshExchange::end_epoch(int64_t epoch, double local_tau_sum,
                                                     int local_workers) {
  {
    std::lock_guard<std::mutex> lock(publish_mutex_);
    std::vector<uint8_t> bytes(kEpochEndBytes);
    bytes[0] = kEpochEnd;
    std::memcpy(bytes.data() + 1, &epoch, 8);
    std::memcpy(bytes.data() + 9, &published_, 8);
    std::memcpy(bytes.data() + 17, &local_tau_sum, 8);
    std::memcpy(bytes.data() + 25, &local_workers, 4);
    mesh_->publish(job_id_, next_message_id_++,
                   std::make_shared<const std::vector<uint8_t>>(std::move(bytes)),
                   epoch_deadline_);
  }
  EpochEnd end;
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::string> waiting;
  auto complete = [&] {
    waiting.clear();
    for (const JobMember& m : members_) {
      if (m.id == self_ || lost_.count(m.id)) continue;
      auto a = announced_[m.id].find(epoch);
      if (a == announced_[m.id].end() || received_[m.id] < a->second.published)
        waiting.push_back(m.name);
    }
    return waiting.empty() || !bad_message_.empty() || cancelled_;
  };
  if (!changed_.wait_for(lock, epoch_deadline_, complete)) {
    std::string names;
    for (const std::string& n : waiting) names += (names.empty() ? "" : ", ") + n;
    throw core::UserError("epoch " + std::to_string(epoch + 1) + " did not end within " +
                              std::to_string(epoch_deadline_.count()) +
                              " ms: still waiting for updates from " + names,
                          "check those nodes (dtrain-submit nodes) and the data network");
  }
  if (cancelled_) throw core::UserError("the job was cancelled", "");
  if (!bad_message_.empty())
    throw core::UserError(bad_message_, "run the same dtrain release on every node");
  end.tau_sum = local_tau_sum;
  end.workers = local_workers;
  for (const JobMember& m : members_) {
    if (m.id == self_ || lost_.count(m.id)) continue;
    const Announcement& a = announced_[m.id][epoch];
    end.tau_sum += a.tau_sum;
    end.workers += a.workers;
  }
  for (uint32_t id : lost_) end.lost.push_back(name_of(id));
  return end;
}

}  // namespace dtrain::daemon
