// Fusion for mode allreduce (core/train/gradient_buckets.h, gradient_rounds.h): the bucket plan,
// the backward pass telling which gradients are final, and GradientRounds sending a bucket over
// the nodes while its workers still compute the layers before it. Two nodes meet through an
// in-process exchange (a barrier per round, summed in node order), their workers real Workers on
// a real model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "core/collective/round_ids.h"
#include "core/data/example_source.h"
#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/gradient_buckets.h"
#include "core/train/gradient_rounds.h"
#include "core/train/training_data.h"
#include "core/train/worker.h"
#include "core/util/error.h"
#include "kernels/backend.h"
#include "kernels/device_group.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

using core::GradientBucket;

bool same(const std::vector<GradientBucket>& a, const std::vector<GradientBucket>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].begin != b[i].begin || a[i].end != b[i].end) return false;
  return true;
}

TEST_CASE("the bucket plan: whole layers from the gradient's end, about the size asked") {
  // LeNet's layout: conv1 520, conv2 25,050, dense 400,500, output 5,010 (431,080 values); the
  // pooling layers learn nothing, so the frontier does not move after them.
  const std::vector<int64_t> lenet = {426070, 25570, 25570, 520, 0};
  CHECK(same(core::plan_buckets(lenet, 431080, core::bucket_values(1.0)),
             {{25570, 431080}, {0, 25570}}));
  CHECK(core::bucket_values(1.0) == 262144);
  // Small buckets: each layer is one (a layer is never cut).
  CHECK(same(core::plan_buckets(lenet, 431080, 100),
             {{426070, 431080}, {25570, 426070}, {520, 25570}, {0, 520}}));
  // 0: one bucket, sent when the pass ends.
  CHECK(core::bucket_values(0.0) == 0);
  CHECK(same(core::plan_buckets(lenet, 431080, 0), {{0, 431080}}));
  // Larger than the model: one bucket.
  CHECK(same(core::plan_buckets(lenet, 431080, core::bucket_values(64.0)), {{0, 431080}}));
  // 1,000 layers of one value each: never more than kMaxBuckets rounds a step.
  std::vector<int64_t> tiny;
  for (int64_t f = 999; f >= 0; --f) tiny.push_back(f);
  const auto many = core::plan_buckets(tiny, 1000, 1);
  CHECK(many.size() <= size_t(core::kMaxBuckets));
  CHECK(many.size() > size_t(core::kMaxBuckets / 2));
  int64_t covered = 0;
  for (size_t i = 0; i < many.size(); ++i) {
    covered += many[i].size();
    if (i > 0) CHECK(many[i].end == many[i - 1].begin);  // contiguous, from the end
  }
  CHECK(covered == 1000);
  CHECK(core::describe_buckets({{25570, 431080}, {0, 25570}}, true) ==
        "2 buckets (1585 KiB, 100 KiB), each sent as the backward pass finishes it");
  CHECK(core::describe_buckets({{0, 431080}}, false) ==
        "1 bucket (1684 KiB), sent when the backward pass ends");
}

TEST_CASE("round ids: epoch, step and bucket, after every rehearsal round") {
  const int64_t id = core::step_round_id(3, 70000, 5);
  CHECK(core::epoch_of_round_id(id) == 3);
  CHECK(core::step_of_round_id(id) == 70000);
  CHECK(core::bucket_of_round_id(id) == 5);
  CHECK(core::step_round_id(0, 0, 0) > (int64_t(1) << 32));
  CHECK(core::step_round_id(0, 1, 0) > core::step_round_id(0, 0, core::kMaxBuckets - 1));
  CHECK(core::step_round_id(1, 0, 0) > core::step_round_id(0, 0xffffffffLL, 0));
  CHECK(core::describe_round(id) == "epoch 4, step 70001, bucket 6");
  CHECK(core::describe_round(2) == "rehearsal step 3");
  // Each bucket's sum has its NCCL vote just before it, after the bucket before it.
  const int64_t step = core::step_round_id(0, 9);
  CHECK(core::bucket_round_id(step, 5) == core::step_round_id(0, 9, 5));
  CHECK(core::vote_round_id(core::bucket_round_id(step, 5)) > core::bucket_round_id(step, 4));
  CHECK(core::bucket_of_round_id(core::vote_round_id(core::step_round_id(0, 9, 5))) == 5);
  CHECK(core::describe_round(core::vote_round_id(id)) == "the NCCL vote of epoch 4, step 70001, "
                                                         "bucket 6");
  CHECK(core::kFormingVoteRound < core::vote_round_id(core::step_round_id(0, 0, 0)));
  // Above every rehearsal step: their ids are the steps' int32 indexes (rehearse_ring's).
  CHECK(core::kFormingVoteRound > int64_t(std::numeric_limits<int32_t>::max()));
}

