#include "core/codec/reference_codec.h"

#include <cmath>
#include <string>

#include "core/codec/message_elements.h"
#include "core/util/check.h"
#include "core/util/error.h"

namespace dtrain::core {
void refuse_nonfinite_update(int64_t index, float value) {
  throw UserError("the update for parameter " + std::to_string(index) + " is " +
                      (std::isnan(value) ? "NaN" : "infinite") +
                      ", so it cannot be encoded or shared",
                  "training diverged: lower model.updater.learning_rate, normalise the data "
                  "(data.normalize: scale) or add l2");
}

const char* encoding_name(Encoding e) { return e == Encoding::kSparse ? "sparse" : "bitmap"; }

EncodedMessage reference_encode(float* r, const float* u, int64_t n, float tau, float clip,
                                double* residual_sum_squares) {
  DTRAIN_CHECK(n >= 0 && n <= kMaxSegmentLength);
  DTRAIN_CHECK(tau > 0.f);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(u[i])) refuse_nonfinite_update(i, u[i]);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(r[i] + u[i])) refuse_nonfinite_update(i, r[i] + u[i]);

  // Steps 2-3: accumulate, count, and choose before anything is subtracted.
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    r[i] = r[i] + u[i];
    if (std::fabs(r[i]) >= tau) ++count;
  }
  EncodedMessage m = message_for(tau, n, count);
  if (m.encoding == Encoding::kSparse) m.words.reserve(count);
  else m.words.assign(bitmap_words(n), 0u);

  // Step 4 (and 5 when clip > 0).
  double squares = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    float v = r[i];
    if (v >= tau) {
      v = v - tau;
      if (m.encoding == Encoding::kSparse) m.words.push_back(static_cast<uint32_t>(i));
      else m.words[i / 16] |= 1u << (2 * (i % 16));
    } else if (v <= -tau) {
      v = v + tau;
      if (m.encoding == Encoding::kSparse)
        m.words.push_back(static_cast<uint32_t>(i) | kSparseSignBit);
      else m.words[i / 16] |= 2u << (2 * (i % 16));
    }
    if (clip > 0.f) v = std::fmin(std::fmax(v, -clip), clip);
    r[i] = v;
    squares += double(v) * double(v);
  }
  if (residual_sum_squares) *residual_sum_squares = squares;
  return m;
}

void reference_apply(const EncodedMessage& m, float* params) {
  float* p = params + m.param_offset;
  if (m.encoding == Encoding::kSparse) {
    for (uint32_t w : m.words) {
      float& v = p[w & kSparseIndexMask];
      v = (w & kSparseSignBit) ? v + m.tau : v - m.tau;
    }
    return;
  }
  for (int64_t i = 0; i < m.length; ++i) {
    const uint32_t code = (m.words[i / 16] >> (2 * (i % 16))) & 3u;
    if (code == 1u) p[i] = p[i] - m.tau;
    else if (code == 2u) p[i] = p[i] + m.tau;
  }
}

void reference_decode_add(const EncodedMessage& m, float* out) {
  for_each_sent(m, [out](int64_t i, float v) { out[i] += v; });
}

}  // namespace dtrain::core
