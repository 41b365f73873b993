// Batch normalisation and global pooling on the CPU (kernels/cpu/cpu_ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/blocked_batch_norm.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn_context.h"

namespace dtrain::kernels::cpu {

// blocked_batch_norm.h; the plain path's too.
void settle_channel(const BatchNormArgs& a, int64_t c, double m, double v) {
  float mean, var;
  if (a.training) {
    const int64_t count = a.batch * a.plane;
    mean = float(m);
    var = float(v);
    const double unbiased = count > 1 ? v * double(count) / double(count - 1) : v;
    a.running_mean[c] = a.decay * a.running_mean[c] + (1.0f - a.decay) * mean;
    a.running_var[c] = a.decay * a.running_var[c] + (1.0f - a.decay) * float(unbiased);
  } else {
    mean = a.running_mean[c];
    var = a.running_var[c];
  }
  a.save_mean[c] = mean;
  a.save_inv_std[c] = 1.0f / std::sqrt(var + a.eps);
}

namespace {
// Per-channel sums in double over kLanes interleaved partial sums, added in a fixed order at the
// end: with one double accumulator every add waited for the previous one (batch norm was 15% of
// a ResNet-20 step on the CPU, docs/performance.md, "Where a CNN step's time goes"); independent
// lanes vectorize. The order is the same on every machine, so results stay reproducible.
constexpr int64_t kLanes = 8;

struct LaneSums {
  double lane[kLanes] = {};
  // Adds term(j) for j in [0, n) to the lanes, j to lane j % kLanes.
  template <typename Term>
  void add(int64_t n, Term term) {
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) lane[k] += double(term(j + k));
    for (int64_t k = 0; j < n; ++j, ++k) lane[k] += double(term(j));
  }
  double total() const {
    double t = 0.0;
    for (int64_t k = 0; k < kLanes; ++k) t += lane[k];
    return t;
  }
};

// Mean and biased variance of channel c over the batch, in double.
void channel_moments(const BatchNormArgs& a, int64_t c, double* mean, double* var) {
  const int64_t stride = a.channels * a.plane;
  const double count = double(a.batch * a.plane);
  LaneSums sum, sq;
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* x = a.x + b * stride + c * a.plane;
    sum.add(a.plane, [x](int64_t j) { return x[j]; });
  }
  *mean = sum.total() / count;
  const double m = *mean;
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* x = a.x + b * stride + c * a.plane;
    sq.add(a.plane, [x, m](int64_t j) { return (x[j] - m) * (x[j] - m); });
  }
  *var = sq.total() / count;
}

// dx of channel c from the sums of its gradient, dgamma and dbeta.
void normalize_gradient(const BatchNormArgs& a, int64_t c, double dgamma, double dbeta) {
  const int64_t stride = a.channels * a.plane;
  const float count = static_cast<float>(a.batch * a.plane);
  const float mean = a.save_mean[c], inv_std = a.save_inv_std[c];
  const float scale = a.gamma[c] * inv_std;
  const float mean_dy = static_cast<float>(dbeta) / count;
  const float mean_dy_xhat = static_cast<float>(dgamma) / count;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * stride + c * a.plane;
    for (int64_t j = 0; j < a.plane; ++j) {
      const float xhat = (a.x[base + j] - mean) * inv_std;
      a.dx[base + j] = a.training ? scale * (a.dy[base + j] - mean_dy - xhat * mean_dy_xhat)
                                  : scale * a.dy[base + j];
    }
  }
}

void forward_channel(const BatchNormArgs& a, int64_t c) {
  const int64_t stride = a.channels * a.plane;
  double m = 0, v = 0;
  if (a.training) channel_moments(a, c, &m, &v);
  settle_channel(a, c, m, v);
  const float mean = a.save_mean[c], inv_std = a.save_inv_std[c];
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t base = b * stride + c * a.plane;
    for (int64_t j = 0; j < a.plane; ++j)
      a.y[base + j] = a.gamma[c] * ((a.x[base + j] - mean) * inv_std) + a.beta[c];
  }
}

void backward_channel(const BatchNormArgs& a, int64_t c) {
  const int64_t stride = a.channels * a.plane;
  const float mean = a.save_mean[c], inv_std = a.save_inv_std[c];
  LaneSums dgamma_sum, dbeta_sum;
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* x = a.x + b * stride + c * a.plane;
    const float* dy = a.dy + b * stride + c * a.plane;
    dgamma_sum.add(a.plane, [=](int64_t j) { return dy[j] * ((x[j] - mean) * inv_std); });
    dbeta_sum.add(a.plane, [=](int64_t j) { return dy[j]; });
  }
  const double dgamma = dgamma_sum.total(), dbeta = dbeta_sum.total();
  a.dgamma[c] = static_cast<float>(dgamma);
  a.dbeta[c] = static_cast<float>(dbeta);
  if (a.dx) normalize_gradient(a, c, dgamma, dbeta);
}

void check_block(const BatchNormArgs& a) {
  if (a.block != 0 && ((a.block != 8 && a.block != 16) || a.channels % a.block != 0))
    throw std::invalid_argument("no batch norm of " + std::to_string(a.channels) +
                                " channels in blocks of " + std::to_string(a.block));
}

// Channels are independent: each thread takes a share (the same result on any count).
template <typename PerChannel>
void for_channels(const BatchNormArgs& a, PerChannel per_channel) {
#pragma omp parallel for schedule(static) if (a.batch * a.channels * a.plane >= kParallelFrom)
  for (int64_t c = 0; c < a.channels; ++c) per_channel(a, c);
}

// The blocked batch norm built for the widest instruction set oneDNN uses here: the same bits
// from each (no FMA contraction; IEEE vector operations), fewer instructions and spills.
BlockedBatchNormPass blocked_pass() {
  static const BlockedBatchNormPass pass = uses_avx512() ? blocked_batch_norm_avx512
                                           : uses_avx2() ? blocked_batch_norm_avx2
                                                         : blocked_batch_norm_base;
  return pass;
}

}  // namespace

void batch_norm_forward(const BatchNormArgs& a) {
  check_block(a);
  if (a.block != 0) return blocked_pass()(a, true);
  for_channels(a, forward_channel);
}

void batch_norm_backward(const BatchNormArgs& a) {
  check_block(a);
  if (a.block != 0) return blocked_pass()(a, false);
  for_channels(a, backward_channel);
}

void global_pool_forward(const float* in, float* out, int64_t planes, int64_t plane, bool max) {
  for (int64_t i = 0; i < planes; ++i) {
    const float* p = in + i * plane;
    if (max) {
      float best = p[0];
      for (int64_t j = 1; j < plane; ++j) best = p[j] > best ? p[j] : best;
      out[i] = best;
    } else {
      float sum = 0.0f;
      for (int64_t j = 0; j < plane; ++j) sum += p[j];
      out[i] = sum / static_cast<float>(plane);
    }
  }
}

void global_pool_backward(const float* in, const float* dout, float* din, int64_t planes,
                          int64_t plane, bool max) {
  for (int64_t i = 0; i < planes; ++i) {
    const float* p = in + i * plane;
    float* d = din + i * plane;
    if (max) {
      int64_t best = 0;
      for (int64_t j = 1; j < plane; ++j)
        if (p[j] > p[best]) best = j;
      for (int64_t j = 0; j < plane; ++j) d[j] = 0.0f;
      d[best] = dout[i];
    } else {
      const float g = dout[i] / static_cast<float>(plane);
      for (int64_t j = 0; j < plane; ++j) d[j] = g;
    }
  }
}

}  // namespace dtrain::kernels::cpu
