#include "core/train/averaging_rounds.h"

#include <algorithm>
#include <vector>

namespace dtrain::core {

namespace {

// The worker's parameters, then (with_state) its updater's state, in one vector.
std::vector<float> params_and_state(Worker& worker, bool with_state) {
  const Model& m = worker.model();
  const float* params = m.host_params();
  std::vector<float> both(params, params + m.num_params());
  if (!with_state) return both;
  const std::vector<float> state = worker.updater().host_state();
  both.insert(both.end(), state.begin(), state.end());
  return both;
}

void set_params_and_state(Worker& worker, const std::vector<float>& both, bool with_state) {
  Model& m = worker.model();
  m.set_params(both.data());
  if (!with_state) return;
  worker.updater().set_state(std::vector<float>(both.begin() + m.num_params(), both.end()));
}

}  // namespace

void average_round(NodeExchange& exchange, Worker& worker, bool with_updater_state,
                   int64_t round) {
  Model& m = worker.model();
  const bool with_state = with_updater_state && worker.updater().state_size() > 0;
  if (!with_state && m.on_host()) {
    exchange.average_parameters(m.params(), m.num_params(), round);
    return;
  }
  std::vector<float> both = params_and_state(worker, with_state);
  exchange.average_parameters(both.data(), int64_t(both.size()), round);
  set_params_and_state(worker, both, with_state);
}

bool agree_or_average(NodeExchange& exchange, Worker& worker, int64_t epoch, int64_t round) {
  const bool with_state = worker.updater().state_size() > 0;
  std::vector<float> both = params_and_state(worker, with_state);
  if (exchange.replicas_agree(both.data(), int64_t(both.size()), epoch)) return false;
  exchange.average_parameters(both.data(), int64_t(both.size()), round);
  set_params_and_state(worker, both, with_state);
  return true;
}

int64_t rounds_per_epoch(int64_t examples, int shards, int64_t batch, int64_t frequency) {
  const int64_t smallest_shard = examples / shards;
  return std::max<int64_t>(
      1, (smallest_shard + batch - 1) / batch / std::max<int64_t>(1, frequency));
}

}  // namespace dtrain::core
