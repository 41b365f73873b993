#pragma once
// Timing helpers shared by the C++ benchmarks: medians, because the build machines are shared
// and noisy.
#include <algorithm>
#include <chrono>
#include <vector>

namespace dtrain::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Wall-clock seconds one call of f takes.
template <class F>
double time_once(F&& f) {
  const auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace dtrain::bench
