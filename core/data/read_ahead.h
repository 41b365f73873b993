#pragma once
// Makes a range of minibatches ahead of the trainer on a thread of its own, at most `depth`
// ahead (a bounded queue: memory stays a few minibatches whatever the data's size), so reading
// and decoding overlap computing. next() returns them in order.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "core/tensor/tensor.h"

namespace dtrain::core {

class ReadAhead {
 public:
  // fill(first, count, features, targets) makes the minibatch of positions [first, first+count).
  using Fill = std::function<void(int64_t, int64_t, Tensor&, Tensor&)>;
  // Minibatches of `batch` over positions [begin, end).
  ReadAhead(Fill fill, int64_t begin, int64_t end, int64_t batch, size_t depth);
  ~ReadAhead();  // stops the thread (mid-range too)
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The next minibatch; false after the last. Rethrows what the thread's fill threw.
  bool next(Tensor& features, Tensor& targets);

 private:
  void run();

  Fill fill_;
  int64_t begin_, end_, batch_;
  size_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<Tensor, Tensor>> ready_;
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace dtrain::core
