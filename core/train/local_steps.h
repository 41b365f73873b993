#pragma once
// Local steps with an outer optimizer (docs/architecture/core.md, "Local steps"; DiLoCo,
// Douillard et al. 2023). Between rounds each replica steps on its own. At a round, this node's
// pseudo-gradient (global - replica) plus its residual is threshold-encoded like a step's update
// (core/codec: each sent element worth exactly +tau or -tau, what is not sent stays in the
// residual and goes out in a later round), every live node's message of the round is decoded
// and averaged (weighted by workers), and the outer optimizer applies that mean to the global
// parameters. Every node decodes the same messages in the same order and runs the same outer
// step, so the global parameters, which every replica then takes, agree bit for bit.
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "core/codec/codec_engine.h"
#include "core/codec/update_encoder.h"
#include "core/spec/job_spec.h"
#include "core/train/node_exchange.h"
#include "core/train/outer_optimizer.h"

namespace dtrain::core {

// One line for the job's log: "local steps: 50 inner steps a round, outer nesterov ...".
std::string describe_local_steps(const LocalStepsSpec& spec);

class LocalSteps {
 public:
  // `initial`: the global parameters the job starts from; `origin` numbers this node's
  // messages (its first global worker).
  LocalSteps(const TrainingSpec& training, const CodecEngine& engine, const float* initial,
             int64_t num_params, uint32_t origin);

  struct Round {
    int64_t sent = 0;       // elements this node sent (over its levels)
    float tau = 0.f;        // the first level's threshold
    int64_t bytes = 0;      // its messages on the wire
  };
  // `params` holds this node's replica after the round's inner steps (the mean of its
  // `workers` workers); on return it holds the new global parameters (a round still on its way,
  // send_round's, is applied first).
  Round round(float* params, int workers, NodeExchange* exchange, int64_t round);
  // Overlap (`overlap: true`; one-step-delayed DiLoCo): applies the round still on its way, if
  // any (finish_pending), sends this round's pseudo-gradient and returns at once; the replica
  // goes on from where it is, and this round's outer step is applied at the next round.
  Round send_round(float* params, int workers, NodeExchange* exchange, int64_t round);
  // Waits for the round on its way and applies its outer step to the global parameters; the
  // replica keeps the steps it took since: params = new global + (params - replica sent).
  // Nothing happens when no round is on its way.
  void finish_pending(float* params);

  // After the epoch end's agreement (a dense average over the live nodes): these parameters
  // and this outer momentum are the global state from now on.
  void rebase(const float* params, const std::vector<float>& momentum);

  // Goes on from a checkpoint's state; false, changing nothing, when it is not this model's.
  bool restore(const std::vector<float>& global, const std::vector<float>& momentum,
               const std::vector<float>& residual, float tau, int64_t encoder_steps);

  const std::vector<float>& global() const { return global_; }
  const OuterOptimizer& outer() const { return outer_; }
  UpdateEncoder& encoder() { return encoder_; }

  // The threshold that sends the `density` share of `values` with the largest magnitudes: the
  // smallest of those magnitudes (at least one element); 1 when every value is 0. `magnitude`:
  // scratch, resized to the values'.
  static float threshold_for(const std::vector<float>& values, double density,
                             std::vector<float>& magnitude);
  static float threshold_for(const std::vector<float>& values, double density);
  // sum += part's workers x its levels decoded, with the engine's kernels. `negated` is
  // scratch of the model's size: the kernels subtract (params -= update), so the levels are
  // subtracted from zero and the sum takes them back negated, which is exact in floating
  // point: the same bits as adding them.
  static void add_part(const CodecEngine& engine, const NodeExchange::PseudoGradient& part,
                       std::vector<float>& negated, std::vector<double>& sum);

 private:
  // This round's pseudo-gradient (global - params, plus the residual) as `levels_` messages.
  NodeExchange::PseudoGradient encode(const float* params, int workers, Round& r);
  // The mean pseudo-gradient of `parts`, weighted by their workers. A part that does not fit
  // the model throws UserError (every node has the same parts, so every node fails alike).
  // Returns buffers_.mean.
  const std::vector<float>& mean_of(const std::vector<NodeExchange::PseudoGradient>& parts);
  // Whether every message of `part` may be applied to this model.
  bool fits(const NodeExchange::PseudoGradient& part, std::string& error) const;

  const CodecEngine& engine_;
  const int64_t n_;
  const double density_;
  const int64_t levels_;
  std::vector<float> global_;
  OuterOptimizer outer_;
  UpdateEncoder encoder_;
  std::future<std::vector<NodeExchange::PseudoGradient>> pending_;  // send_round's
  std::vector<float> sent_from_;  // the replica when send_round sent it
  // A round's vectors of the model's size, kept from round to round: allocated afresh, a large
  // model's round spent half its time zeroing new pages (docs/performance.md, "Local steps'
  // rounds").
  struct RoundBuffers {
    std::vector<float> pseudo, left, magnitude, negated, mean;
    std::vector<double> sum;
  } buffers_;
};

}  // namespace dtrain::core
