#include "core/train/gradient_rounds.h"

#include <algorithm>

#include "core/train/corrections.h"
#include "core/util/check.h"
#include "kernels/backend.h"

namespace dtrain::core {

GradientRounds::GradientRounds(int workers, int64_t num_params,
                               std::vector<GradientBucket> buckets,
                               const CorrectionsSpec& corrections, NodeExchange* exchange,
                               bool overlap)
    : workers_(std::max(1, workers)),
      n_(num_params),
      buckets_(std::move(buckets)),
      corrections_(corrections),
      exchange_(exchange),
      round_(workers_),
      parts_(size_t(workers_)),
      mean_(size_t(num_params)),
      pre_weighted_(size_t(workers_), 0) {
  int64_t offset = 0;
  for (const GradientBucket& b : buckets_) {
    sum_offsets_.push_back(offset);
    offset += step_sum_values(b.size());
  }
  sums_.resize(size_t(offset));
  DTRAIN_CHECK(!buckets_.empty() && buckets_.size() <= size_t(kMaxBuckets))
      << buckets_.size() << " buckets (1 to " << kMaxBuckets << ")";
  next_bucket_ = buckets_done_ = buckets_.size();
  if (overlap && exchange_ && buckets_.size() > 1)
    ring_thread_ = std::thread([this] { ring_thread_loop(); });
}

GradientRounds::~GradientRounds() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  if (ring_thread_.joinable()) ring_thread_.join();
  for (size_t r = 0; group_ && r < group_sums_.size(); ++r)
    group_->release(int(r), reinterpret_cast<uint32_t*>(group_sums_[r]));
}

void GradientRounds::sum_on_devices(std::unique_ptr<kernels::DeviceGroup> group,
                                    std::vector<Worker*> ranks,
                                    std::function<void(const std::string&)> failed) {
  // Each GPU's sum buffer first: a model too large for one more copy (cudaMalloc throwing)
  // leaves this object as it was, summing through host memory.
  std::vector<float*> sums;
  try {
    for (int r = 0; r < group->size(); ++r)
      sums.push_back(reinterpret_cast<float*>(group->allocate(r, n_)));
  } catch (...) {
    for (size_t r = 0; r < sums.size(); ++r)
      group->release(int(r), reinterpret_cast<uint32_t*>(sums[r]));
    throw;
  }
  group_ = std::move(group);
  group_sums_ = std::move(sums);
  ranks_ = std::move(ranks);
  group_failed_ = std::move(failed);
}

void GradientRounds::give_up_devices(const std::string& why) {
  for (size_t r = 0; r < group_sums_.size(); ++r)
    group_->release(int(r), reinterpret_cast<uint32_t*>(group_sums_[r]));
  group_sums_.clear();
  group_.reset();
  node_sum_.clear();
  if (group_failed_) group_failed_(why);
}

// Each worker's gradient scaled by its examples on its GPU (zero without a minibatch: every rank
// takes part), summed over the group, and rank 0's sum downloaded: one copy to the host a step
// instead of one a worker. The other workers wait in NodeRound meanwhile, so their backends are
// free to use from this thread.
bool GradientRounds::device_node_sum() {
  std::vector<const float*> send;
  for (size_t w = 0; w < ranks_.size(); ++w) {
    kernels::Backend& backend = ranks_[w]->backend();
    float* g = ranks_[w]->model().grads();
    const Part& p = parts_[w];
    if (p.worker)
      backend.scale(g, n_, float(p.worker->last_batch_size()));
    else
      backend.fill(g, n_, 0.f);
    pre_weighted_[w] = 1;
    send.push_back(g);
  }
  // A GPU's own fault (from its backward pass, or here) is the worker's error, not the group's.
  for (Worker* rank : ranks_) rank->backend().synchronize();
  try {
    group_->all_reduce_sum(send, group_sums_, n_);
  } catch (const std::exception& e) {
    give_up_devices(e.what());
    return false;
  }
  node_sum_.resize(size_t(n_));
  ranks_[0]->backend().download(node_sum_.data(), group_sums_[0], n_);
  return true;
}

// What the host sums: every worker's gradient in host memory.
void GradientRounds::download_gradients() {
  for (Part& p : parts_)
    if (p.worker && !p.gradient) p.gradient = p.worker->host_gradient(p.scratch);
}

