#include "core/train/local_steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <string>

#include "core/codec/message_check.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {

// The pseudo-gradient's residual is error feedback across rounds: clipping it would drop
// what a round did not send, so it is never clipped.
TrainingSpec unclipped(const TrainingSpec& training) {
  TrainingSpec t = training;
  t.residual.clip = false;
  return t;
}

}  // namespace

std::string describe_local_steps(const LocalStepsSpec& spec) {
  char text[200];
  std::snprintf(text, sizeof text,
                "local steps: %lld inner steps a round, then the outer %s step (learning rate %g, "
                "momentum %g) on the mean pseudo-gradient, sent in %lld levels from the "
                "threshold of its largest %g%%",
                (long long)spec.steps, spec.outer.type.c_str(), spec.outer.learning_rate,
                spec.outer.momentum, (long long)spec.levels, 100.0 * spec.density);
  return text;
}

LocalSteps::LocalSteps(const TrainingSpec& training, const CodecEngine& engine,
                       const float* initial, int64_t num_params, uint32_t origin)
    : engine_(engine),
      n_(num_params),
      density_(training.sync.local.density),
      levels_(training.sync.local.levels),
      global_(initial, initial + num_params),
      outer_(training.sync.local.outer, num_params),
      encoder_(num_params, unclipped(training), origin, engine) {}

float LocalSteps::threshold_for(const std::vector<float>& values, double density) {
  std::vector<float> magnitude;
  return threshold_for(values, density, magnitude);
}

float LocalSteps::threshold_for(const std::vector<float>& values, double density,
                                std::vector<float>& magnitude) {
  magnitude.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) magnitude[i] = std::fabs(values[i]);
  if (magnitude.empty()) return 1.f;
  const size_t k = std::clamp<size_t>(
      static_cast<size_t>(std::ceil(density * double(magnitude.size()))), 1, magnitude.size());
  std::nth_element(magnitude.begin(), magnitude.begin() + (k - 1), magnitude.end(),
                   std::greater<float>());
  float tau = magnitude[k - 1];
  if (tau > 0.f) return tau;
  // Fewer than k elements are not zero: the smallest of those that are.
  for (float m : magnitude)
    if (m > 0.f && (tau == 0.f || m < tau)) tau = m;
  return tau > 0.f ? tau : 1.f;
}

NodeExchange::PseudoGradient LocalSteps::encode(const float* params, int workers, Round& r) {
  std::vector<float>& pseudo = buffers_.pseudo;
  std::vector<float>& left = buffers_.left;
  pseudo.resize(size_t(n_));
  left.resize(size_t(n_));
  const std::vector<float>& residual = encoder_.residual();
  for (int64_t i = 0; i < n_; ++i) {
    pseudo[size_t(i)] = global_[size_t(i)] - params[i];
    left[size_t(i)] = residual[size_t(i)] + pseudo[size_t(i)];
  }
  float tau = threshold_for(left, density_, buffers_.magnitude);
  NodeExchange::PseudoGradient mine{workers, {}};
  r.tau = tau;
  // The first level takes the pseudo-gradient into the residual; the next ones send what is
  // left of it at half the threshold each.
  std::fill(left.begin(), left.end(), 0.f);
  for (int64_t level = 0; level < levels_; ++level, tau /= 2) {
    encoder_.threshold().set_tau(tau);
    std::vector<EncodedMessage> segments = encoder_.encode(level == 0 ? pseudo.data()
                                                                      : left.data());
    // One segment: a model of 2^31 parameters does not fit a mesh message anyway.
    r.sent += segments.front().count;
    r.bytes += segments.front().wire_bytes();
    mine.messages.push_back(std::move(segments.front()));
  }
  return mine;
}

LocalSteps::Round LocalSteps::round(float* params, int workers, NodeExchange* exchange,
                                    int64_t round) {
  finish_pending(params);
  Round r;
  const NodeExchange::PseudoGradient mine = encode(params, workers, r);
  const std::vector<NodeExchange::PseudoGradient> parts =
      exchange ? exchange->share_pseudo_gradient(round, mine)
               : std::vector<NodeExchange::PseudoGradient>{mine};
  const std::vector<float>& mean = mean_of(parts);
  outer_.step(global_.data(), mean.data());
  std::copy(global_.begin(), global_.end(), params);
  return r;
}

