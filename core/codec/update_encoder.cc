#include "core/codec/update_encoder.h"

#include <algorithm>
#include <cmath>

#include "core/util/check.h"

namespace dtrain::core {

UpdateEncoder::UpdateEncoder(int64_t num_params, const TrainingSpec& training, uint32_t origin,
                             const CodecEngine& engine, int64_t max_segment,
                             kernels::Backend* device)
    : residual_spec_(training.residual),
      origin_(origin),
      engine_(engine),
      max_segment_(max_segment),
      threshold_(training.threshold) {
  DTRAIN_CHECK(max_segment > 0 && max_segment <= kMaxSegmentLength);
  if (device && !device->host_memory()) {
    residual_.set_memory(device);
    device_codec_ = std::make_unique<DeviceCodec>(*device);
  }
  residual_.resize({num_params});
  residual_.zero();
}

std::vector<float> UpdateEncoder::residual() const {
  std::vector<float> out(static_cast<size_t>(residual_.size()));
  residual_.copy_to_host(out.data());
  return out;
}

bool UpdateEncoder::restore(const std::vector<float>& residual, float tau, int64_t steps) {
  if (int64_t(residual.size()) != residual_.size()) return false;
  residual_.copy_from_host(residual.data());
  threshold_.set_tau(tau);
  steps_ = steps;
  return true;
}

std::vector<EncodedMessage> UpdateEncoder::encode(const float* update) {
  ++steps_;
  const float tau = threshold_.tau();
  const bool clip_now = residual_spec_.clip && steps_ % residual_spec_.every == 0;
  const float clip = clip_now ? static_cast<float>(residual_spec_.clip_multiple * tau) : 0.f;
  const int64_t n = residual_.size();

  std::vector<EncodedMessage> messages;
  CodecStepStats stats;
  stats.tau = tau;
  stats.params = n;
  double squares = 0.0;
  int64_t bitmap_elements = 0;
  for (int64_t offset = 0; offset < n; offset += max_segment_) {
    const int64_t len = std::min(max_segment_, n - offset);
    double segment_squares = 0.0;
    EncodedMessage m =
        device_codec_
            ? device_codec_->encode_segment(residual_.data() + offset, update + offset, len, tau,
                                            clip, &segment_squares)
            : engine_.encode_segment(residual_.data() + offset, update + offset, len, tau, clip,
                                     &segment_squares, scratch_);
    m.param_offset = offset;
    m.origin = origin_;
    m.id = (static_cast<uint64_t>(origin_) << 40) | next_sequence_++;
    squares += segment_squares;
    stats.sent += m.count;
    stats.message_bytes += m.wire_bytes();
    if (m.encoding == Encoding::kBitmap) {
      stats.encoding = Encoding::kBitmap;
      bitmap_elements += len;
    }
    messages.push_back(std::move(m));
  }
  stats.messages = static_cast<int64_t>(messages.size());
  stats.density = n ? double(stats.sent) / double(n) : 0.0;
  stats.residual_norm = std::sqrt(squares);
  // A step counts as a bitmap for the threshold when most of the model went out as bitmaps.
  threshold_.observe(stats.sent, n,
                     2 * bitmap_elements > n ? Encoding::kBitmap : Encoding::kSparse);
  stats_ = stats;
  return messages;
}

}  // namespace dtrain::core
