#pragma once
// The all-reduce between the nodes of a GPU job (docs/architecture/daemon.md, "NCCL between
// nodes"): one rank per node, over NCCL's communicator across the network in CUDA builds
// (kernels/cuda/nccl_nodes.cu, libnccl loaded at run time); none in a build without CUDA.
//
// The controller makes the communicator's id (make_node_collective_id: NCCL's unique id, whose
// bootstrap the controller's process then serves), each node of the job finds it in its start
// message and opens its rank with it (open_node_collective). What decides whether a job uses it,
// and what happens when it fails, is the mesh exchange's (daemon/node/node_collective_path.h):
// this layer only moves the bytes, and gives up (aborting the communicator) whenever its caller
// says so, so that no wait here outlives a lost node.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::kernels {

// NCCL's unique id is 128 bytes (NCCL_UNIQUE_ID_BYTES); a start message carries no more.
constexpr size_t kNodeCollectiveIdBytes = 128;

// Polled while a collective call waits: true ends the wait, the communicator aborted.
using GiveUp = std::function<bool()>;

class NodeCollective {
 public:
  virtual ~NodeCollective() = default;
  // What it runs on: "nccl 2.28.9 between 3 nodes".
  virtual std::string name() const = 0;
  // `values` (n floats in host memory) become their sum over the ranks, the same bits on every
  // rank. Throws (std::runtime_error, naming the cause) on an error or once `give_up` says so;
  // `values` are then undefined and the communicator is aborted: every later call throws.
  virtual void all_reduce_sum(float* values, int64_t n, const GiveUp& give_up) = 0;
};

// A new id, or empty with `why` (what is missing and how to get it).
std::vector<uint8_t> make_node_collective_id(std::string* why);

// Rank `rank` of `ranks`, on CUDA device `device`, joining the communicator of `id`: null with
// `why` when it cannot (no NCCL, a bad id, a rank that never came: `give_up` ends the wait).
std::unique_ptr<NodeCollective> open_node_collective(const std::vector<uint8_t>& id, int ranks,
                                                     int rank, int device, const GiveUp& give_up,
                                                     std::string* why);

}  // namespace dtrain::kernels