core::JobSpec job_in(const std::string& dir, int64_t batch) {
  const std::string csv = testing::write_separable_csv(dir);
  const std::string text =
      "name: buckets\nseed: 11\nmodel:\n  input: [4]\n  layers:\n"
      "    - dense: {units: 32, activation: tanh}\n"
      "    - dense: {units: 16, activation: relu}\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "  updater: {type: sgd, learning_rate: 0.05}\n"
      "data:\n  train: {format: csv, path: " + csv + "}\n"
      "training: {mode: allreduce, epochs: 1, batch_size_per_worker: " + std::to_string(batch) +
      "}\noutput: {model: " + dir + "/m.dtm}\n";
  return core::parse_job_spec_text(text, "buckets.yaml", {});
}

TEST_CASE("the backward pass tells which gradients are final, from the end") {
  const std::string dir = testing::temp_dir();
  const core::JobSpec job = job_in(dir, 10);
  core::Model model(job.model);
  model.init(5);
  const int64_t n = model.num_params();
  // 4x32+32 = 160, 32x16+16 = 528, 16x2+2 = 34.
  REQUIRE(n == 722);
  CHECK(model.backward_frontiers() == std::vector<int64_t>{688, 160, 0});
  const core::TrainingData data = core::load_training_data(job);
  core::MinibatchIterator it(data.train_source(), 10, 1, 0, 1);
  it.start_epoch(0);
  core::Tensor x, y;
  REQUIRE(it.next(x, y));
  std::vector<std::pair<int64_t, std::vector<float>>> heard;
  const core::Model::GradientsReady ready = [&](int64_t from) {
    heard.emplace_back(from, std::vector<float>(model.grads() + from, model.grads() + n));
  };
  core::Rng rng(1);
  model.compute_gradients(x, y, rng, 1.f, &ready);
  REQUIRE(heard.size() == 3);
  for (size_t i = 0; i < heard.size(); ++i) {
    INFO("heard " << i << ": from " << heard[i].first);
    CHECK(heard[i].first == model.backward_frontiers()[i]);
    // What was final when heard is what the pass ended with.
    CHECK(std::memcmp(heard[i].second.data(), model.grads() + heard[i].first,
                      heard[i].second.size() * 4) == 0);
  }
}

// A job of the test's model on the separable CSV, its data and its initial model.
struct Setup {
  std::string dir = testing::temp_dir();
  core::JobSpec job = job_in(dir, 10);
  core::TrainingData data = core::load_training_data(job);
  core::Model initial{job.model};
  int64_t n = 0;
  Setup() {
    initial.init(5);
    n = initial.num_params();
  }
};

// Nodes that meet per round: each call waits until every node called with that round, then all
// get the sum in node order. It notes the rounds it was called with, and can fail a round.
class Meeting {
 public:
  explicit Meeting(int nodes) : nodes_(nodes) {}
  void sum(int node, float* values, int64_t n, int64_t round) {
    std::unique_lock<std::mutex> lock(mutex_);
    calls_[node].push_back(round);
    changed_.notify_all();
    if (round == fail_round_) throw core::UserError("the ring failed (a test's fault)", "");
    Round& r = rounds_[round];
    r.parts.resize(size_t(nodes_));
    r.parts[size_t(node)].assign(values, values + n);
    ++r.arrived;
    changed_.notify_all();
    const bool met = changed_.wait_for(lock, std::chrono::seconds(20),
                                       [&] { return r.arrived == nodes_; });
    if (!met) throw core::UserError("the other node never called round " + std::to_string(round), "");
    for (int64_t i = 0; i < n; ++i) {
      float s = 0.f;
      for (const auto& p : r.parts) s += p[size_t(i)];
      values[i] = s;
    }
  }
  // Whether `node` called `round` within 10 s.
  bool wait_called(int node, int64_t round) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] {
      const auto& c = calls_[node];
      return std::find(c.begin(), c.end(), round) != c.end();
    });
  }
  std::vector<int64_t> calls(int node) {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_[node];
  }
  int64_t fail_round_ = -1;

 private:
  struct Round {
    std::vector<std::vector<float>> parts;
    int arrived = 0;
  };
  const int nodes_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Round> rounds_;
  std::map<int, std::vector<int64_t>> calls_;
};

