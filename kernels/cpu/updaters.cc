// The updaters' rules on the CPU (kernels/cpu/cpu_ops.h; the formulas are in core/updaters).
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels::cpu {

void updater_step(const UpdaterArgs& a) {
  float* g = a.g_to_u;
  const int64_t n = a.n;
  switch (a.rule) {
    case UpdaterRule::kSgd:
      for (int64_t i = 0; i < n; ++i) g[i] *= a.scale;
      return;
    case UpdaterRule::kNesterovs: {
      float* v = a.state;
      for (int64_t i = 0; i < n; ++i) {
        const float v_old = v[i];
        const float v_new = a.momentum * v_old - a.scale * g[i];
        v[i] = v_new;
        g[i] = a.momentum * v_old - (1.0f + a.momentum) * v_new;
      }
      return;
    }
    case UpdaterRule::kAdam:
    case UpdaterRule::kAmsgrad: {
      float* m = a.state;
      float* v = m + n;
      float* vmax = a.rule == UpdaterRule::kAmsgrad ? v + n : v;
      for (int64_t i = 0; i < n; ++i) {
        m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g[i];
        v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g[i] * g[i];
        if (vmax != v && v[i] > vmax[i]) vmax[i] = v[i];
        g[i] = a.scale * m[i] / (std::sqrt(vmax[i]) + a.epsilon);
      }
      return;
    }
    case UpdaterRule::kRmsProp: {
      float* s = a.state;
      for (int64_t i = 0; i < n; ++i) {
        s[i] = a.rms_decay * s[i] + (1.0f - a.rms_decay) * g[i] * g[i];
        g[i] = a.scale * g[i] / (std::sqrt(s[i]) + a.epsilon);
      }
      return;
    }
  }
}

}  // namespace dtrain::kernels::cpu
