#include "daemon/node/node_collective_path.h"

#include <cstring>

namespace dtrain::daemon {

namespace {
// The votes' round ids: each step's round (core::step_round_id's, increasing) gives two, the
// forming vote before its sum's, and both above every earlier step's.
int64_t forming_vote(int64_t round) { return 2 * round; }
int64_t sum_vote(int64_t round) { return 2 * round + 1; }
}  // namespace

NodeCollectivePath::NodeCollectivePath(Open open, std::vector<uint32_t> members, int index,
                                       Exchange exchange, std::chrono::milliseconds deadline)
    : open_(std::move(open)),
      members_(std::move(members)),
      index_(index),
      exchange_(std::move(exchange)),
      deadline_(deadline) {}

NodeCollectivePath::~NodeCollectivePath() = default;

void NodeCollectivePath::leave(const std::string& why) {
  std::lock_guard<std::mutex> lock(leave_mutex_);
  if (leave_why_.empty()) leave_why_ = why;
}

kernels::GiveUp NodeCollectivePath::give_up_after(std::chrono::milliseconds wait) const {
  const auto until = std::chrono::steady_clock::now() + wait;
  return [this, until] {
    return exchange_.member_gone() || std::chrono::steady_clock::now() > until;
  };
}

// Every node's vote: one value, 1 where its call succeeded; where it failed, its rank in a
// second value, so that no two failures look alike. Kept only when all are 1.
bool NodeCollectivePath::vote(bool succeeded, int64_t vote_round) {
  const float done[1] = {1.0f};
  const float failed[2] = {0.0f, float(index_)};
  const bool same = succeeded ? exchange_.same_on_every_node(done, 1, vote_round)
                              : exchange_.same_on_every_node(failed, 2, vote_round);
  return succeeded && same;
}

void NodeCollectivePath::turn_off(const std::string& why) {
  off_ = true;
  collective_.reset();
  kept_ = {};
  exchange_.log("the sums between nodes go over the mesh from here on: " + why);
}

bool NodeCollectivePath::form(int64_t round) {
  formed_ = true;
  std::string why;
  // Half the deadline: a node that gives up still votes before the others' vote gives up on it.
  if (!exchange_.member_gone()) collective_ = open_(give_up_after(deadline_ / 2), &why);
  else why = "a node of the job was lost before NCCL's communicator formed";
  const bool everywhere = vote(collective_ != nullptr, forming_vote(round));
  if (everywhere) {
    exchange_.log("the sums between nodes go over " + collective_->name());
    return true;
  }
  turn_off(collective_ ? "NCCL's communicator did not form on every node (their logs say why)"
                       : "NCCL's communicator did not form here: " + why);
  return false;
}

bool NodeCollectivePath::sum(float* values, int64_t n, int64_t round) {
  if (off_) return false;
  {
    std::lock_guard<std::mutex> lock(leave_mutex_);
    if (!leave_why_.empty()) {
      turn_off(leave_why_);
      return false;
    }
  }
  if (!formed_ && !form(round)) return false;
  kept_.assign(values, values + n);
  std::string why;
  bool succeeded = false;
  try {
    if (exchange_.member_gone()) throw std::runtime_error("a node of NCCL's communicator is lost");
    collective_->all_reduce_sum(values, n, give_up_after(deadline_ / 2));
    succeeded = true;
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (vote(succeeded, sum_vote(round))) return true;
  std::memcpy(values, kept_.data(), sizeof(float) * size_t(n));
  turn_off(succeeded ? "another node's NCCL all-reduce failed (its log says why)"
                     : "this node's NCCL all-reduce failed: " + why);
  return false;
}

}  // namespace dtrain::daemon
