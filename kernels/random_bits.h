#pragma once
// Counter-based random numbers: the value at index i depends only on (seed, i), so a dropout
// mask is the same on every backend and in any order of evaluation (a CPU and a GPU worker given
// the same seed drop the same units). Host and device code (nvcc) share this one definition.
#include <cstdint>

#if defined(__CUDACC__)
#define DTRAIN_HOST_DEVICE __host__ __device__
#else
#define DTRAIN_HOST_DEVICE
#endif

namespace dtrain::kernels {

// splitmix64's finaliser over seed and index: nearby indices give unrelated values.
DTRAIN_HOST_DEVICE inline uint64_t random_bits_at(uint64_t seed, uint64_t index) {
  uint64_t x = seed + (index + 1) * 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 bits: exact in a float.
DTRAIN_HOST_DEVICE inline float uniform_at(uint64_t seed, uint64_t index) {
  return float(random_bits_at(seed, index) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace dtrain::kernels