void GradientRounds::begin(int w, Worker* worker, bool has_more, int64_t round) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (round != round_id_) {  // the first of a new step
      begun_ = 0;
      round_id_ = round;
      next_bucket_ = buckets_done_ = 0;
      failure_ = nullptr;
    }
    ++begun_;
    Part& part = parts_[size_t(w)];
    part.worker = worker;
    part.has_more = worker && has_more;
    // Overlapped, the ring thread reads a host model's gradient while the worker computes.
    part.gradient = worker && ring_thread_.joinable() ? worker->model().grads() : nullptr;
    part.from = worker ? n_ : 0;
  }
  changed_.notify_all();
}

void GradientRounds::ready(int w, int64_t from) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Part& part = parts_[size_t(w)];
    part.from = std::min(part.from, from);
  }
  changed_.notify_all();
}

bool GradientRounds::bucket_ready(size_t b) const {
  if (begun_ < workers_) return false;
  for (const Part& p : parts_)
    if (p.from > buckets_[b].begin) return false;
  return true;
}

// Weighted by examples, so a short last minibatch counts for what it holds; summed in worker
// order, so the node's sum is the same bits every time.
void GradientRounds::sum_bucket(size_t b) {
  const GradientBucket& bucket = buckets_[b];
  float* sum = bucket_sum(b);
  const int64_t size = bucket.size();
  std::fill(sum, sum + step_sum_values(size), 0.f);
  if (!node_sum_.empty())
    std::copy(node_sum_.begin() + bucket.begin, node_sum_.begin() + bucket.end, sum);
  for (size_t w = 0; w < parts_.size(); ++w) {
    const Part& p = parts_[w];
    if (p.worker) {
      const float weight = float(p.worker->last_batch_size());
      if (node_sum_.empty() && p.gradient) {
        const float* g = p.gradient + bucket.begin;
        const float scale = pre_weighted_[w] ? 1.f : weight;
        for (int64_t i = 0; i < size; ++i) sum[i] += scale * g[i];
      }
      sum[size] += weight;
    }
    if (p.has_more) sum[size + 1] += 1.f;
  }
  if (exchange_)
    exchange_->sum_over_nodes(sum, step_sum_values(size), bucket_round_id(round_id_, int(b)));
}

// The ring thread sums each bucket once every worker has finished it, in bucket order; a
// failure ends the step's buckets (run_step rethrows it).
void GradientRounds::ring_thread_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] {
      return closing_ || (next_bucket_ < buckets_.size() && bucket_ready(next_bucket_));
    });
    if (closing_) return;
    const size_t b = next_bucket_++;
    lock.unlock();
    std::exception_ptr failure;
    try {
      sum_bucket(b);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure) {
      failure_ = failure;
      next_bucket_ = buckets_done_ = buckets_.size();
    } else {
      ++buckets_done_;
    }
    changed_.notify_all();
  }
}

void GradientRounds::run_step() {
  try {
    if (ring_thread_.joinable()) {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return buckets_done_ == buckets_.size(); });
      if (failure_) std::rethrow_exception(failure_);
    } else {
      std::fill(pre_weighted_.begin(), pre_weighted_.end(), 0);
      node_sum_.clear();
      if (!group_ || !device_node_sum()) download_gradients();
      for (size_t b = 0; b < buckets_.size(); ++b) sum_bucket(b);
    }
  } catch (...) {
    // The other workers are released (NodeRound) and must not apply anything: no step.
    examples_ = 0.0;
    more_ = false;
    throw;
  }
  finish_step();
}

// Each bucket is divided by its own examples: a node lost between two buckets of a step is
// counted in each or not alike on every survivor (NodeExchange::sum_over_nodes), so every
// replica takes the same step.
void GradientRounds::finish_step() {
  examples_ = 0.0;
  more_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    const float* sum = bucket_sum(b);
    const double examples = sum[bucket.size()];
    examples_ = std::max(examples_, examples);
    more_ = more_ || sum[bucket.size() + 1] > 0.f;
    const float inverse = examples > 0.0 ? float(1.0 / examples) : 0.f;
    float* mean = mean_.data() + bucket.begin;
    for (int64_t i = 0; i < bucket.size(); ++i) mean[i] = sum[i] * inverse;
  }
  if (examples_ <= 0.0) return;
  // The job's gradient is one gradient: clip_norm bounds it as one worker's would be.
  clip_gradient(corrections_, 1, kernels::backend(), mean_.data(), n_);
}

}  // namespace dtrain::core
