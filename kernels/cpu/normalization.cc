// Batch normalisation and global pooling on the CPU (kernels/cpu/cpu_ops.h).
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels::cpu {
namespace {
// Mean and biased variance of channel c over the batch, in double.
void channel_moments(const BatchNormArgs& a, int64_t c, double* mean, double* var) {
  const int64_t stride = a.channels * a.plane;
  const double count = double(a.batch * a.plane);
  double sum = 0.0, sq = 0.0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* x = a.x + b * stride + c * a.plane;
    for (int64_t j = 0; j < a.plane; ++j) sum += x[j];
  }
  *mean = sum / count;
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* x = a.x + b * stride + c * a.plane;
    for (int64_t j = 0; j < a.plane; ++j) sq += (x[j] - *mean) * (x[j] - *mean);
  }
  *var = sq / count;
}
}  // namespace

void batch_norm_forward(const BatchNormArgs& a) {
  const int64_t stride = a.channels * a.plane;
  const int64_t count = a.batch * a.plane;
  for (int64_t c = 0; c < a.channels; ++c) {
    float mean, var;
    if (a.training) {
      double m, v;
      channel_moments(a, c, &m, &v);
      mean = float(m);
      var = float(v);
      const double unbiased = count > 1 ? v * double(count) / double(count - 1) : v;
      a.running_mean[c] = a.decay * a.running_mean[c] + (1.0f - a.decay) * mean;
      a.running_var[c] = a.decay * a.running_var[c] + (1.0f - a.decay) * float(unbiased);
    } else {
      mean = a.running_mean[c];
      var = a.running_var[c];
    }
    const float inv_std = 1.0f / std::sqrt(var + a.eps);
    a.save_mean[c] = mean;
    a.save_inv_std[c] = inv_std;
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t base = b * stride + c * a.plane;
      for (int64_t j = 0; j < a.plane; ++j)
        a.y[base + j] = a.gamma[c] * ((a.x[base + j] - mean) * inv_std) + a.beta[c];
    }
  }
}

void batch_norm_backward(const BatchNormArgs& a) {
  const int64_t stride = a.channels * a.plane;
  const float count = static_cast<float>(a.batch * a.plane);
  for (int64_t c = 0; c < a.channels; ++c) {
    const float mean = a.save_mean[c], inv_std = a.save_inv_std[c];
    double dgamma = 0.0, dbeta = 0.0;
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t base = b * stride + c * a.plane;
      for (int64_t j = 0; j < a.plane; ++j) {
        dgamma += a.dy[base + j] * ((a.x[base + j] - mean) * inv_std);
        dbeta += a.dy[base + j];
      }
    }
    a.dgamma[c] = static_cast<float>(dgamma);
    a.dbeta[c] = static_cast<float>(dbeta);
    if (!a.dx) continue;
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
