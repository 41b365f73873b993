#pragma once
// GPU-to-GPU sharing among the GPU workers of one node (docs/architecture/core.md, "Sharing"):
// a message one GPU worker publishes is all-gathered over the node's device group (NCCL), so
// it lands in every other GPU's memory and is applied there, instead of each receiver copying
// its words up from the host. The message still goes to the other nodes once, through the
// mesh (MessageBus's outbound), as before.
//
// A round is driven by the publishing thread for every rank (kernels/device_group.h), one
// round at a time: it waits on no other worker's thread, so a slow or failed worker cannot
// stall it. Each round's landing buffers stay alive until every receiver has applied the
// message; at most kMaxInFlight are, and a failed round (NCCL error, a stuck link: the group
// gives up after 60 s) sends this and every later message through host memory instead.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/codec/message.h"
#include "kernels/device_group.h"

namespace dtrain::core {

class GpuSharing {
 public:
  explicit GpuSharing(std::unique_ptr<kernels::DeviceGroup> group);
  ~GpuSharing();
  GpuSharing(const GpuSharing&) = delete;
  GpuSharing& operator=(const GpuSharing&) = delete;

  std::string name() const { return group_->name(); }
  int ranks() const { return group_->size(); }

  // Where one message's words landed: words[q] on rank q's GPU (every rank, the sender's too),
  // valid while `keep` lives. Empty when the message goes through host memory instead.
  struct Landed {
    std::vector<const uint32_t*> words;
    std::shared_ptr<const void> keep;
  };
  // Rank `from`'s message: its words from `device_words` (on its GPU; its codec's last encode)
  // or, when null, from m.words (uploaded once). Returns an empty Landed, and the message goes
  // through host memory, when kMaxInFlight rounds' buffers are still held by receivers (a slow
  // receiver must not pin unbounded GPU memory) or after a round failed (failure() says why;
  // every later message goes through host memory too).
  Landed share(int from, const EncodedMessage& m, const uint32_t* device_words);

  int64_t rounds() const;
  std::string failure() const;
  static constexpr int kMaxInFlight = 32;

 private:
  // Device memory of `capacity` words per rank.
  struct PerRank {
    std::vector<uint32_t*> at;
    int64_t capacity = 0;
  };
  void reserve(PerRank& buffers, int64_t words);
  void release(PerRank& buffers);
  std::shared_ptr<PerRank> take_landing(int64_t words);
  Landed round(int from, const EncodedMessage& m, const uint32_t* device_words);

  std::unique_ptr<kernels::DeviceGroup> group_;
  mutable std::mutex mutex_;  // one round at a time; every allocation and release under it
  PerRank idle_;              // what ranks with nothing to send send
  PerRank upload_;            // host words of a message not on its GPU
  int64_t rounds_ = 0;
  std::string failure_;
  // Landing buffers: those receivers gave back (freed or reused only under mutex_), and how
  // many are still held.
  struct Pool;
  std::shared_ptr<Pool> pool_;
};

// The sharing of a node whose workers run on `backends` (one per worker): GPU to GPU when a
// device group forms over them, else null (host memory). `description` says which, and why
// not: "nccl 2.28.9 between GPUs 0, 1" or "host memory (NCCL is not installed here ...)".
std::unique_ptr<GpuSharing> make_gpu_sharing(const std::vector<kernels::Backend*>& backends,
                                             std::string* description);

}  // namespace dtrain::core
