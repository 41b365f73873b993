#pragma once
// A worker's side of gradient sharing (docs/architecture/core.md, "The update", steps 2-5): its
// residual, its threshold algorithm and its message numbering. encode() turns the step u into
// messages, one per parameter segment, and records the figures the progress output and /metrics
// show.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/codec/codec_engine.h"
#include "core/codec/device_codec.h"
#include "core/codec/message.h"
#include "core/codec/threshold.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

struct CodecStepStats {
  float tau = 0.f;              // the threshold this step used
  int64_t sent = 0;             // elements sent (over all segments)
  int64_t params = 0;
  double density = 0.0;         // sent / params
  Encoding encoding = Encoding::kSparse;  // kBitmap when any segment went out as a bitmap
  double residual_norm = 0.0;   // L2, after subtracting (and clipping)
  int64_t message_bytes = 0;    // headers + payloads
  int64_t messages = 0;
};

class UpdateEncoder {
 public:
  // `origin` numbers the worker; message ids are unique per origin. `max_segment` is
  // kMaxSegmentLength except in tests of segmenting. With a `device` (a GPU backend) the
  // residual lives there and encoding runs there (DeviceCodec); otherwise `engine` on the host.
  UpdateEncoder(int64_t num_params, const TrainingSpec& training, uint32_t origin,
                const CodecEngine& engine, int64_t max_segment = kMaxSegmentLength,
                kernels::Backend* device = nullptr);

  // r += u, threshold, encode, subtract, clip every `residual.every` steps; u is in the
  // residual's memory. Throws UserError for a NaN or Inf in u; the encoder must not be used
  // after that.
  std::vector<EncodedMessage> encode(const float* update);

  const CodecStepStats& last_stats() const { return stats_; }
  ThresholdAlgorithm& threshold() { return threshold_; }
  const ThresholdAlgorithm& threshold() const { return threshold_; }
  std::vector<float> residual() const;  // a host copy
  // Goes on from a checkpoint's residual, threshold and step count (core/train/checkpoints.h);
  // false, changing nothing, when the residual is not this encoder's size.
  bool restore(const std::vector<float>& residual, float tau, int64_t steps);
  // The device codec when the residual lives on a GPU, else null.
  DeviceCodec* device_codec() { return device_codec_.get(); }
  int64_t steps() const { return steps_; }

 private:
  ResidualSpec residual_spec_;
  uint32_t origin_;
  const CodecEngine& engine_;
  int64_t max_segment_;
  ThresholdAlgorithm threshold_;
  Tensor residual_;
  CodecEngine::Scratch scratch_;
  std::unique_ptr<DeviceCodec> device_codec_;
  uint64_t next_sequence_ = 1;
  int64_t steps_ = 0;
  CodecStepStats stats_;
};

}  // namespace dtrain::core
