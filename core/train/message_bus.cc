#include "core/train/message_bus.h"

#include "core/train/gpu_sharing.h"

namespace dtrain::core {

MessageBus::MessageBus(int workers, StepGate* gate) : gate_(gate) {
  for (int i = 0; i < workers; ++i) inboxes_.push_back(std::make_unique<Inbox>());
}

void MessageBus::publish(int from, const SharedMessage& message, const uint32_t* device_words) {
  GpuSharing::Landed landed;
  // Nobody to deliver to on a node of one worker; an empty Landed means host memory.
  if (from >= 0 && sharing_ && workers() > 1 && !message->words.empty())
    landed = sharing_->share(from, *message, device_words);
  for (int w = 0; w < workers(); ++w) {
    if (w == from) continue;
    Delivery d{message};
    if (!landed.words.empty()) {
      d.device_words = landed.words[size_t(w)];
      d.keep = landed.keep;
    }
    Inbox& inbox = *inboxes_[w];
    std::lock_guard<std::mutex> lock(inbox.mutex);
    inbox.messages.push_back(std::move(d));
  }
  if (gate_ && message->param_offset == 0)
    gate_->delivered(int(message->origin), message->epoch, message->batch);
  if (from >= 0 && outbound_) outbound_(message);
}

std::vector<Delivery> MessageBus::take(int worker) {
  Inbox& inbox = *inboxes_[worker];
  std::vector<Delivery> out;
  std::lock_guard<std::mutex> lock(inbox.mutex);
  out.swap(inbox.messages);
  return out;
}

void MessageBus::drop_pending() {
  for (auto& inbox : inboxes_) {
    std::lock_guard<std::mutex> lock(inbox->mutex);
    inbox->messages.clear();
  }
}

int64_t MessageBus::pending(int worker) const {
  const Inbox& inbox = *inboxes_[worker];
  std::lock_guard<std::mutex> lock(inbox.mutex);
  return static_cast<int64_t>(inbox.messages.size());
}

}  // namespace dtrain::core
