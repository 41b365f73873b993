// The updaters' rules on the CPU (kernels/cpu/cpu_ops.h; the formulas are in core/updaters).
// The scalars are copied out of the argument struct first: a float stored through g could
// otherwise alias them, and the compiler would reload them every element and not vectorise.
// Every element is updated alone, so long vectors are shared among the OpenMP threads.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels::cpu {
namespace {

void sgd(float* __restrict g, int64_t n, float lr) {
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) g[i] *= lr;
}

// Nesterov momentum in DL4J's form: v' = mu v - lr g; u = mu v - (1 + mu) v'.
void nesterovs(float* __restrict g, float* __restrict v, int64_t n, float lr, float mu) {
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    const float v_old = v[i];
    const float v_new = mu * v_old - lr * g[i];
    v[i] = v_new;
    g[i] = mu * v_old - (1.0f + mu) * v_new;
  }
}

// Adam (vmax == v) and AMSGrad (vmax: the running maximum of v); `step` folds in the bias
// corrections. v and vmax may be the same vector, so neither is __restrict.
void adam(float* __restrict g, float* __restrict m, float* v, float* vmax, int64_t n,
          float step, float b1, float b2, float eps) {
  const bool ams = vmax != v;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    if (ams && v[i] > vmax[i]) vmax[i] = v[i];
    g[i] = step * m[i] / (std::sqrt(vmax[i]) + eps);
  }
}

// s = d s + (1 - d) g^2; u = lr g / (sqrt(s) + eps)
void rmsprop(float* __restrict g, float* __restrict s, int64_t n, float lr, float d, float eps) {
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    s[i] = d * s[i] + (1.0f - d) * g[i] * g[i];
    g[i] = lr * g[i] / (std::sqrt(s[i]) + eps);
  }
}

}  // namespace

void updater_step(const UpdaterArgs& a) {
  const int64_t n = a.n;
  switch (a.rule) {
    case UpdaterRule::kSgd:
      return sgd(a.g_to_u, n, a.scale);
    case UpdaterRule::kNesterovs:
      return nesterovs(a.g_to_u, a.state, n, a.scale, a.momentum);
    case UpdaterRule::kAdam:
      return adam(a.g_to_u, a.state, a.state + n, a.state + n, n, a.scale, a.beta1, a.beta2,
                  a.epsilon);
    case UpdaterRule::kAmsgrad:
      return adam(a.g_to_u, a.state, a.state + n, a.state + 2 * n, n, a.scale, a.beta1, a.beta2,
                  a.epsilon);
    case UpdaterRule::kRmsProp:
      return rmsprop(a.g_to_u, a.state, n, a.scale, a.rms_decay, a.epsilon);
  }
}

}  // namespace dtrain::kernels::cpu
