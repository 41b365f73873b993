#pragma once
// Same-node delivery of encoded messages (docs/architecture/core.md, "The update", step 6,
// and "Sharing"). A published message is shared, never copied: each other worker's inbox gets a
// pointer and applies it on its own thread. Publishing never blocks on a slow worker.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/codec/message.h"
#include "core/train/step_gate.h"

namespace dtrain::core {

using SharedMessage = std::shared_ptr<const EncodedMessage>;

class GpuSharing;

// A message in a worker's inbox; device_words: its words already in that worker's GPU memory
// (GPU-to-GPU sharing, gpu_sharing.h), kept there by `keep`; null: only the host words.
struct Delivery {
  SharedMessage message;
  const uint32_t* device_words = nullptr;
  std::shared_ptr<const void> keep;
};

class MessageBus {
 public:
  // `gate` (optional, outliving the bus) counts every step that reaches the bus, once it is
  // in every inbox (staleness control, step_gate.h).
  explicit MessageBus(int workers, StepGate* gate = nullptr);

  int workers() const { return static_cast<int>(inboxes_.size()); }
  // To every worker except `from` (pass -1 for a message that came from another node). With
  // GPU sharing set, a local worker's message goes GPU to GPU; `device_words` are its words on
  // the sender's GPU when it has them (null: uploaded from the message).
  void publish(int from, const SharedMessage& message, const uint32_t* device_words = nullptr);
  // The workers are the ranks of `sharing` (null: host memory only). Set before the workers
  // start; `sharing` outlives every publish.
  void set_gpu_sharing(GpuSharing* sharing) { sharing_ = sharing; }
  // Drops every undelivered message (training is over), and with them their device buffers.
  void drop_pending();
  // Also hands every message of a local worker (from >= 0) to `outbound` (the other nodes).
  // Set before the workers start.
  void set_outbound(std::function<void(const SharedMessage&)> outbound) {
    outbound_ = std::move(outbound);
  }
  // Everything delivered to `worker` since the last call, in arrival order.
  std::vector<Delivery> take(int worker);
  int64_t pending(int worker) const;
  StepGate* gate() const { return gate_; }

 private:
  struct Inbox {
    mutable std::mutex mutex;
    std::vector<Delivery> messages;
  };
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::function<void(const SharedMessage&)> outbound_;
  StepGate* gate_;
  GpuSharing* sharing_ = nullptr;
};

}  // namespace dtrain::core