class MeetingExchange : public core::NodeExchange {
 public:
  MeetingExchange(Meeting& meeting, int node) : meeting_(meeting), node_(node) {}
  void sum_over_nodes(float* values, int64_t n, int64_t round) override {
    meeting_.sum(node_, values, n, round);
  }
  int first_worker() const override { return node_; }
  int total_workers() const override { return 2; }
  void attach(core::MessageBus&, int64_t) override {}
  void detach() override {}
  void publish(const core::SharedMessage&) override {}
  std::chrono::milliseconds wait_deadline() const override { return std::chrono::seconds(20); }
  void average_parameters(float*, int64_t, int64_t) override {}
  EpochEnd end_epoch(int64_t, double, int) override { return {}; }
  std::vector<float> end_averaging_epoch(int64_t, const StateSum&) override { return {}; }
  std::vector<float> end_takeover(int64_t, const StateSum&) override { return {}; }
  EvaluationShard evaluation_shard() override { return {}; }
  bool resume(Resume&) override { return false; }
  void epoch_applied(int64_t, const float*, int64_t, const float*, int64_t, float,
                     const core::AppliedTotals&) override {}

 private:
  Meeting& meeting_;
  const int node_;
};

// Two nodes of two workers each take one step with every layer a bucket; overlapped, each
// worker's backward pass waits, right after the output layer, until its node has called the
// first bucket's round (which needs both of its workers there). Returns each node's mean and the
// reference (the weighted gradients summed in double).
constexpr int kNodes = 2, kWorkersPerNode = 2;

struct TwoNodes {
  std::vector<std::vector<float>> means;
  std::vector<double> reference;
  std::vector<double> magnitude;       // of the weighted terms summed into each reference value
  std::vector<std::string> errors;
  std::vector<char> first_went_early;  // per worker
  std::vector<std::vector<int64_t>> calls;
};

