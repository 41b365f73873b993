// The updaters' rules on the GPU (kernels/cuda/cuda_ops.h; formulas in kernels/cpu/updaters.cc).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace dtrain::kernels::cuda {
namespace {

__global__ void updater_kernel(UpdaterArgs a) {
  const int64_t n = a.n;
  float* g = a.g_to_u;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    switch (a.rule) {
      case UpdaterRule::kSgd:
        g[i] *= a.scale;
        break;
      case UpdaterRule::kNesterovs: {
        const float v_old = a.state[i];
        const float v_new = a.momentum * v_old - a.scale * g[i];
        a.state[i] = v_new;
        g[i] = a.momentum * v_old - (1.f + a.momentum) * v_new;
        break;
      }
      case UpdaterRule::kAdam:
      case UpdaterRule::kAmsgrad: {
        float* m = a.state;
        float* v = m + n;
        const float mi = m[i] = a.beta1 * m[i] + (1.f - a.beta1) * g[i];
        const float vi = v[i] = a.beta2 * v[i] + (1.f - a.beta2) * g[i] * g[i];
        float denom = vi;
        if (a.rule == UpdaterRule::kAmsgrad) {
          float* vmax = v + n;
          if (vi > vmax[i]) vmax[i] = vi;
          denom = vmax[i];
        }
        g[i] = a.scale * mi / (sqrtf(denom) + a.epsilon);
        break;
      }
      case UpdaterRule::kRmsProp: {
        const float s = a.state[i] = a.rms_decay * a.state[i] + (1.f - a.rms_decay) * g[i] * g[i];
        g[i] = a.scale * g[i] / (sqrtf(s) + a.epsilon);
        break;
      }
    }
  }
}

}  // namespace

void updater_step(cudaStream_t s, const UpdaterArgs& args) {
  if (args.n <= 0) return;
  updater_kernel<<<grid_for(args.n), 256, 0, s>>>(args);
  DTRAIN_CUDA_LAUNCHED();
}

}  // namespace dtrain::kernels::cuda
