// The blocked batch norm (blocked_batch_norm.h) built for the base instruction set.
#include "kernels/cpu/blocked_batch_norm.h"

namespace dtrain::kernels::cpu {

void blocked_batch_norm_base(const BatchNormArgs& a, bool forward) {
  run_blocked_batch_norm(a, forward);
}

}  // namespace dtrain::kernels::cpu
