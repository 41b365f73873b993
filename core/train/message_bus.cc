#include "core/train/message_bus.h"

namespace dtrain::core {

MessageBus::MessageBus(int workers, StepGate* gate) : gate_(gate) {
  for (int i = 0; i < workers; ++i) inboxes_.push_back(std::make_unique<Inbox>());
}

void MessageBus::publish(int from, const SharedMessage& message) {
  for (int w = 0; w < workers(); ++w) {
    if (w == from) continue;
    Inbox& inbox = *inboxes_[w];
    std::lock_guard<std::mutex> lock(inbox.mutex);
    inbox.messages.push_back(message);
  }
  if (gate_ && message->param_offset == 0)
    gate_->delivered(int(message->origin), message->epoch, message->batch);
  if (from >= 0 && outbound_) outbound_(message);
}

std::vector<SharedMessage> MessageBus::take(int worker) {
  Inbox& inbox = *inboxes_[worker];
  std::vector<SharedMessage> out;
  std::lock_guard<std::mutex> lock(inbox.mutex);
  out.swap(inbox.messages);
  return out;
}

int64_t MessageBus::pending(int worker) const {
  const Inbox& inbox = *inboxes_[worker];
  std::lock_guard<std::mutex> lock(inbox.mutex);
  return static_cast<int64_t>(inbox.messages.size());
}

}  // namespace dtrain::core
