#pragma once
// The memory-streaming baselines the kernel benchmarks compare with, in a file of their own so
// they are compiled as plain loops at -O3 -march=native (the fastest honest reference for a
// memory-bound kernel; Bazel's opt mode is -O2, at which GCC leaves such a loop scalar).
#include <cstdint>

namespace dtrain::bench {

// r[i] += u[i]: the three streams an encode needs (read r, read u, write r).
void stream_add(float* __restrict r, const float* __restrict u, int64_t n);

// p[words[k] & 0x7fffffff] -= tau: a sparse message's memory traffic (read the words, update
// the parameters they name) without decoding the sign, for a sparse decode/apply.
void scatter_sub(float* __restrict p, const uint32_t* __restrict words, int64_t count, float tau);

}  // namespace dtrain::bench
