#include "transport/endpoint/tag_workers.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace dtrain::transport {
namespace {

// How long a worker keeps watching for the next batch before it sleeps: a busy link's batches
// come every few microseconds (64 datagrams); a trickle costs at most this much per batch.
constexpr auto kSpin = std::chrono::microseconds(50);

// A spinning thread's hint to the core (and its sibling hyperthread) that it is waiting.
inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

TagWorkers::TagWorkers(size_t threads, const std::string& name) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this, label = (name + "-" + std::to_string(i)).substr(0, 15)] {
      pthread_setname_np(pthread_self(), label.c_str());
      work();
    });
}

TagWorkers::~TagWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void TagWorkers::take_items(Batch& batch) {
  // A few items at a time, and counted once at the end: the counters are shared cache lines,
  // and one item (a datagram's tag) takes a fraction of a microsecond.
  size_t taken = 0;
  for (;;) {
    const size_t first = batch.next.fetch_add(batch.grain, std::memory_order_relaxed);
    if (first >= batch.n) break;
    const size_t end = std::min(batch.n, first + batch.grain);
    for (size_t i = first; i < end; ++i) (*batch.item)(i);
    taken += end - first;
  }
  if (taken > 0) batch.done.fetch_add(taken, std::memory_order_release);
}

void TagWorkers::run(size_t n, const std::function<void(size_t)>& item) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) item(i);
    return;
  }
  auto batch = std::make_shared<Batch>();
  batch->item = &item;
  batch->n = n;
  // About four grabs per thread: even shares, with room to balance uneven ones.
  batch->grain = std::max<size_t>(1, n / (4 * (threads_.size() + 1)));
  {
    // Under the lock, so a worker that is about to sleep either sees the new generation or is
    // already counted in sleeping_ (no lost wake-up).
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = batch;
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  take_items(*batch);
  // The others' last items: each is one datagram's tag, a fraction of a microsecond.
  while (batch->done.load(std::memory_order_acquire) < n) pause();
}

void TagWorkers::work() {
  uint64_t seen = generation_.load(std::memory_order_acquire);
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    // Watching one cache line, with the clock read only now and then.
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      pause();
      if (i % 64 == 63 && std::chrono::steady_clock::now() >= spin_until) break;
    }
    std::shared_ptr<Batch> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (generation_.load(std::memory_order_acquire) == seen && !stopping_) {
        sleeping_.fetch_add(1, std::memory_order_acq_rel);
        wake_.wait(lock, [&] {
          return stopping_ || generation_.load(std::memory_order_acquire) != seen;
        });
        sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      }
      if (stopping_) return;
      seen = generation_.load(std::memory_order_acquire);
      batch = current_;
    }
    if (batch) take_items(*batch);
  }
}

}  // namespace dtrain::transport
