#pragma once
// The update codec on an NVIDIA GPU: the same encode and apply as kernels/cpu/codec and the
// reference in core/codec, bit for bit, on device memory. The sparse words come out in index
// order through a prefix scan over per-tile counts (CUB), so a GPU and a CPU worker produce
// identical messages from identical inputs. Built only with `bazel build --config=cuda`.
#include <cstdint>
#include <string>

namespace dtrain::kernels::cuda {

// True when a CUDA device can be used; otherwise `why` says what is missing.
bool device_available(std::string* why);

struct DeviceEncodeResult {
  int64_t count = 0;
  int64_t nonfinite_index = -1;
  double residual_sum_squares = 0;
  bool sparse = false;  // the sparse words were written (count <= n / 16)
};

// Owns the scratch memory and stream for one worker's codec. All array arguments are device
// pointers; every call returns once the GPU has finished.
class CudaCodec {
 public:
  explicit CudaCodec(int64_t max_n);
  ~CudaCodec();
  CudaCodec(const CudaCodec&) = delete;
  CudaCodec& operator=(const CudaCodec&) = delete;

  // r += u; elements with |r| >= tau are marked in `bitmap` ((n + 15) / 16 words) and get
  // r -= tau * sign(r); clip > 0 clamps r to [-clip, clip]. When count <= n / 16 the sparse
  // words (n / 16 words at most) are written in index order. n <= max_n.
  DeviceEncodeResult encode(float* residual, const float* update, int64_t n, float tau,
                            float clip, uint32_t* bitmap, uint32_t* sparse);
  // params -= decoded
  void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau, float* params);
  void apply_sparse(const uint32_t* words, int64_t count, float tau, float* params);

  // The memory-streaming baseline for benchmarks: r[i] += u[i].
  void stream_add(float* r, const float* u, int64_t n);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace dtrain::kernels::cuda
