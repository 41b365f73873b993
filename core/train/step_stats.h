#pragma once
// What one step of one worker did, for the stats history (daemon/node/stats_recorder.h) and
// metrics: TrainingListener::on_worker_step hands it over after every step of every worker.
#include <cstdint>

#include "core/codec/update_encoder.h"

namespace dtrain::core {

// A step split by where its time went (milliseconds): waiting for the others (training.sync's
// step gate; parameter averaging: the rounds), applying the messages received, waiting for the
// minibatch (reading, decoding, augmenting: what the read-ahead thread did not hide), computing
// the gradient and the updater's step, encoding (threshold, encode, apply our own message,
// publish).
struct StepTimes {
  double wait_ms = 0, apply_ms = 0, data_ms = 0, compute_ms = 0, encode_ms = 0;
  double total_ms() const { return wait_ms + apply_ms + data_ms + compute_ms + encode_ms; }
  // The minibatch's wait was timed as part of compute (Worker::last_data_ms): move it out.
  void split_data(double ms) {
    data_ms = ms;
    compute_ms -= ms;
  }
};

struct WorkerStep {
  int64_t iteration = 0;  // the worker's own, 0-based
  int64_t epoch = 0;      // 0-based
  double loss = 0.0;      // of this step's minibatch
  int64_t samples = 0;    // in this step's minibatch
  double start_unix_ms = 0;  // when the step began (wall clock: the nodes' timelines line up)
  bool sharing = false;   // gradient sharing: `codec` holds this step's figures
  CodecStepStats codec;
  StepTimes times;
};

}  // namespace dtrain::core
