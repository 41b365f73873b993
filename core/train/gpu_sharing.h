#pragma once
// GPU-to-GPU sharing among the GPU workers of one node (core/README.md, "Sharing"; issue 16):
// a message one GPU worker publishes is all-gathered over the node's device group (NCCL), so
// it lands in every other GPU's memory and is applied there, instead of each receiver copying
// its words up from the host. The message still goes to the other nodes once, through the
// mesh (MessageBus's outbound), as before.
//
// A round is driven by the publishing thread for every rank (kernels/device_group.h), one
// round at a time: it cannot wait on another worker, so a slow or failed worker stalls nothing.
// Each round's landing buffers stay alive until every receiver has applied the message.
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
  // valid while `keep` lives.
  struct Landed {
    std::vector<const uint32_t*> words;
    std::shared_ptr<const void> keep;
  };
  // Rank `from`'s message: its words from `device_words` (on its GPU; its codec's last encode)
  // or, when null, from m.words (uploaded once). Throws on a failed collective.
  Landed share(int from, const EncodedMessage& m, const uint32_t* device_words);

  int64_t rounds() const;

 private:
  // Device memory of `words` words per rank, grown as needed.
  struct PerRank {
    std::vector<uint32_t*> at;
    int64_t capacity = 0;
  };
  void reserve(PerRank& buffers, int64_t words);
  std::shared_ptr<PerRank> take_landing(int64_t words);

  std::unique_ptr<kernels::DeviceGroup> group_;
  mutable std::mutex mutex_;  // one round at a time
  PerRank idle_;              // what ranks with nothing to send send
  PerRank upload_;            // host words of a message not on its GPU
  int64_t rounds_ = 0;
  // Landing buffers of finished rounds whose messages every receiver applied, for reuse.
  struct Pool;
  std::shared_ptr<Pool> pool_;
};

// The sharing of a node whose workers run on `backends` (one per worker): GPU to GPU when a
// device group forms over them, else null (host memory). `description` says which, and why
// not: "nccl 2.28.9 between GPUs 0, 1" or "host memory (NCCL is not installed here ...)".
std::unique_ptr<GpuSharing> make_gpu_sharing(const std::vector<kernels::Backend*>& backends,
                                             std::string* description);

}  // namespace dtrain::core
