#include "core/train/averaging_rounds.h"

#include <algorithm>
#include <vector>

namespace dtrain::core {

void average_round(NodeExchange& exchange, Worker& worker, bool with_updater_state,
                   int64_t round) {
  Model& m = worker.model();
  const bool with_state = with_updater_state && worker.updater().state_size() > 0;
  if (!with_state && m.on_host()) {
    exchange.average_parameters(m.params(), m.num_params(), round);
    return;
  }
  const float* params = m.host_params();
  std::vector<float> both(params, params + m.num_params());
  std::vector<float> state;
  if (with_state) state = worker.updater().host_state();
  both.insert(both.end(), state.begin(), state.end());
  exchange.average_parameters(both.data(), int64_t(both.size()), round);
  m.set_params(both.data());
  if (!with_state) return;
  std::copy(both.begin() + m.num_params(), both.end(), state.begin());
  worker.updater().set_state(state);
}

int64_t rounds_per_epoch(int64_t examples, int shards, int64_t batch, int64_t frequency) {
  const int64_t smallest_shard = examples / shards;
  return std::max<int64_t>(
      1, (smallest_shard + batch - 1) / batch / std::max<int64_t>(1, frequency));
}

}  // namespace dtrain::core
