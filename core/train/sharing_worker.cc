#include "core/train/sharing_worker.h"

#include <algorithm>
#include <iterator>
#include <tuple>
#include <string>

#include "core/train/corrections.h"
#include "core/util/error.h"

namespace dtrain::core {

SharingWorker::SharingWorker(const JobSpec& job, const ExampleSource& train, const Model& initial,
                             int index, int shard, int shards, MessageBus& bus,
                             const CodecEngine& engine, kernels::Backend* backend,
                             DataShard data)
    : worker_(job, train, initial, shard, shards, backend, data),
      encoder_(initial.num_params(), job.training, static_cast<uint32_t>(shard), engine,
               kMaxSegmentLength, &worker_.backend()),
      bus_(bus),
      engine_(engine),
      index_(index),
      shard_(shard),
      corrections_(job.training.corrections),
      applied_batch_(size_t(shards), -1) {}

void SharingWorker::apply(const EncodedMessage& m, float* params, float* momentum,
                          const uint32_t* on_device) {
  if (DeviceCodec* device = encoder_.device_codec()) {
    device->apply(m, params, momentum, on_device);
    if (on_device) ++messages_from_gpus_;
  } else {
    if (momentum) mask_momentum(m, momentum);
    engine_.apply(m, params);
  }
  ++messages_applied_;
  if (audit_) audit_->applied(m);
  if (m.epoch == epoch_ && m.batch >= 0 && m.origin < applied_batch_.size())
    applied_batch_[m.origin] = std::max(applied_batch_[m.origin], m.batch);
}

namespace {

// Splits one step's time into StepTimes: each lap() is the time since the last.
class StepClock {
 public:
  explicit StepClock(StepTimes& times) : last_(std::chrono::steady_clock::now()) { times = {}; }
  void lap(double& ms) {
    const auto now = std::chrono::steady_clock::now();
    ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

}  // namespace

namespace {

// Message order: the same on every worker, whatever the arrival order.
bool in_message_order(const Delivery& a, const Delivery& b) {
  const EncodedMessage& x = *a.message;
  const EncodedMessage& y = *b.message;
  return std::tie(x.epoch, x.batch, x.origin, x.param_offset, x.id) <
         std::tie(y.epoch, y.batch, y.origin, y.param_offset, y.id);
}

}  // namespace

int64_t SharingWorker::apply_received() {
  std::vector<Delivery> due = bus_.take(index_);
  due.insert(due.end(), std::make_move_iterator(held_.begin()),
             std::make_move_iterator(held_.end()));
  held_.clear();
  return apply_in_order(std::move(due));
}

int64_t SharingWorker::apply_before(int64_t epoch, int64_t batch) {
  std::vector<Delivery> arrived = bus_.take(index_);
  std::vector<Delivery> due, later;
  auto sort_out = [&](Delivery& d) {
    const EncodedMessage& m = *d.message;
    // Words on this worker's GPU (GPU sharing) go now: their buffer is reused next round.
    const bool now = m.epoch < epoch || (m.epoch == epoch && m.batch < batch) ||
                     d.device_words != nullptr;
    (now ? due : later).push_back(std::move(d));
  };
  for (Delivery& d : held_) sort_out(d);
  for (Delivery& d : arrived) sort_out(d);
  held_ = std::move(later);
  return apply_in_order(std::move(due));
}

int64_t SharingWorker::apply_in_order(std::vector<Delivery> inbox) {
  std::sort(inbox.begin(), inbox.end(), in_message_order);
  float* params = worker_.model().params();
  bool from_gpus = false;
  for (const Delivery& d : inbox) {
    const bool faulty = fault_.on_message() && ++received_ == fault_.at;
    if (faulty && fault_.kind == TestFault::Kind::kSkip) continue;
    apply(*d.message, params, nullptr, d.device_words);
    if (faulty) apply(*d.message, params, nullptr, d.device_words);  // kApplyTwice
    from_gpus = from_gpus || d.device_words;
  }
  // Words that came GPU to GPU live in a buffer the next round may reuse once `inbox` lets go
  // of it: the kernels reading them must be done first.
  if (from_gpus) worker_.backend().synchronize();
  return static_cast<int64_t>(inbox.size());
}

void SharingWorker::measure_ahead(int64_t batch) {
  const StepGate* gate = bus_.gate();
  for (size_t w = 0; w < applied_batch_.size(); ++w) {
    if (int(w) == shard_ || (gate && !gate->live(int(w)))) continue;
    // A worker whose shard is done for this epoch is behind nobody.
    if (gate && applied_batch_[w] >= gate->batches_of(int(w)) - 1) continue;
    max_ahead_ = std::max(max_ahead_, batch - applied_batch_[w]);
  }
}

bool SharingWorker::step(int64_t own_iteration, int64_t schedule_iteration, int64_t epoch,
                         int64_t batch) {
  if (epoch != epoch_) {
    epoch_ = epoch;
    std::fill(applied_batch_.begin(), applied_batch_.end(), -1);
  }
  StepClock clock(times_);
  if (StepGate* gate = bus_.gate()) {
    std::vector<int> waiting;
    if (!gate_wait(*gate, epoch, batch, -1, waiting)) return waited_too_long(*gate, waiting);
  }
  clock.lap(times_.wait_ms);
  // Step 7 for everything that arrived since the last step (under bsp: of earlier minibatches).
  const StepGate* gate = bus_.gate();
  if (gate && gate->bound() == 1)
    apply_before(epoch, batch);
  else
    apply_received();
  measure_ahead(batch);
  clock.lap(times_.apply_ms);
  if (!worker_.compute_step(own_iteration, schedule_iteration)) return false;
  clock.lap(times_.compute_ms);
  times_.split_data(worker_.last_data_ms());
  share_step(epoch, batch);
  clock.lap(times_.encode_ms);
  return true;
}

bool SharingWorker::gate_wait(StepGate& gate, int64_t epoch, int64_t batch, int64_t takeover,
                              std::vector<int>& waiting) {
  using std::chrono::milliseconds;
  const milliseconds slice = stall_after_.count() > 0 && stalled_ ? stall_after_ : wait_deadline_;
  milliseconds waited{0};
  for (;;) {
    const milliseconds now_wait = std::min(slice, wait_deadline_ - waited);
    waiting.clear();
    const bool ok = takeover >= 0
                        ? gate.wait_takeover(shard_, epoch, takeover, now_wait, stopped_, &waiting)
                        : gate.wait(shard_, epoch, batch, now_wait, stopped_, &waiting);
    if (ok) return true;
    waited += now_wait;
    if (stopped_() || waited >= wait_deadline_) return false;
    stalled_(waited, epoch, batch, waiting);
  }
}

bool SharingWorker::waited_too_long(const StepGate& gate, const std::vector<int>& waiting) const {
  if (stopped_()) return false;
  std::string names;
  for (int w : waiting) names += (names.empty() ? "" : ", ") + std::to_string(w);
  throw UserError("worker " + std::to_string(shard_) + " waited " +
                      std::to_string(wait_deadline_.count()) + " ms for the messages of "
                      "workers " + names + " (training.sync allows " +
                      std::to_string(gate.bound()) + " steps of staleness)",
                  all_local_ ? "every worker runs in this process, so nothing should keep "
                               "them waiting: report it as a dtrain bug with the job spec; "
                               "training.sync: async does not wait"
                             : "check the nodes of those workers (dtrain-submit nodes), or use "
                               "training.sync: async");
}

bool SharingWorker::step_on(int64_t shard, int64_t num_shards, int64_t batch,
                            int64_t own_iteration, int64_t schedule_iteration, int64_t epoch,
                            int64_t takeover_step) {
  StepClock clock(times_);
  if (StepGate* gate = bus_.gate()) {
    std::vector<int> waiting;
    if (!gate_wait(*gate, epoch, batch, takeover_step, waiting))
      return waited_too_long(*gate, waiting);
  }
  clock.lap(times_.wait_ms);
  apply_received();
  clock.lap(times_.apply_ms);
  if (!worker_.compute_step_on(shard, num_shards, batch, own_iteration, schedule_iteration))
    return false;
  clock.lap(times_.compute_ms);
  times_.split_data(worker_.last_data_ms());
  share_step(epoch, -1);
  clock.lap(times_.encode_ms);
  return true;
}

void SharingWorker::share_step(int64_t epoch, int64_t batch) {
  float* params = worker_.model().params();
  ThresholdAlgorithm& threshold = encoder_.threshold();
  threshold.set_density_scale(density_scale(corrections_, threshold.max_density(),
                                            worker_.progress(encoder_.steps())));
  float* momentum = corrections_.momentum_masking ? worker_.updater().momentum() : nullptr;
  std::vector<EncodedMessage> messages = encoder_.encode(worker_.step());
  // The device codec keeps the last segment's words on the GPU: GPU sharing sends them from
  // there (earlier segments' go up from the host).
  DeviceCodec* device = encoder_.device_codec();
  for (size_t i = 0; i < messages.size(); ++i) {
    EncodedMessage& m = messages[i];
    m.epoch = epoch;
    m.batch = batch;
    auto shared = std::make_shared<const EncodedMessage>(std::move(m));
    apply(*shared, params, momentum);  // step 6: our own quantised update, not u itself
    if (observer_) observer_(*shared);
    const bool last = i + 1 == messages.size();
    bus_.publish(index_, shared, device && last ? device->last_words() : nullptr);
  }
}

}  // namespace dtrain::core
