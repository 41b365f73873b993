#pragma once
// The steps of `mode: allreduce` on one node (docs/architecture/core.md, "Dense all-reduce"). Each
// step, every worker of the node takes part with the gradient of its minibatch (or none: its
// shard has no minibatch left while another worker's has). The gradient goes in buckets
// (gradient_buckets.h): each bucket is summed over the node's workers in worker order, each
// weighted by its minibatch's examples (the in-node reduction, through memory), then over the
// nodes by the exchange (a ring all-reduce, one round a bucket), and divided by the job's
// examples: the gradient of one step on the job's whole batch. Every replica of the job then
// takes the same updater step with it, so the replicas stay identical without any parameter
// traffic.
//
// With a cluster, several buckets and the gradients in host memory, a bucket's ring runs (on a
// thread of its own) as soon as every worker's backward pass has finished it, while the workers
// compute the layers before it. Otherwise the last worker to arrive runs the buckets' rings.
// GPU workers with a device group (kernels/device_group.h: NCCL, or the emulated one) sum
// their weighted gradients on their GPUs, and only the sum comes to the host; when the group
// fails, the node says why and sums through host memory from then on.
//
// Two figures close each bucket, summed like it: the step's examples, and the workers that still
// have a minibatch after it. The epoch ends on every node at the same step: the first whose count
// of workers with more is 0.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/collective/round_ids.h"
#include "core/spec/job_spec.h"
#include "core/train/gradient_buckets.h"
#include "core/train/node_exchange.h"
#include "core/train/node_round.h"
#include "core/train/worker.h"
#include "kernels/device_group.h"

namespace dtrain::core {

// Each bucket's sum over the nodes holds its gradient values, then these figures: the step's
// examples and its workers with a minibatch after it.
constexpr int64_t kStepFigures = 2;
inline int64_t step_sum_values(int64_t num_params) { return num_params + kStepFigures; }

class GradientRounds {
 public:
  // `exchange`: null without a cluster (--local: this node's workers are the whole job).
  // `buckets`: plan_buckets'. `overlap`: the workers' gradients are in host memory and they
  // call ready() as their backward passes go (buckets then go while they compute).
  GradientRounds(int workers, int64_t num_params, std::vector<GradientBucket> buckets,
                 const CorrectionsSpec& corrections, NodeExchange* exchange, bool overlap);
  ~GradientRounds();
  GradientRounds(const GradientRounds&) = delete;
  GradientRounds& operator=(const GradientRounds&) = delete;

  // A new epoch: every worker takes part in its first step.
  void start_epoch() { more_ = true; }
  // Whether the job has a step left in this epoch (as of the last step).
  bool more() const { return more_; }
  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  // GPU workers (`ranks`: every worker of the node, rank = worker): the node's sum is made over
  // `group` on their GPUs. `failed` hears, once, why the group was given up for host memory.
  void sum_on_devices(std::unique_ptr<kernels::DeviceGroup> group, std::vector<Worker*> ranks,
                      std::function<void(const std::string&)> failed);

  // Worker `w`'s part of step `round` (step_round_id's, increasing over the job, the same on
  // every node) starts, before its minibatch: `worker` (null: no minibatch this step) and
  // whether it has a minibatch after this one if it has this one.
  void begin(int w, Worker* worker, bool has_more, int64_t round);
  // During w's backward pass: its gradients at and past `from` are final.
  void ready(int w, int64_t from);
  // Worker `w` has its gradient (`worker`; null: it had no minibatch after all). Returns false
  // when `stopped` turned true before the step ran. When the sum over the nodes throws, the
  // worker that waited for it gets the exception and the others a step of no examples and no
  // more steps.
  template <class Stopped>
  bool arrive(int w, Worker* worker, Stopped stopped);

  // The step's result, valid until the next step starts: the job's mean gradient (clipped at
  // the spec's clip_norm), and the examples it is the mean of (0: no worker had a minibatch).
  const float* mean() const { return mean_.data(); }
  double examples() const { return examples_; }

 private:
  struct Part {
    Worker* worker = nullptr;         // null: no minibatch this step
    const float* gradient = nullptr;  // host memory
    std::vector<float> scratch;       // a GPU worker's gradient, copied to the host
    bool has_more = false;
    int64_t from = 0;                 // its gradients at and past this are final
  };
  // The last worker's part: the buckets' sums (or waiting for the ring thread's), the mean.
  void run_step();
  void finish_step();
  // Under mutex_: whether every worker has finished bucket b.
  bool bucket_ready(size_t b) const;
  // Bucket b summed over the node's workers, then over the nodes.
  void sum_bucket(size_t b);
  void ring_thread_loop();
  float* bucket_sum(size_t b) { return sums_.data() + sum_offsets_[b]; }
  // The node's weighted sum over the device group into node_sum_; false (the group given up)
  // when it fails. Host gradients for whatever sums them then.
  bool device_node_sum();
  void give_up_devices(const std::string& why);
  void download_gradients();

  const int workers_;
  const int64_t n_;
  const std::vector<GradientBucket> buckets_;
  std::vector<int64_t> sum_offsets_;  // where each bucket's sum and figures start in sums_
  const CorrectionsSpec corrections_;
  NodeExchange* const exchange_;
  NodeRound round_;
  std::vector<Part> parts_;
  std::vector<float> sums_;
  std::vector<float> mean_;

  // The device group's part (sum_on_devices).
  std::unique_ptr<kernels::DeviceGroup> group_;
  std::vector<Worker*> ranks_;
  std::vector<float*> group_sums_;  // per rank, n floats on its GPU
  std::function<void(const std::string&)> group_failed_;
  std::vector<float> node_sum_;     // this step's, from the group (empty: summed on the host)
  std::vector<char> pre_weighted_;  // per worker: its gradient was scaled by its examples
  double examples_ = 0.0;
  bool more_ = true;

  // The step under way, shared with the ring thread (overlap only).
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t round_id_ = -1;
  int begun_ = 0;             // workers that called begin() this step
  size_t next_bucket_ = 0;    // the next to sum (buckets_.size(): all taken)
  size_t buckets_done_ = 0;
  std::exception_ptr failure_;
  bool closing_ = false;
  std::thread ring_thread_;
};

template <class Stopped>
bool GradientRounds::arrive(int w, Worker* worker, Stopped stopped) {
  // Host memory for the last worker to sum (outside the lock: the workers download at once).
  // Overlapped, the part reads the model's own; with a device group, the group sums.
  Part& mine = parts_[size_t(w)];
  if (worker && !mine.gradient && !group_ && !ring_thread_.joinable())
    mine.gradient = worker->host_gradient(mine.scratch);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Part& part = parts_[size_t(w)];
    if (!worker && part.worker) {
      // No minibatch after all: it never called ready(), so nothing of it was summed.
      part.worker = nullptr;
      part.gradient = nullptr;
      part.has_more = false;
    }
    part.from = 0;
  }
  changed_.notify_all();
  auto run = [this] { run_step(); };
  if (workers_ == 1) {
    run();
    return true;
  }
  return round_.arrive(run, stopped);
}

}  // namespace dtrain::core