TwoNodes two_nodes_step(bool overlap, int64_t fail_bucket = -1) {
  Setup setup;
  const core::JobSpec& job = setup.job;
  const core::TrainingData& data = setup.data;
  const core::Model& initial = setup.initial;
  const int64_t n = setup.n;
  const auto buckets = core::plan_buckets(initial.backward_frontiers(), n, 1);
  REQUIRE(buckets.size() == 3);
  const int64_t round = core::step_round_id(0, 0);
  Meeting meeting(kNodes);
  if (fail_bucket >= 0) meeting.fail_round_ = core::bucket_round_id(round, int(fail_bucket));
  constexpr int kAll = kNodes * kWorkersPerNode;
  TwoNodes out;
  out.means.resize(kNodes);
  out.errors.resize(kAll);
  out.first_went_early.assign(kAll, 0);
  out.reference.assign(size_t(n), 0.0);
  out.magnitude.assign(size_t(n), 0.0);
  std::vector<std::unique_ptr<core::Worker>> workers;
  std::vector<std::unique_ptr<MeetingExchange>> exchanges;
  std::vector<std::unique_ptr<core::GradientRounds>> rounds;
  for (int node = 0; node < kNodes; ++node) {
    exchanges.push_back(std::make_unique<MeetingExchange>(meeting, node));
    rounds.push_back(std::make_unique<core::GradientRounds>(
        kWorkersPerNode, n, buckets, job.training.corrections, exchanges.back().get(), overlap));
  }
  for (int g = 0; g < kAll; ++g) {
    const int node = g / kWorkersPerNode, w = g % kWorkersPerNode;
    workers.push_back(std::make_unique<core::Worker>(job, data.train_source(), initial, g, kAll));
    workers.back()->start_epoch(0);
    core::GradientRounds* r = rounds[size_t(node)].get();
    char* early = &out.first_went_early[size_t(g)];
    if (overlap)
      workers.back()->set_gradients_ready([&meeting, r, node, w, early, round, n](int64_t from) {
        r->ready(w, from);
        if (from < n && from > 0 && !*early) *early = meeting.wait_called(node, round);
      });
  }
  std::vector<std::thread> threads;
  for (int g = 0; g < kAll; ++g)
    threads.emplace_back([&, g] {
      const int node = g / kWorkersPerNode, w = g % kWorkersPerNode;
      core::Worker& worker = *workers[size_t(g)];
      core::GradientRounds& r = *rounds[size_t(node)];
      try {
        r.begin(w, &worker, false, round);
        if (!worker.compute_gradient(0)) throw std::runtime_error("no minibatch");
        r.arrive(w, &worker, [] { return false; });
        if (w == 0) out.means[size_t(node)].assign(r.mean(), r.mean() + n);
      } catch (const std::exception& e) {
        out.errors[size_t(g)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  double examples = 0.0;
  for (auto& w : workers) examples += double(w->last_batch_size());
  for (auto& w : workers)
    for (int64_t i = 0; i < n; ++i) {
      const double term = double(w->last_batch_size()) * w->model().grads()[i] / examples;
      out.reference[size_t(i)] += term;
      out.magnitude[size_t(i)] += std::fabs(term);
    }
  for (int node = 0; node < kNodes; ++node) out.calls.push_back(meeting.calls(node));
  return out;
}

TEST_CASE("a bucket goes over the nodes while the layers before it are computed") {
  const TwoNodes r = two_nodes_step(true);
  for (int g = 0; g < kNodes * kWorkersPerNode; ++g) {
    INFO("worker " << g);
    REQUIRE(r.errors[size_t(g)] == "");
    CHECK(r.first_went_early[size_t(g)]);  // the first bucket went during the backward pass
  }
  const int64_t round = core::step_round_id(0, 0);
  for (int node = 0; node < kNodes; ++node)
    CHECK(r.calls[size_t(node)] == std::vector<int64_t>{round, core::bucket_round_id(round, 1),
                                                        core::bucket_round_id(round, 2)});
  // The same bits on both nodes, the mean of the four workers' gradients.
  REQUIRE(r.means[0].size() == r.reference.size());
  CHECK(std::memcmp(r.means[0].data(), r.means[1].data(), r.means[0].size() * 4) == 0);
  // Within float rounding of the terms summed (a few units of 2^-24 of their magnitude).
  int64_t off = 0;
  for (size_t i = 0; i < r.reference.size(); ++i)
    off += std::fabs(r.means[0][i] - r.reference[i]) > 1e-6 * r.magnitude[i] + 1e-12;
  CHECK(off == 0);
  // Without overlap the buckets go after the pass: the same sums, bit for bit.
  const TwoNodes after = two_nodes_step(false);
  for (int g = 0; g < kNodes * kWorkersPerNode; ++g) REQUIRE(after.errors[size_t(g)] == "");
  CHECK(std::memcmp(after.means[0].data(), r.means[0].data(), r.means[0].size() * 4) == 0);
  CHECK(std::memcmp(after.means[1].data(), r.means[0].data(), r.means[0].size() * 4) == 0);
}

TEST_CASE("a bucket's ring that fails reaches the worker that waits for the step") {
  const TwoNodes r = two_nodes_step(true, 1);
  // The last worker of each node to arrive waited for the step and gets the failure; the other
  // is released with no step.
  for (int node = 0; node < kNodes; ++node) {
    INFO("node " << node);
    const std::string& a = r.errors[size_t(node * kWorkersPerNode)];
    const std::string& b = r.errors[size_t(node * kWorkersPerNode + 1)];
    CHECK_THAT(a + b, Catch::Contains("the ring failed"));
  }
}

TEST_CASE("a worker whose loss is not finite tells nothing of its gradient") {
  const std::string dir = testing::temp_dir();
  const core::JobSpec job = job_in(dir, 10);
  core::Model model(job.model);
  model.init(5);
  // Targets that are not numbers: neither is the loss.
  core::Tensor x({10, 4}), y({10, 2});
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = 0.5f;
  for (int64_t i = 0; i < y.size(); ++i) y.data()[i] = std::numeric_limits<float>::quiet_NaN();
  int heard = 0;
  const core::Model::GradientsReady ready = [&](int64_t) { ++heard; };
  core::Rng rng(1);
  const double loss = model.compute_gradients(x, y, rng, 1.f, &ready);
  REQUIRE_FALSE(std::isfinite(loss));
  CHECK(heard == 0);
}

// The emulated group, failing its all-reduces on demand (what no real GPU lets a test do).
class FailingGroup final : public kernels::DeviceGroup {
 public:
  FailingGroup(std::unique_ptr<kernels::DeviceGroup> inner, bool* fail, int* calls)
      : inner_(std::move(inner)), fail_(fail), calls_(calls) {}
  std::string name() const override { return "failing " + inner_->name(); }
  int size() const override { return inner_->size(); }
  uint32_t* allocate(int rank, int64_t words) override { return inner_->allocate(rank, words); }
  void release(int rank, uint32_t* p) override { inner_->release(rank, p); }
  void upload(int rank, uint32_t* dst, const uint32_t* src, int64_t words) override {
    inner_->upload(rank, dst, src, words);
  }
  void all_gather(const std::vector<const uint32_t*>& send, const std::vector<uint32_t*>& recv,
                  int64_t words) override {
    inner_->all_gather(send, recv, words);
  }
  void all_reduce_sum(const std::vector<const float*>& send, const std::vector<float*>& recv,
                      int64_t n) override {
    ++*calls_;
    if (*fail_) throw std::runtime_error("ncclAllReduce failed: unhandled cuda error");
    inner_->all_reduce_sum(send, recv, n);
  }

 private:
  std::unique_ptr<kernels::DeviceGroup> inner_;
  bool* fail_;
  int* calls_;
};

TEST_CASE("GPU workers sum over their device group, and over host memory once it fails") {
  Setup setup;
  const core::JobSpec& job = setup.job;
  const core::TrainingData& data = setup.data;
  const core::Model& initial = setup.initial;
  const int64_t n = setup.n;
  std::vector<std::unique_ptr<kernels::Backend>> gpus;
  std::vector<kernels::Backend*> backends;
  std::string why;
  setenv("DTRAIN_EMULATED_GPUS", "2", 1);  // (no real GPU ran this)
  for (int d = 0; d < 2; ++d) {
    gpus.push_back(kernels::make_gpu_backend(d, &why));
    REQUIRE(gpus.back() != nullptr);
    backends.push_back(gpus.back().get());
  }
  std::unique_ptr<kernels::DeviceGroup> emulated = kernels::make_device_group(backends, &why);
  unsetenv("DTRAIN_EMULATED_GPUS");
  REQUIRE(emulated != nullptr);
  std::vector<std::unique_ptr<core::Worker>> workers;
  std::vector<core::Worker*> ranks;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(std::make_unique<core::Worker>(job, data.train_source(), initial, w, 2,
                                                     backends[size_t(w)]));
    workers.back()->start_epoch(0);
    ranks.push_back(workers.back().get());
  }
  bool fail = false;
  int calls = 0;  // (the group itself is gone once given up)
  auto group =
      std::make_unique<FailingGroup>(std::move(emulated), &fail, &calls);
  // Two buckets: the device sum is cut into them like the host's.
  core::GradientRounds rounds(2, n, core::plan_buckets(initial.backward_frontiers(), n, 200),
                              job.training.corrections, nullptr, false);
  REQUIRE(rounds.buckets().size() == 2);
  std::vector<std::string> heard;
  rounds.sum_on_devices(std::move(group), ranks, [&](const std::string& w) { heard.push_back(w); });
  // Worker 1's step alone has no minibatch: only worker 0's gradient counts.
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    fail = step == 1;  // the second step's all-reduce fails: host memory from then on
    std::vector<std::vector<float>> grads(2);
    std::vector<std::thread> threads;
    const bool second_has = step != 2;
    std::vector<char> computed(2, 1);  // (no assertions in the threads: Catch's are not safe there)
    for (int w = 0; w < 2; ++w)
      threads.emplace_back([&, w] {
        core::Worker* worker = (w == 1 && !second_has) ? nullptr : ranks[size_t(w)];
        rounds.begin(w, worker, true, core::step_round_id(0, step));
        if (worker) {
          computed[size_t(w)] = worker->compute_gradient(step);
          worker->host_gradient(grads[size_t(w)]);
        }
        rounds.arrive(w, worker, [] { return false; });
      });
    for (auto& t : threads) t.join();
    REQUIRE(computed == std::vector<char>{1, 1});
    double examples = 0.0;
    for (int w = 0; w < 2; ++w)
      if (!grads[size_t(w)].empty()) examples += double(ranks[size_t(w)]->last_batch_size());
    CHECK(rounds.examples() == examples);
    int64_t off = 0;
    for (int64_t i = 0; i < n; ++i) {
      double reference = 0.0;
      for (int w = 0; w < 2; ++w)
        if (!grads[size_t(w)].empty())
          reference += double(ranks[size_t(w)]->last_batch_size()) * grads[size_t(w)][size_t(i)];
      reference /= examples;
      off += std::fabs(rounds.mean()[i] - reference) > 1e-5 * (std::fabs(reference) + 1e-6);
    }
    CHECK(off == 0);
  }
  CHECK(calls == 2);  // the third step did not try the group again
  REQUIRE(heard.size() == 1);
  CHECK(heard[0] == "ncclAllReduce failed: unhandled cuda error");
}

}  // namespace
}  // namespace dtrain
