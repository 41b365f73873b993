#include "tools/bench/stream_baseline.h"

namespace dtrain::bench {

void stream_add(float* __restrict r, const float* __restrict u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) r[i] += u[i];
}

void scatter_sub(float* __restrict p, const uint32_t* __restrict words, int64_t count,
                 float tau) {
  for (int64_t k = 0; k < count; ++k) p[words[k] & 0x7fffffffu] -= tau;
}

}  // namespace dtrain::bench
