#include "transport/endpoint/tag_workers.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace dtrain::transport {
namespace {

// How long a worker keeps watching for the next batch before it sleeps: a busy link's batches
// come every few microseconds (64 datagrams); a trickle costs at most this much per batch.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr size_t kMaxGrain = 32;

// A spinning thread's hint to the core (and its sibling hyperthread) that it is waiting.
inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins for `done` a little, then yields the core while waiting: what it waits for is
// microseconds away unless the thread it waits on was preempted (more busy threads than cores).
template <typename Done>
void wait_until(Done done) {
  for (int i = 0; !done(); ++i) {
    if (i < 2000)
      pause();
    else
      std::this_thread::yield();
  }
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
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

size_t TagWorkers::take_items() noexcept {
  // Several items at a time (run() sets the grain), counted once at the end: the counters are
  // shared cache lines, and one item (a datagram's tag) takes a fraction of a microsecond.
  size_t taken = 0;
  for (;;) {
    const size_t first = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (first >= n_) break;
    const size_t end = std::min(n_, first + grain_);
    for (size_t i = first; i < end; ++i) (*item_)(i);
    taken += end - first;
  }
  if (taken > 0) done_.fetch_add(taken, std::memory_order_release);
  return taken;
}

void TagWorkers::run(size_t n, const std::function<void(size_t)>& item) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) item(i);
    return;
  }
  batches_shared_.fetch_add(1, std::memory_order_relaxed);
  items_shared_.fetch_add(n, std::memory_order_relaxed);
  generation_.fetch_add(1);  // odd: no worker enters now
  wait_until([&] { return inside_.load() == 0; });  // one that entered the last batch late leaves
  item_ = &item;
  n_ = n;
  // An even share each, up to 32 items (several microseconds) per grab so that a large batch
  // still balances. Smaller grabs measured slower: every grab is a shared cache line's trip
  // (--only tag-batches: 1.63-1.67x with one worker at an even share, 1.48-1.60x at a quarter).
  grain_ = std::clamp<size_t>(n / (threads_.size() + 1), 1, kMaxGrain);
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1);  // even: published
  if (sleeping_.load() > 0) {
    // Through the lock: a worker about to sleep either sees the new generation in its wait's
    // check or is already waiting when notified.
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  take_items();
  // The others' last grabs: a few datagrams' tags, a microsecond or two (unless a worker was
  // preempted holding one: then the wait yields the core).
  wait_until([&] { return done_.load(std::memory_order_acquire) >= n; });
}

void TagWorkers::work() {
  uint64_t seen = 0;  // the first batch is generation 2
  while (!stopping_.load(std::memory_order_relaxed)) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    uint64_t g = generation_.load();
    // Watching one cache line, with the clock read only now and then.
    for (int i = 0; !is_new(g, seen); ++i) {
      if (i % 64 == 63 && std::chrono::steady_clock::now() >= spin_until) break;
      pause();
      g = generation_.load();
    }
    if (!is_new(g, seen)) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return stopping_ || is_new(g = generation_.load(), seen); });
      sleeping_.fetch_sub(1);
      if (stopping_) return;
    }
    inside_.fetch_add(1);
    if (generation_.load() == g)
      if (const size_t taken = take_items())
        by_workers_.fetch_add(taken, std::memory_order_relaxed);
    inside_.fetch_sub(1);
    seen = g;
  }
}

}  // namespace dtrain::transport
