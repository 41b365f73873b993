#pragma once
// Batch norm on channel-blocked activations (kernels/op_args.h; docs/architecture/kernels.md,
// "Layouts"), built once per instruction set: blocked_batch_norm_{base,avx2,avx512}.cc include
// this header under their own compiler flags and normalization.cc picks one at run time. The
// templates are in an unnamed namespace on purpose, so each of those files gets its own copy
// (one shared instantiation would be one instruction set for all).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

// The vectors below are wider than the base build's registers (x86-64-v2): GCC splits them,
// and warns that passing them between functions would change the ABI, which matters only across
// files; these never leave theirs.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dtrain::kernels::cpu {

// forward (true) or backward (false) of a blocked batch norm; a.block is 8 or 16.
using BlockedBatchNormPass = void (*)(const BatchNormArgs& a, bool forward);
void blocked_batch_norm_base(const BatchNormArgs& a, bool forward);
void blocked_batch_norm_avx2(const BatchNormArgs& a, bool forward);
void blocked_batch_norm_avx512(const BatchNormArgs& a, bool forward);

// Channel c's statistics after its sums (normalization.cc): the minibatch's mean and biased
// variance (training, also moving the running ones) or the running ones; saves mean and 1/std.
void settle_channel(const BatchNormArgs& a, int64_t c, double m, double v);

namespace {

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

  // The sums run in vectors of 4 lanes, a native register from AVX on (a B-lane vector of
  // doubles is wider than any register, and GCC spills it to memory): B / 4 of them side by side.
  typedef float F4 __attribute__((vector_size(4 * sizeof(float))));
  typedef double D4 __attribute__((vector_size(4 * sizeof(double))));
  static constexpr int64_t kQuads = B / 4;
  static F4 load4(const float* p) {
    F4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static D4 wide4(F4 v) { return __builtin_convertvector(v, D4); }
  static D pack(const D4* quads) {
    D v;
    std::memcpy(&v, quads, sizeof v);
    return v;
  }

  // K, the shift of the moments: each channel's first value (example 0, pixel 0).
  void shift(D4* k) const {
    for (int64_t j = 0; j < kQuads; ++j) k[j] = wide4(load4(a.x + offset(0) + 4 * j));
  }

  // Sums over examples [n0, n1) of x - K and (x - K)^2: one pass (the loop is memory-bound),
  // and E[(x-K)^2] - E[x-K]^2 does not cancel when the mean is large against the spread.
  void moment_sums(int64_t n0, int64_t n1, D* sum, D* sq) const {
    D4 k[kQuads], s[kQuads] = {}, q[kQuads] = {};
    shift(k);
    for (int64_t n = n0; n < n1; ++n)
      for (const float *x = a.x + offset(n), *end = x + a.plane * B; x < end; x += B)
        for (int64_t j = 0; j < kQuads; ++j) {
          const D4 d = wide4(load4(x + 4 * j)) - k[j];
          s[j] += d;
          q[j] += d * d;
        }
    *sum = pack(s);
    *sq = pack(q);
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
    F4 mean[kQuads], inv_std[kQuads];
    D4 g[kQuads] = {}, b[kQuads] = {};
    for (int64_t j = 0; j < kQuads; ++j) {
      mean[j] = load4(a.save_mean + c0 + 4 * j);
      inv_std[j] = load4(a.save_inv_std + c0 + 4 * j);
    }
    for (int64_t n = n0; n < n1; ++n) {
      const float *x = a.x + offset(n), *dy = a.dy + offset(n);
      for (int64_t i = 0; i < a.plane * B; i += B)
        for (int64_t j = 0; j < kQuads; ++j) {
          const F4 d = load4(dy + i + 4 * j);
          g[j] += wide4(d * ((load4(x + i + 4 * j) - mean[j]) * inv_std[j]));
          b[j] += wide4(d);
        }
    }
    *dgamma = pack(g);
    *dbeta = pack(b);
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
        k.moment_sums(n0, n1, s, q);
      });
    }
    const double count = double(a.batch * a.plane);
    for (int64_t b = 0; b < blocks; ++b) {
      D mean = {}, var = {};
      if (a.training) {
        typename Block::D4 k[Block::kQuads];
        block(b).shift(k);
        const D centred = sum[size_t(b * chunks)] / count;
        mean = Block::pack(k) + centred;
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

inline void run_blocked_batch_norm(const BatchNormArgs& a, bool forward) {
  if (a.block == 8) {
    if (forward) BlockedBatchNorm<8>{a}.forward();
    else BlockedBatchNorm<8>{a}.backward();
  } else {
    if (forward) BlockedBatchNorm<16>{a}.forward();
    else BlockedBatchNorm<16>{a}.backward();
  }
}

}  // namespace
}  // namespace dtrain::kernels::cpu
