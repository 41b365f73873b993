#include "core/train/sharing_worker.h"

namespace dtrain::core {

SharingWorker::SharingWorker(const JobSpec& job, const Dataset& train, const Model& initial,
                             int index, int shard, int shards, MessageBus& bus,
                             const CodecEngine& engine)
    : worker_(job, train, initial, shard, shards),
      encoder_(initial.num_params(), job.training, static_cast<uint32_t>(shard), engine),
      bus_(bus),
      engine_(engine),
      index_(index) {}

int64_t SharingWorker::apply_received() {
  const std::vector<SharedMessage> inbox = bus_.take(index_);
  float* params = worker_.model().params();
  for (const SharedMessage& m : inbox) engine_.apply(*m, params);
  messages_applied_ += static_cast<int64_t>(inbox.size());
  return static_cast<int64_t>(inbox.size());
}

bool SharingWorker::step(int64_t own_iteration, int64_t schedule_iteration) {
  apply_received();  // step 7 for everything that arrived since the last step
  if (!worker_.compute_step(own_iteration, schedule_iteration)) return false;
  float* params = worker_.model().params();
  for (EncodedMessage& m : encoder_.encode(worker_.step())) {
    auto shared = std::make_shared<const EncodedMessage>(std::move(m));
    engine_.apply(*shared, params);  // step 6: our own quantised update, not u itself
    ++messages_applied_;
    if (observer_) observer_(*shared);
    bus_.publish(index_, shared);
  }
  return true;
}

}  // namespace dtrain::core
