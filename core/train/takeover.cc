#include "core/train/takeover.h"

#include <algorithm>
#include <exception>

#include "core/train/worker_threads.h"

namespace dtrain::core {
namespace {

// Calls visit(shard, batch) for each minibatch of EpochEnd::takeover dealt to live workers
// [me, me + count): the list in order, round-robin over the live workers, the same deal on every
// node. Stops when visit returns false.
template <typename Visit>
void for_each_dealt(const NodeExchange::EpochEnd& end, int shards, const Worker& worker, int me,
                    int count, Visit visit) {
  int64_t index = 0;
  for (const NodeExchange::Takeover& t : end.takeover) {
    const int64_t batches = worker.batches_in_shard(t.shard, shards);
    for (int64_t b = t.from_batch; b < batches; ++b, ++index) {
      const int64_t dealt_to = index % std::max(1, end.live_workers);
      if (dealt_to >= me && dealt_to < me + count && !visit(t.shard, b)) return;
    }
  }
}

}  // namespace

int64_t take_over(const NodeExchange::EpochEnd& end, int64_t epoch, int shards,
                  const WorkerBatch& batching, StepGate& gate, SharingWorkers& workers,
                  std::vector<int64_t>& iterations, const std::atomic<bool>* cancel) {
  if (end.takeover.empty()) return 0;
  int64_t dealt = 0;
  for (const NodeExchange::Takeover& t : end.takeover)
    dealt += std::max<int64_t>(0, workers[0]->worker().batches_in_shard(t.shard, shards) -
                                      t.from_batch);
  gate.start_takeover(epoch, takeover_counts(gate, dealt, end.live_workers));
  std::atomic<int64_t> done{0};
  std::vector<std::exception_ptr> errors(workers.size());
  auto run = [&](int w) {
    try {
      SharingWorker& sw = *workers[w];
      const int me = end.live_first_worker + w;
      int64_t step = 0;
      for_each_dealt(end, shards, sw.worker(), me, 1, [&](int64_t shard, int64_t b) {
        if (cancel && *cancel) return false;
        const int64_t it = iterations[w];
        if (sw.step_on(shard, shards, b, it, schedule_iteration(batching, it, shards, me), epoch,
                       step++)) {
          ++iterations[w];
          ++done;
        }
        return true;
      });
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  on_every_worker(int(workers.size()), run);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return done;
}

int64_t average_take_over(const NodeExchange::EpochEnd& end, int shards,
                          const WorkerBatch& batching, Worker& worker, int node_workers,
                          int64_t& iteration, const std::atomic<bool>* cancel) {
  const int me = end.live_first_worker;
  int64_t done = 0;
  for_each_dealt(end, shards, worker, me, node_workers, [&](int64_t shard, int64_t b) {
    if (cancel && *cancel) return false;
    if (worker.compute_step_on(shard, shards, b, iteration,
                               schedule_iteration(batching, iteration, shards, me))) {
      worker.apply_own_step();
      ++iteration;
      ++done;
    }
    return true;
  });
  return done;
}

int64_t undone_batches(const NodeExchange::EpochEnd& end, const StepGate& gate) {
  int64_t undone = 0;
  for (const NodeExchange::Takeover& t : end.takeover)
    undone += std::max<int64_t>(0, gate.batches_of(t.shard) - t.from_batch);
  return undone;
}

}  // namespace dtrain::core
