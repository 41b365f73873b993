#include "core/train/replica_state.h"

namespace dtrain::core {

ModelFile snapshot(const JobSpec& job, Worker& worker, const TrainingData& data,
                   int64_t iteration, int64_t epoch, const UpdateEncoder* encoder) {
  ModelFile f;
  Model& m = worker.model();
  f.spec_yaml = job.source_text;
  const float* params = m.host_params();
  f.params.assign(params, params + m.num_params());
  const float* state = m.host_state();
  f.state.assign(state, state + m.num_state());
  f.has_updater = true;
  f.updater_type = worker.updater().type();
  f.updater_state = worker.updater().host_state();
  f.normalizer = data.normalizer;
  f.class_names = data.train_source().class_names();
  f.iteration = iteration;
  f.epoch = epoch;
  if (encoder) {
    f.has_sharing = true;
    f.tau = encoder->threshold().tau();
    f.residual = encoder->residual();
    f.encoder_steps = encoder->steps();
  }
  return f;
}

ModelFile checkpoint(const JobSpec& job, SharingWorkers& workers, const TrainingData& data,
                     int64_t iteration, int64_t epoch, bool sharing) {
  ModelFile f = snapshot(job, workers[0]->worker(), data, iteration, epoch,
                         sharing ? &workers[0]->encoder() : nullptr);
  for (size_t w = 1; w < workers.size(); ++w) {
    ModelFile::WorkerState s;
    if (sharing) {
      s.encoder_steps = workers[w]->encoder().steps();
      s.residual = workers[w]->encoder().residual();
    }
    s.updater_state = workers[w]->worker().updater().host_state();
    f.other_workers.push_back(std::move(s));
  }
  return f;
}

Replica copy_replica(Model& m) {
  return {std::vector<float>(m.host_params(), m.host_params() + m.num_params()),
          std::vector<float>(m.host_state(), m.host_state() + m.num_state())};
}

void restore_replica(Model& m, const Replica& r) {
  m.set_params(r.params.data());
  if (!r.state.empty()) m.set_state(r.state.data());
}

NodeExchange::StateSum state_sum(SharingWorkers& workers) {
  NodeExchange::StateSum s;
  const int64_t n = workers[0]->worker().model().num_state();
  if (n == 0) return s;
  s.sum.assign(static_cast<size_t>(n), 0.0);
  for (auto& w : workers) {
    const float* state = w->worker().model().host_state();
    for (int64_t i = 0; i < n; ++i) s.sum[static_cast<size_t>(i)] += state[i];
  }
  s.workers = static_cast<int>(workers.size());
  return s;
}

void set_state(SharingWorkers& workers, const std::vector<float>& mean) {
  if (mean.empty()) return;
  for (auto& w : workers) w->worker().model().set_state(mean.data());
}

void average_state(SharingWorkers& workers) {
  if (workers.size() == 1) return;
  const NodeExchange::StateSum s = state_sum(workers);
  std::vector<float> mean(s.sum.size());
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = static_cast<float>(s.sum[i] / s.workers);
  set_state(workers, mean);
}

void average_tau(SharingWorkers& workers) {
  double sum = 0.0;
  for (auto& w : workers) sum += w->encoder().threshold().tau();
  for (auto& w : workers)
    w->encoder().threshold().set_tau(static_cast<float>(sum / workers.size()));
}

}  // namespace dtrain::core
