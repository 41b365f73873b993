// The blocked batch norm (blocked_batch_norm.h) built with -mavx512f.
#include "kernels/cpu/blocked_batch_norm.h"

namespace dtrain::kernels::cpu {

void blocked_batch_norm_avx512(const BatchNormArgs& a, bool forward) {
  run_blocked_batch_norm(a, forward);
}

}  // namespace dtrain::kernels::cpu