LocalSteps::Round LocalSteps::send_round(float* params, int workers, NodeExchange* exchange,
                                         int64_t round) {
  finish_pending(params);
  Round r;
  NodeExchange::PseudoGradient mine = encode(params, workers, r);
  sent_from_.assign(params, params + n_);
  if (exchange) {
    pending_ = std::async(std::launch::async, [exchange, round, mine = std::move(mine)] {
      return exchange->share_pseudo_gradient(round, mine);
    });
  } else {
    std::promise<std::vector<NodeExchange::PseudoGradient>> ready;
    ready.set_value({std::move(mine)});
    pending_ = ready.get_future();
  }
  return r;
}

void LocalSteps::finish_pending(float* params) {
  if (!pending_.valid()) return;
  const std::vector<float>& mean = mean_of(pending_.get());
  // The replica keeps the steps it took since the round went out, on top of the new global
  // parameters (the steps before are in the round's pseudo-gradient, so in the new global).
  outer_.step(global_.data(), mean.data());
  for (int64_t i = 0; i < n_; ++i) params[i] += global_[size_t(i)] - sent_from_[size_t(i)];
}

const std::vector<float>& LocalSteps::mean_of(
    const std::vector<NodeExchange::PseudoGradient>& parts) {
  std::vector<double>& sum = buffers_.sum;
  sum.assign(static_cast<size_t>(n_), 0.0);
  buffers_.negated.resize(static_cast<size_t>(n_));
  int64_t workers = 0;
  std::string error;
  for (size_t k = 0; k < parts.size(); ++k) {
    const NodeExchange::PseudoGradient& p = parts[k];
    if (p.workers <= 0) continue;
    // Every node receives the same parts: each fails alike rather than all leaving one out.
    if (!fits(p, error))
      throw UserError("pseudo-gradient " + std::to_string(k + 1) + " of " +
                          std::to_string(parts.size()) + " of a round does not fit this model" +
                          (error.empty() ? "" : ": " + error),
                      "run the same dtrain release and job spec on every node");
    add_part(engine_, p, buffers_.negated, sum);
    workers += p.workers;
  }
  std::vector<float>& mean = buffers_.mean;
  mean.assign(static_cast<size_t>(n_), 0.f);
  if (workers == 0) return mean;
  for (int64_t i = 0; i < n_; ++i) mean[size_t(i)] = static_cast<float>(sum[size_t(i)] / workers);
  return mean;
}

void LocalSteps::add_part(const CodecEngine& engine, const NodeExchange::PseudoGradient& part,
                          std::vector<float>& negated, std::vector<double>& sum) {
  std::fill(negated.begin(), negated.end(), 0.f);
  for (const EncodedMessage& m : part.messages) engine.apply(m, negated.data());
  const double w = double(part.workers);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] -= w * double(negated[i]);
}

bool LocalSteps::fits(const NodeExchange::PseudoGradient& part, std::string& error) const {
  if (part.messages.empty() || int64_t(part.messages.size()) > kMaxPseudoGradientLevels)
    return false;
  for (const EncodedMessage& m : part.messages)
    if (m.length != n_ || !check_message(m, n_, error)) return false;
  return true;
}

bool LocalSteps::restore(const std::vector<float>& global, const std::vector<float>& momentum,
                         const std::vector<float>& residual, float tau, int64_t encoder_steps) {
  if (int64_t(global.size()) != n_ || momentum.size() != outer_.momentum().size() ||
      int64_t(residual.size()) != n_)
    return false;
  global_ = global;
  outer_.set_momentum(momentum);
  return encoder_.restore(residual, tau, encoder_steps);
}

void LocalSteps::rebase(const float* params, const std::vector<float>& momentum) {
  std::copy(params, params + n_, global_.begin());
  outer_.set_momentum(momentum);
}

}  // namespace dtrain::core
