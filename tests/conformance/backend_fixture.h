#pragma once
// The backend conformance suite's plumbing (docs/architecture/kernels.md, "Tests"): every backend
// this process can use (the CPU always; a GPU where one exists and the build has CUDA) runs the
// same operation on the same seeded random inputs, and the result is compared with a plain
// double-precision reference written here, next to the test, so that the CPU backend is checked
// too. Tolerances are per op and stated where they are used. TF32 is off for the whole suite.
//
// DTRAIN_REQUIRE_GPU=1 (set by tools/test.sh for the CUDA build) makes a process without a
// usable GPU exit 77 (skipped) instead of testing the CPU alone again.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"

namespace dtrain::conformance {

using kernels::Backend;

// The backends under test: "cpu" first, then one per GPU the process sees (device 0 only:
// the kernels are the same on every device).
std::vector<Backend*> backends_under_test();

// A buffer in a backend's memory, filled from and read back to host vectors.
class Buffer {
 public:
  Buffer(Backend& backend, int64_t n) : backend_(backend), n_(n), p_(backend.allocate(n)) {
    backend_.fill(p_, n, 0.0f);
  }
  Buffer(Backend& backend, const std::vector<float>& host) : Buffer(backend, int64_t(host.size())) {
    backend_.upload(p_, host.data(), n_);
  }
  // 32-bit words (codec bitmaps and sparse words) travel as floats of the same bits.
  static Buffer words(Backend& backend, const std::vector<uint32_t>& host) {
    std::vector<float> bits(host.size());
    if (!host.empty()) std::memcpy(bits.data(), host.data(), host.size() * 4);
    return Buffer(backend, bits);
  }
  Buffer(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : backend_(o.backend_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
  ~Buffer() {
    if (p_) backend_.release(p_);
  }
  float* get() { return p_; }
  uint32_t* word_ptr() { return reinterpret_cast<uint32_t*>(p_); }
  std::vector<float> host() const {
    std::vector<float> out(static_cast<size_t>(n_));
    backend_.download(out.data(), p_, n_);
    return out;
  }
  std::vector<uint32_t> host_words() const {
    const std::vector<float> f = host();
    std::vector<uint32_t> out(f.size());
    if (!f.empty()) std::memcpy(out.data(), f.data(), f.size() * 4);
    return out;
  }

 private:
  Backend& backend_;
  int64_t n_;
  float* p_;
};

inline std::vector<float> random_vector(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(engine);
  return v;
}

// |actual - expected| <= atol + rtol * |expected| everywhere; names the first element that is not.
inline void expect_close(const std::string& what, const std::vector<float>& actual,
                         const std::vector<double>& expected, double rtol, double atol) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(double(actual[i]) - expected[i]);
    if (!(diff <= atol + rtol * std::fabs(expected[i]))) {
      FAIL(what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]
                << " (tolerance " << atol << " + " << rtol << " relative)");
    }
  }
}

inline std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace dtrain::conformance
