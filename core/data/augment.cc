#include "core/data/augment.h"

#include <algorithm>

#include "core/util/rng.h"

namespace dtrain::core {

void augment_example(const Augmentation& a, const Shape& shape, uint64_t seed, int64_t epoch,
                     int64_t example, float* x, std::vector<float>& scratch) {
  const int64_t channels = shape[0], h = shape[1], w = shape[2], plane = h * w;
  Rng rng = Rng::derive(seed ^ (0xa09e0000ULL + uint64_t(epoch)), uint64_t(example));
  const int64_t p = a.crop_padding;
  const int64_t dy = p > 0 ? int64_t(rng.next() % uint64_t(2 * p + 1)) - p : 0;
  const int64_t dx = p > 0 ? int64_t(rng.next() % uint64_t(2 * p + 1)) - p : 0;
  const bool flip = a.horizontal_flip && (rng.next() & 1);
  if (dy == 0 && dx == 0 && !flip) return;
  scratch.assign(x, x + channels * plane);
  for (int64_t c = 0; c < channels; ++c) {
    const float* src = scratch.data() + c * plane;
    float* dst = x + c * plane;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t col = 0; col < w; ++col) {
        // Output pixel (y, col) shows source pixel (y + dy, x') where x' undoes the flip.
        const int64_t sx = (flip ? w - 1 - col : col) + dx, sy = y + dy;
        dst[y * w + col] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? src[sy * w + sx] : 0.0f;
      }
  }
}

}  // namespace dtrain::core
