#include "core/data/read_ahead.h"

#include <algorithm>

namespace dtrain::core {

ReadAhead::ReadAhead(Fill fill, int64_t begin, int64_t end, int64_t batch, size_t depth)
    : fill_(std::move(fill)), begin_(begin), end_(end), batch_(batch), depth_(std::max<size_t>(1, depth)) {
  thread_ = std::thread([this] { run(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ReadAhead::run() {
  try {
    for (int64_t first = begin_; first < end_; first += batch_) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
        if (stop_) return;
      }
      std::pair<Tensor, Tensor> b;
      fill_(first, std::min(batch_, end_ - first), b.first, b.second);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(b));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = true;
  changed_.notify_all();
}

bool ReadAhead::next(Tensor& features, Tensor& targets) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return false;
  }
  features = std::move(ready_.front().first);
  targets = std::move(ready_.front().second);
  ready_.pop_front();
  changed_.notify_all();
  return true;
}

}  // namespace dtrain::core
