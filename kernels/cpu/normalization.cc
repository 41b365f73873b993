// Batch normalisation and global pooling on the CPU (kernels/cpu/cpu_ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

// The blocked batch norm's vectors are wider than this build's registers (x86-64-v2): GCC
// splits them, and warns that passing them between functions would change the ABI, which only
// matters across files; these never leave this one.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dtrain::kernels::cpu {
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

// Settles channel c's statistics: the minibatch's mean and biased variance (training, also
// moving the running ones) or the running ones; saves mean and 1/std for backward.
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

// The blocked layout (op_args.h): B channels side by side, so a block of channels is processed
// together, one vector lane per channel (a channel alone would be read with stride B), in GCC
// vector types that compile to whatever registers the target has. Channel c0 + k of example n,
// pixel p is at ((n * C/B + c0/B) * plane + p) * B + k. Sums are in double, as for NCHW.
typedef float F8 __attribute__((vector_size(8 * sizeof(float))));
typedef double D8 __attribute__((vector_size(8 * sizeof(double))));
typedef float F16 __attribute__((vector_size(16 * sizeof(float))));
typedef double D16 __attribute__((vector_size(16 * sizeof(double))));
template <int64_t B> struct Lanes;
template <> struct Lanes<8> { using F = F8; using D = D8; };
template <> struct Lanes<16> { using F = F16; using D = D16; };

template <int64_t B>
struct ChannelBlock {
  using F = typename Lanes<B>::F;
  using D = typename Lanes<B>::D;

  const BatchNormArgs& a;
  int64_t c0;

  int64_t offset(int64_t n) const { return (n * (a.channels / B) + c0 / B) * a.plane * B; }
  static F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
  F channels(const float* per_channel) const { return load(per_channel + c0); }
  static D wide(F v) { return __builtin_convertvector(v, D); }

  // Sums over examples [n0, n1) of x - K and (x - K)^2, K (`shift`) each channel's first value:
  // one pass (the loop is memory-bound), and E[(x-K)^2] - E[x-K]^2 does not cancel when the
  // mean is large against the spread.
  void moment_sums(int64_t n0, int64_t n1, D shift, D* sum, D* sq) const {
    D s = {}, q = {};
    for (int64_t n = n0; n < n1; ++n)
      for (const float *x = a.x + offset(n), *end = x + a.plane * B; x < end; x += B) {
        const D d = wide(load(x)) - shift;
        s += d;
        q += d * d;
      }
    *sum = s;
    *sq = q;
  }

  void normalize(int64_t n) const {
    const F mean = channels(a.save_mean), inv_std = channels(a.save_inv_std),
            gamma = channels(a.gamma), beta = channels(a.beta);
    const float* x = a.x + offset(n);
    float* y = a.y + offset(n);
    for (int64_t i = 0; i < a.plane * B; i += B)
      store(y + i, gamma * ((load(x + i) - mean) * inv_std) + beta);
  }

  void gradient_sums(int64_t n0, int64_t n1, D* dgamma, D* dbeta) const {
    const F mean = channels(a.save_mean), inv_std = channels(a.save_inv_std);
    D g = {}, b = {};
    for (int64_t n = n0; n < n1; ++n) {
      const float *x = a.x + offset(n), *dy = a.dy + offset(n);
      for (int64_t i = 0; i < a.plane * B; i += B) {
        const F d = load(dy + i);
        g += wide(d * ((load(x + i) - mean) * inv_std));
        b += wide(d);
      }
    }
    *dgamma = g;
    *dbeta = b;
  }

  // dx of example n, from the saved statistics and the float dgamma and dbeta.
  void gradient(int64_t n) const {
    const float count = static_cast<float>(a.batch * a.plane);
    const F mean = channels(a.save_mean), inv_std = channels(a.save_inv_std);
    const F scale = channels(a.gamma) * inv_std;
    const F mean_dy = channels(a.dbeta) / count, mean_dy_xhat = channels(a.dgamma) / count;
    const float *x = a.x + offset(n), *dy = a.dy + offset(n);
    float* dx = a.dx + offset(n);
    for (int64_t i = 0; i < a.plane * B; i += B) {
      const F d = load(dy + i);
      if (!a.training) {
        store(dx + i, scale * d);
        continue;
      }
      const F xhat = (load(x + i) - mean) * inv_std;
      store(dx + i, scale * (d - mean_dy - xhat * mean_dy_xhat));
    }
  }
};

