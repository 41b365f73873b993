#pragma once
// The work each way to train does besides the model's own step, on at most kRoundSample
// elements of a model of the job's shape (core/train/sync_choice.h): timed alone before a job
// of `training.sync: auto` chooses (core/train/step_timing.h), and run by every node, all at
// once, while the nodes rehearse (daemon/node/sync_rehearsal.h), where they share the cores
// as they will in training.
#include <cstdint>
#include <vector>

#include "core/codec/codec_engine.h"
#include "core/spec/job_spec.h"
#include "core/train/local_steps.h"
#include "core/train/step_timing.h"

namespace dtrain::core {

// A round of local steps in one process: the threshold, the levels' encoding, their decoding
// and the outer step, on a normal pseudo-gradient.
class LocalRoundWork {
 public:
  LocalRoundWork(const JobSpec& job, int64_t n);
  void prepare() { params_ = replica_; }  // untimed: the replica the round starts from
  void run(int64_t round) { local_.round(params_.data(), 1, nullptr, round); }

 private:
  const std::vector<float> global_;
  const std::vector<float> replica_;
  LocalSteps local_;
  std::vector<float> params_;
};

// Decoding one more node's part of a round, as LocalSteps::mean_of does: its levels (each a
// bitmap, as a normal pseudo-gradient's levels after the first are) into the sum.
class PartDecodeWork {
 public:
  PartDecodeWork(const JobSpec& job, int64_t n);
  void run() { LocalSteps::add_part(engine_, part_, negated_, sum_); }

 private:
  const CodecEngine& engine_;
  NodeExchange::PseudoGradient part_;
  std::vector<float> negated_;
  std::vector<double> sum_;
};

// Per-step sharing's own work a step in one process: one worker's update encoded at the
// threshold's density and `others` messages of that size applied.
class SharingStepWork {
 public:
  SharingStepWork(const JobSpec& job, int64_t n, int others);
  void prepare() { std::fill(residual_.begin(), residual_.end(), 0.f); }
  void run();

 private:
  const CodecEngine& engine_;
  const std::vector<float> update_;
  const float tau_;
  const int others_;
  std::vector<float> residual_, params_;
  CodecEngine::Scratch scratch_;
};

// What a node does while it rehearses: a step of the job's model, then per-step sharing's
// work; a round's work (its own and its decoding of the other nodes' parts). The codec's
// work is done on at most kRoundSample elements, repeated to the model's size. Each runs once
// when it is made, so that none is timed paying for its first run.
class RehearsalWork {
 public:
  RehearsalWork(const JobSpec& job, int workers, int nodes);
  void step() { computer_.step(); }
  void share_step();
  void round();

 private:
  StepComputer computer_;
  const int repeats_;
  const int nodes_;
  SharingStepWork sharing_;
  LocalRoundWork local_;
  PartDecodeWork part_;
  int64_t rounds_ = 0;
};

}  // namespace dtrain::core
