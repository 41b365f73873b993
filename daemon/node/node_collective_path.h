#pragma once
// mode allreduce between GPU nodes over NCCL (docs/architecture/daemon.md, "NCCL between nodes"):
// a step's sum between the nodes goes over the communicator the controller's id names
// (kernels/node_collective.h) instead of the mesh's ring, while it works on every node.
//
// NCCL says nothing to one rank of another's failure, and one rank can finish an all-reduce that
// another gives up on (a node lost mid-call), so no node keeps a sum on its own word: after each
// call every node votes, 0 for done and 1 for failed, and the votes are summed by the mesh's
// ring (core/collective/ring_rounds.h), which gives every survivor the same sum even when a
// node is lost during it. A sum is kept only when the votes' sum is 0; otherwise every node sums
// the same values again over the ring (the caller's fallback) and leaves NCCL for the rest of
// the job: the replicas stay the same bits either way, and a lost node is counted on every
// survivor or on none. Forming the communicator ends with the same kind of vote. A node that is
// to leave (one admitted into the job: a communicator cannot take it in) votes 1 at its next
// sum without calling NCCL, so every node leaves together even if they disagree on when.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/node_collective.h"

namespace dtrain::daemon {

class NodeCollectivePath {
 public:
  // Joins the communicator (kernels::open_node_collective, or a test's); null with why.
  using Open = std::function<std::unique_ptr<kernels::NodeCollective>(const kernels::GiveUp&,
                                                                      std::string* why)>;
  // What it needs of the exchange.
  struct Exchange {
    // The sum of one value over the live nodes for ring round `round`, the same on each.
    std::function<float(float mine, int64_t round)> vote;
    // Whether one of the communicator's members is lost, or the job cancelled: a call waiting on
    // it is given up.
    std::function<bool()> member_gone;
    std::function<void(const std::string&)> log;
  };
  // `members`: the communicator's ranks' member ids, in rank order (the job's nodes when it
  // started); `deadline`: the most one call may wait.
  NodeCollectivePath(Open open, std::vector<uint32_t> members, Exchange exchange,
                     std::chrono::milliseconds deadline);
  ~NodeCollectivePath();

  // The sum of `round` (a bucket's ring round; values: n floats, this node's) over NCCL: true
  // with the sum in `values`; false with `values` as given, for the caller to sum over the mesh
  // (the path is then off, on every node alike). Every node calls it for the same rounds, in
  // order.
  bool sum(float* values, int64_t n, int64_t round);
  // The ranks an NCCL sum counted: the communicator's members.
  const std::vector<uint32_t>& members() const { return members_; }
  // Ends the path at the next sum (every node calls it at the same epoch end).
  void leave(const std::string& why);
  bool on() const { return !off_; }

 private:
  bool form();
  std::string leaving();  // leave()'s why, or ""
  // Calls NCCL unless this node is to leave; "" when it summed, else why not.
  std::string call(float* values, int64_t n);
  void turn_off(const std::string& why);
  kernels::GiveUp give_up_after(std::chrono::milliseconds wait) const;

  Open open_;
  const std::vector<uint32_t> members_;
  Exchange exchange_;
  const std::chrono::milliseconds deadline_;
  std::unique_ptr<kernels::NodeCollective> collective_;
  bool formed_ = false;
  std::atomic<bool> off_{false};
  std::mutex leave_mutex_;
  std::string leave_why_;  // under leave_mutex_: set by leave(), taken by the next sum
  std::vector<float> kept_;  // this step's own values, for the mesh if NCCL fails
};

}  // namespace dtrain::daemon
