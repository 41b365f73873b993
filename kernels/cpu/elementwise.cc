// Elementwise operations, activations, losses and dropout on the CPU (kernels/cpu/cpu_ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/random_bits.h"

namespace dtrain::kernels::cpu {
namespace {
float clamp_prob(float p) { return std::min(std::max(p, kProbFloor), 1.0f - kProbFloor); }

void softmax_rows(float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    const float max = *std::max_element(row, row + cols);
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += (row[c] = std::exp(row[c] - max));
    const float inv = 1.0f / sum;
    for (int64_t c = 0; c < cols; ++c) row[c] *= inv;
  }
}

// dz_c = a_c * (d_c - sum_k d_k a_k): the Jacobian-vector product of softmax.
void softmax_backward_rows(const float* a, float* d, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * cols;
    float* dr = d + r * cols;
    float dot = 0.0f;
    for (int64_t c = 0; c < cols; ++c) dot += dr[c] * ar[c];
    for (int64_t c = 0; c < cols; ++c) dr[c] = ar[c] * (dr[c] - dot);
  }
}

double loss_term(Loss loss, float a, float y, int64_t cols) {
  switch (loss) {
    case Loss::kMcxent:
      return y != 0.0f ? -double(y) * std::log(clamp_prob(a)) : 0.0;
    case Loss::kXent:
      return -(double(y) * std::log(clamp_prob(a)) + (1.0 - y) * std::log(1.0 - clamp_prob(a)));
    case Loss::kMse:
      return (double(a) - y) * (double(a) - y) / double(cols);
  }
  return 0.0;
}

// d(loss term)/d(a) when the loss is not fused with its activation.
float loss_derivative(Loss loss, float a, float y, int64_t cols) {
  switch (loss) {
    case Loss::kMcxent:
      return -y / clamp_prob(a);
    case Loss::kXent: {
      const float p = clamp_prob(a);
      return (p - y) / (p * (1.0f - p));
    }
    case Loss::kMse:
      return 2.0f * (a - y) / static_cast<float>(cols);
  }
  return 0.0f;
}
}  // namespace

void add_row_vector(float* __restrict x, const float* __restrict v, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += v[c];
}

void column_sums(const float* x, int64_t rows, int64_t cols, float* sums) {
  std::fill(sums, sums + cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) sums[c] += x[r * cols + c];
}

void axpy(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void multiply(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void scale(float* __restrict x, int64_t n, float alpha) {
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

// Four running sums (element i goes to sum i % 4), added at the end: four independent chains
// of additions instead of one, which the compiler pairs into vector lanes. The order is fixed,
// so the result is the same on every machine and every run.
double sum_squares(const float* x, int64_t n) {
  double lane[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) lane[k] += double(x[i + k]) * double(x[i + k]);
  for (; i < n; ++i) lane[i % 4] += double(x[i]) * double(x[i]);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

void clear_sent_sparse(const uint32_t* words, int64_t count, float* x) {
  for (int64_t k = 0; k < count; ++k) x[words[k] & 0x7FFFFFFFu] = 0.0f;
}

void clear_sent_bitmap(const uint32_t* bitmap, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i)
    if ((bitmap[i / 16] >> (2 * (i % 16))) & 3u) x[i] = 0.0f;
}

void activation_forward(Activation activation, float* x, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  switch (activation) {
    case Activation::kIdentity:
      return;
    case Activation::kRelu:
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return;
    case Activation::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : kLeakyReluSlope * x[i];
      return;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      return;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
      return;
    case Activation::kSoftmax:
      softmax_rows(x, rows, cols);
      return;
  }
}

void activation_backward(Activation activation, const float* a, float* d, int64_t rows,
                         int64_t cols) {
  const int64_t n = rows * cols;
  switch (activation) {
    case Activation::kIdentity:
      return;
    case Activation::kRelu:
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? d[i] : 0.0f;
      return;
    case Activation::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? d[i] : kLeakyReluSlope * d[i];
      return;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) d[i] *= 1.0f - a[i] * a[i];
      return;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) d[i] *= a[i] * (1.0f - a[i]);
      return;
    case Activation::kSoftmax:
      softmax_backward_rows(a, d, rows, cols);
      return;
  }
}

// Overlapping ranges are moved as memmove does; disjoint long ones are copied by every thread.
void copy(float* dst, const float* src, int64_t n) {
  if (n <= 0 || dst == src) return;
  const bool disjoint = dst + n <= src || src + n <= dst;
  if (!disjoint || n < kParallelFrom) {
    std::memmove(dst, src, sizeof(float) * size_t(n));
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

void activation_backward_to(Activation activation, const float* __restrict a,
                            const float* __restrict dout, float* __restrict dz, int64_t rows,
                            int64_t cols) {
  const int64_t n = rows * cols;
  switch (activation) {
    case Activation::kRelu:
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i) {
        const float g = dout[i];  // read unconditionally, so the loop vectorizes to a select
        dz[i] = a[i] > 0.0f ? g : 0.0f;
      }
      return;
    case Activation::kIdentity:
      return copy(dz, dout, n);
    default:  // the others as activation_backward does them, on a copy
      copy(dz, dout, n);
      activation_backward(activation, a, dz, rows, cols);
  }
}

double loss(const LossArgs& args) {
  const int64_t n = args.rows * args.cols;
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += loss_term(args.loss, args.a[i], args.targets[i], args.cols);
  if (args.dz) {
    const float inv_rows = 1.0f / static_cast<float>(args.rows);
    const bool fused = (args.loss == Loss::kMcxent && args.activation == Activation::kSoftmax) ||
                       (args.loss == Loss::kXent && args.activation == Activation::kSigmoid);
    for (int64_t i = 0; i < n; ++i)
      args.dz[i] = fused ? (args.a[i] - args.targets[i]) * inv_rows
                         : loss_derivative(args.loss, args.a[i], args.targets[i], args.cols) *
                               inv_rows;
    if (!fused) activation_backward(args.activation, args.a, args.dz, args.rows, args.cols);
  }
  return total / static_cast<double>(args.rows);
}

void dropout_forward(const float* in, float* out, float* mask, int64_t n, float rate,
                     uint64_t seed) {
  const float keep_scale = 1.0f / (1.0f - rate);
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = uniform_at(seed, uint64_t(i)) >= rate ? keep_scale : 0.0f;
    out[i] = in[i] * mask[i];
  }
}

}  // namespace dtrain::kernels::cpu
