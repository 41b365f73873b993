#include "daemon/node/node_collective_path.h"

#include <cstring>
#include <memory>

#include "core/collective/round_ids.h"

namespace dtrain::daemon {

NodeCollectivePath::NodeCollectivePath(Open open, std::vector<uint32_t> members,
                                       Exchange exchange, std::chrono::milliseconds deadline)
    : open_(std::move(open)),
      members_(std::move(members)),
      exchange_(std::move(exchange)),
      deadline_(deadline) {}

NodeCollectivePath::~NodeCollectivePath() = default;

void NodeCollectivePath::leave(const std::string& why) {
  std::lock_guard<std::mutex> lock(leave_mutex_);
  if (leave_why_.empty()) leave_why_ = why;
}

// Asked every few microseconds while NCCL works: the exchange's lock (which the mesh's handlers
// take) at most once a millisecond. Callers wait half the barrier deadline: a node that gives
// up still votes before the others' ring round gives up on it.
kernels::GiveUp NodeCollectivePath::give_up_after(std::chrono::milliseconds wait) const {
  using Clock = std::chrono::steady_clock;
  struct Seen {
    Clock::time_point at{};
    bool gone = false;
  };
  const auto until = Clock::now() + wait;
  auto seen = std::make_shared<Seen>();
  return [this, until, seen] {
    const auto now = Clock::now();
    if (now - seen->at >= std::chrono::milliseconds(1)) {
      seen->at = now;
      seen->gone = exchange_.member_gone();
    }
    return seen->gone || now > until;
  };
}

void NodeCollectivePath::turn_off(const std::string& why) {
  off_ = true;
  collective_.reset();
  kept_ = {};
  exchange_.log("the sums between nodes go over the mesh from here on: " + why);
}

std::string NodeCollectivePath::leaving() {
  std::lock_guard<std::mutex> lock(leave_mutex_);
  return leave_why_;
}

bool NodeCollectivePath::form() {
  formed_ = true;
  std::string why = leaving();
  if (why.empty() && exchange_.member_gone())
    why = "NCCL's communicator did not form here: a node of the job was lost before it did";
  if (why.empty()) {
    collective_ = open_(give_up_after(deadline_ / 2), &why);
    if (!collective_) why = "NCCL's communicator did not form here: " + why;
  }
  const float failed = exchange_.vote(collective_ ? 0.f : 1.f, core::kFormingVoteRound);
  if (failed == 0.f) {
    exchange_.log("the sums between nodes go over " + collective_->name());
    return true;
  }
  turn_off(collective_ ? "NCCL's communicator did not form on every node (their logs say why)"
                       : why);
  return false;
}

std::string NodeCollectivePath::call(float* values, int64_t n) {
  if (std::string why = leaving(); !why.empty()) return why;
  if (exchange_.member_gone()) return "a node of NCCL's communicator is lost";
  try {
    collective_->all_reduce_sum(values, n, give_up_after(deadline_ / 2));
    return "";
  } catch (const std::exception& e) {
    return std::string("this node's NCCL all-reduce failed: ") + e.what();
  }
}

bool NodeCollectivePath::sum(float* values, int64_t n, int64_t round) {
  if (off_) return false;
  if (!formed_ && !form()) return false;
  kept_.assign(values, values + n);
  const std::string why = call(values, n);
  const float failed = exchange_.vote(why.empty() ? 0.f : 1.f, core::vote_round_id(round));
  if (failed == 0.f) return true;
  std::memcpy(values, kept_.data(), sizeof(float) * size_t(n));
  turn_off(why.empty() ? "another node's NCCL all-reduce failed, or it left (its log says why)"
                       : why);
  return false;
}

}  // namespace dtrain::daemon
