#pragma once
// Threads that share the I/O thread's per-byte work of one batch: sealing the datagrams it is
// about to send, checking the tags of those it just received (docs/architecture/transport.md,
// "Tagging on several cores"). Authentication is most of what an endpoint's single I/O thread
// spends on a fast link (AES-256-GCM at about 6 GB/s per core against raw UDP's 10 GB/s on
// loopback), so on a node with spare cores it is split across them; the link state stays the I/O
// thread's. Off by default: on a 16-core host the workers tagged 2.1-2.6x faster but end-to-end
// goodput did not rise (docs/architecture/transport.md, "Tagging on several cores").
//
// run() is fork-join: the calling thread takes items too and returns only when every item is
// done, so the work may point into the caller's stack. Between batches a worker spins for a
// short while (the next batch of a busy link comes within microseconds, and waking a sleeping
// thread costs more than the batch) and then sleeps until the next one.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::transport {

class TagWorkers {
 public:
  // `threads` beside the caller; 0: run() calls every item on the calling thread. `name`
  // prefixes the threads' names (top -H, perf).
  TagWorkers(size_t threads, const std::string& name);
  ~TagWorkers();
  TagWorkers(const TagWorkers&) = delete;
  TagWorkers& operator=(const TagWorkers&) = delete;

  size_t threads() const { return threads_.size(); }
  // Calls item(i) once for every i in [0, n), on the workers and the calling thread; returns
  // when all have returned. `item` must not throw (the process ends if it does: the others
  // would be left running it). Not reentrant: one caller (the I/O thread) at a time.
  void run(size_t n, const std::function<void(size_t)>& item);
  // Items the workers (not the caller) have run since the start: shown by the endpoint, so a
  // node that was given workers can tell whether they take any of the work.
  uint64_t items_by_workers() const { return by_workers_.load(std::memory_order_relaxed); }
  // Batches run() shared with the workers, and the items in them (their mean size says whether
  // the fork and join can pay).
  uint64_t batches_shared() const { return batches_shared_.load(std::memory_order_relaxed); }
  uint64_t items_shared() const { return items_shared_.load(std::memory_order_relaxed); }

 private:
  // Returns how many items this thread ran.
  size_t take_items() noexcept;
  void work();
  // Whether generation `g` is a published batch other than `seen`.
  static bool is_new(uint64_t g, uint64_t seen) { return g != seen && g % 2 == 0; }

  // The batch, published without a lock: run() makes generation_ odd, waits until no worker is
  // inside_ the previous batch, writes the fields, and makes generation_ even again. A worker
  // counts itself inside_ and then checks that the generation it saw still stands (either it
  // sees run() start over, or run() sees it inside and waits): the fields never change under it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> inside_{0};
  const std::function<void(size_t)>* item_ = nullptr;
  size_t n_ = 0;
  size_t grain_ = 1;  // items per grab
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
  std::atomic<uint64_t> by_workers_{0};
  std::atomic<uint64_t> batches_shared_{0}, items_shared_{0};

  std::mutex mutex_;  // for sleeping and waking only
  std::condition_variable wake_;
  std::atomic<int> sleeping_{0};  // workers waiting on wake_ (run() notifies only then)
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace dtrain::transport
