#include "daemon/node/mesh_ring.h"

#include <spdlog/spdlog.h>

#include "core/train/gradient_rounds.h"
#include "daemon/protocol/job_id.h"

namespace dtrain::daemon {

MeshExchange::RingPostOnMesh::RingPostOnMesh(MeshExchange& exchange)
    : exchange_(exchange),
      next_id_(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count())) {}

void MeshExchange::RingPostOnMesh::send_segment(uint32_t to, int64_t round,
                                                const std::vector<uint32_t>& members, int step,
                                                const float* values, int64_t n) {
  {
    std::lock_guard<std::mutex> lock(unsent_mutex_);
    if (round == unsent_round_ && to == unsent_to_) return;
  }
  if (send(to, ring_segment_payload(round, members, step, values, n), true)) return;
  std::lock_guard<std::mutex> lock(unsent_mutex_);
  unsent_round_ = round;
  unsent_to_ = to;
}

// On a network handler's thread: nothing here may throw or wait. A result too large for one
// payload (a model past kMaxPayloadBytes) is not sent: the members waiting for it fail at their
// deadline, naming this node.
void MeshExchange::RingPostOnMesh::send_result(const std::vector<uint32_t>& to, int64_t round,
                                               const std::vector<uint32_t>& members,
                                               const float* values, int64_t n) {
  PayloadBytes bytes;
  try {
    bytes = ring_result_payload(round, members, values, n);
  } catch (const std::exception& e) {
    spdlog::warn("job {}: the result of the all-reduce of {} cannot be sent: {}",
                 job_id_text(exchange_.job_id_), core::describe_round(round), e.what());
    return;
  }
  for (uint32_t member : to) send(member, bytes, false);
}

// A part that cannot be sent (its member gone, the queue full past the deadline) is not an
// error here: the member waiting for it is lost to the others, or times out naming this node.
bool MeshExchange::RingPostOnMesh::send(uint32_t to, const PayloadBytes& bytes, bool wait) {
  MeshPort* mesh = exchange_.mesh_;
  if (!mesh || !mesh->send_to(to, next_id_++, bytes, wait, exchange_.epoch_deadline_)) {
    spdlog::warn("job {}: an all-reduce part for {} could not be sent",
                 job_id_text(exchange_.job_id_), exchange_.name_of(to));
    return false;
  }
  bytes_ += bytes->size();
  return true;
}

uint64_t MeshExchange::bytes_sent() const {
  return bytes_published_ + ring_post_->bytes_sent();
}

std::vector<uint32_t> MeshExchange::live_members() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<uint32_t> live;
  for (const JobMember& m : members_)
    if (!lost_.count(m.id)) live.push_back(m.id);
  return live;
}

void MeshExchange::use_node_collective(NodeCollectivePath::Open open,
                                       std::vector<uint32_t> members) {
  const std::vector<uint32_t> ranks = members;
  NodeCollectivePath::Exchange seam;
  // The vote's ring: the communicator's members that are live, none admitted since it formed
  // (a joiner never votes: it sums over the ring from its first step).
  seam.vote = [this, ranks](float mine, int64_t round) {
    auto voters = [this, &ranks] {
      std::vector<uint32_t> out;
      std::lock_guard<std::mutex> lock(mutex_);
      for (uint32_t id : ranks)
        if (!lost_.count(id) && !admitted_since_start_.count(id)) out.push_back(id);
      return out;
    };
    ring_->sum(&mine, 1, round, voters, epoch_deadline_);
    return mine;
  };
  seam.member_gone = [this, ranks] {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_) return true;
    for (uint32_t id : ranks)
      if (lost_.count(id)) return true;
    return false;
  };
  seam.log = [this](const std::string& line) {
    spdlog::info("job {}: {}", job_id_text(job_id_), line);
  };
  node_collective_ = std::make_unique<NodeCollectivePath>(std::move(open), std::move(members),
                                                          std::move(seam), epoch_deadline_);
}

void MeshExchange::sum_over_nodes(float* values, int64_t n, int64_t round) {
  const std::vector<uint32_t> counted =
      node_collective_ && node_collective_->sum(values, n, round)
          ? node_collective_->members()
          : ring_->sum(values, n, round, [this] { return live_members(); }, epoch_deadline_);
  if (core::bucket_of_round_id(round) + 1 < step_buckets_.load()) return;  // not the step's last
  std::lock_guard<std::mutex> lock(mutex_);
  counted_in_step(counted, round);
}

void MeshExchange::rehearse_ring(float* values, int64_t n, int32_t index,
                                 std::chrono::milliseconds deadline) {
  ring_->sum(values, n, index, [this] { return live_members(); }, deadline);
}

// The workers of every node a step counted did that step's minibatch (or had none left): a lost
// node's takeover starts after it.
void MeshExchange::counted_in_step(const std::vector<uint32_t>& counted, int64_t round) {
  const Position at{core::epoch_of_round_id(round), core::step_of_round_id(round)};
  int global = 0;
  for (const JobMember& m : members_) {
    const int first = global;
    global += m.workers;
    if (std::find(counted.begin(), counted.end(), m.id) == counted.end()) continue;
    for (int g = first; g < global; ++g) {
      Position& last = last_position_[uint32_t(g)];
      if (std::make_pair(at.epoch, at.batch) > std::make_pair(last.epoch, last.batch)) last = at;
    }
  }
}

// Only the job's members take part in its ring (any peer of the node's endpoint could send).
void MeshExchange::on_ring_payload(const MeshPayloadIn& in, uint32_t origin,
                                   std::shared_ptr<const std::vector<uint8_t>> bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!member(origin)) {
      // Dropped, not failing the job: a peer outside it must not be able to end it.
      if (!stranger_warned_)
        spdlog::warn("job {}: dropped an all-reduce part from node id {}, not one of the job's",
                     job_id_text(job_id_), origin);
      stranger_warned_ = true;
      return;
    }
    last_heard_[origin] = {std::chrono::steady_clock::now(), describe(in)};
  }
  if (in.kind == MeshPayloadIn::Kind::kRingSegment)
    ring_->on_segment(origin, in.ring.round, in.ring.members, in.ring.step,
                      in.ring.part(std::move(bytes)));
  else
    ring_->on_result(origin, in.ring.round, in.ring.members, in.ring.floats());
}

}  // namespace dtrain::daemon
