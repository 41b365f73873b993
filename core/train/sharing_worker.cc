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
  share_step();
  return true;
}

bool SharingWorker::step_on(int64_t shard, int64_t num_shards, int64_t batch,
                            int64_t own_iteration, int64_t schedule_iteration) {
  apply_received();
  if (!worker_.compute_step_on(shard, num_shards, batch, own_iteration, schedule_iteration))
    return false;
  share_step();
  return true;
}

void SharingWorker::share_step() {
  float* params = worker_.model().params();
  for (EncodedMessage& m : encoder_.encode(worker_.step())) {
    auto shared = std::make_shared<const EncodedMessage>(std::move(m));
    engine_.apply(*shared, params);  // step 6: our own quantised update, not u itself
    ++messages_applied_;
    if (observer_) observer_(*shared);
    bus_.publish(index_, shared);
  }
}

}  // namespace dtrain::core