// Batch norm on blocked activations. A layer may have a single block of channels (16 channels
// with AVX-512), so the work is shared over (block, example) pairs, and sums over fixed chunks
// of kChunk examples that are then added in chunk order: the result does not depend on the
// number of threads.
template <int64_t B>
struct BlockedBatchNorm {
  using Block = ChannelBlock<B>;
  using D = typename Block::D;
  static constexpr int64_t kChunk = 4;

  const BatchNormArgs& a;
  int64_t blocks = a.channels / B, chunks = (a.batch + kChunk - 1) / kChunk;
  bool parallel = a.batch * a.channels * a.plane >= kParallelFrom;

  Block block(int64_t b) const { return Block{a, b * B}; }
  int64_t chunk_end(int64_t c) const { return std::min(a.batch, (c + 1) * kChunk); }

  template <typename PerExample>
  void for_examples(PerExample f) const {
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t n = 0; n < a.batch; ++n) f(block(b), n);
  }

  // Fills first[b * chunks + c] and second[...] with per-chunk sums, then adds them per block.
  template <typename ChunkSums>
  void sum_chunks(std::vector<D>& first, std::vector<D>& second, ChunkSums f) const {
    first.assign(size_t(blocks * chunks), D{});
    second.assign(size_t(blocks * chunks), D{});
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t c = 0; c < chunks; ++c)
        f(block(b), c * kChunk, chunk_end(c), &first[size_t(b * chunks + c)],
          &second[size_t(b * chunks + c)]);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t c = 1; c < chunks; ++c) {
        first[size_t(b * chunks)] += first[size_t(b * chunks + c)];
        second[size_t(b * chunks)] += second[size_t(b * chunks + c)];
      }
  }

  void forward() const {
    std::vector<D> sum, sq;
    if (a.training) {
      sum_chunks(sum, sq, [](const Block& k, int64_t n0, int64_t n1, D* s, D* q) {
        k.moment_sums(n0, n1, Block::wide(Block::load(k.a.x + k.offset(0))), s, q);
      });
    }
    const double count = double(a.batch * a.plane);
    for (int64_t b = 0; b < blocks; ++b) {
      D mean = {}, var = {};
      if (a.training) {
        const D shift = Block::wide(Block::load(a.x + block(b).offset(0)));
        const D centred = sum[size_t(b * chunks)] / count;
        mean = shift + centred;
        var = sq[size_t(b * chunks)] / count - centred * centred;
      }
      for (int64_t k = 0; k < B; ++k) settle_channel(a, b * B + k, mean[k], var[k]);
    }
    for_examples([](const Block& k, int64_t n) { k.normalize(n); });
  }

  void backward() const {
    std::vector<D> dgamma, dbeta;
    sum_chunks(dgamma, dbeta, [](const Block& k, int64_t n0, int64_t n1, D* g, D* b) {
      k.gradient_sums(n0, n1, g, b);
    });
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t k = 0; k < B; ++k) {
        a.dgamma[b * B + k] = static_cast<float>(dgamma[size_t(b * chunks)][k]);
        a.dbeta[b * B + k] = static_cast<float>(dbeta[size_t(b * chunks)][k]);
      }
    if (a.dx) for_examples([](const Block& k, int64_t n) { k.gradient(n); });
  }
};

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
}  // namespace

void batch_norm_forward(const BatchNormArgs& a) {
  check_block(a);
  if (a.block == 8) return BlockedBatchNorm<8>{a}.forward();
  if (a.block == 16) return BlockedBatchNorm<16>{a}.forward();
  for_channels(a, forward_channel);
}

void batch_norm_backward(const BatchNormArgs& a) {
  check_block(a);
  if (a.block == 8) return BlockedBatchNorm<8>{a}.backward();
  if (a.block == 16) return BlockedBatchNorm<16>{a}.backward();
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
