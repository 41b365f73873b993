// Codec throughput on one core: encode (r += u, count, encode, subtract) and decode/apply,
// next to a memory-streaming baseline (r[i] += u[i] over the same arrays, a plain loop built
// at -O3 -march=native: stream_baseline.h) measured in the same run. Prints medians; ratios are baseline time / codec time (1.0 = memory speed).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/codec/codec_engine.h"
#include "core/codec/reference_codec.h"
#include "tools/bench/bench_timing.h"
#include "tools/bench/stream_baseline.h"

using dtrain::bench::median;
using dtrain::bench::scatter_sub;
using dtrain::bench::stream_add;
using dtrain::bench::time_once;

namespace {

using Clock = std::chrono::steady_clock;
using dtrain::core::CodecEngine;
using dtrain::core::EncodedMessage;
using dtrain::core::Encoding;

// tau for which about `density` of |r + u| reach it (estimated on a sample).
float tau_for(const std::vector<float>& r, const std::vector<float>& u, double density) {
  const int64_t n = static_cast<int64_t>(r.size());
  const int64_t stride = std::max<int64_t>(1, n / 1000000);
  std::vector<float> m;
  for (int64_t i = 0; i < n; i += stride) m.push_back(std::fabs(r[i] + u[i]));
  const int64_t k = std::min<int64_t>(m.size() - 1, static_cast<int64_t>(density * m.size()));
  std::nth_element(m.begin(), m.begin() + (m.size() - 1 - k), m.end());
  return m[m.size() - 1 - k];
}

std::string size_name(int64_t n) {
  return n % 1000000 == 0 ? std::to_string(n / 1000000) + "M" : std::to_string(n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrain codec benchmark: encode and decode/apply vs memory streaming, one core"};
  std::vector<int64_t> sizes{1000000, 10000000, 64000000};
  std::vector<std::string> kernels;
  int repeats = 7;
  app.add_option("--sizes", sizes, "vector lengths (floats)");
  app.add_option("--kernel", kernels, "avx512, avx2, reference (default: every SIMD kernel)");
  app.add_option("--repeats", repeats, "timed repetitions per row (median reported)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (kernels.empty())
    for (const std::string& k : CodecEngine::available())
      if (k != "reference") kernels.push_back(k);

  std::printf("%-9s %-5s %-9s %9s %8s %7s | %8s %7s %6s | %8s %7s %6s | %8s %8s\n", "kernel",
              "N", "density", "sent", "ratio", "enc", "Gelem/s", "GB/s", "x base", "Gelem/s",
              "GB/s", "x base", "base", "base GB/s");
  std::printf("%-9s %-5s %-9s %9s %8s %7s | %-23s | %-23s | %-17s\n", "", "", "(asked)", "",
              "(dense/", "", "encode incl. residual", "decode/apply (x its own", "r += u");
  std::printf("%-9s %-5s %-9s %9s %8s %7s | %-23s | %-23s |\n", "", "", "", "", "msg)", "",
              "x base: vs r += u", "base: scatter or p -= u)");
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t n : sizes) {
    std::vector<float> r0(n), u(n), r(n), p0(n), p(n);
    for (int64_t i = 0; i < n; ++i) {
      r0[i] = 0.3f * normal(rng);
      u[i] = normal(rng);
      p0[i] = 0.1f * normal(rng);
    }
    const double dense_bytes = 4.0 * n;
    for (const std::string& name : kernels) {
      const CodecEngine& engine = CodecEngine::get(name);
      for (double density : {1e-4, 1e-3, 1e-2, 0.25}) {
        const float tau = tau_for(r0, u, density);
        std::vector<double> base_t, enc_t, dec_t, dec_base_t;
        CodecEngine::Scratch scratch;
        EncodedMessage m;
        for (int rep = 0; rep < repeats; ++rep) {
          std::memcpy(r.data(), r0.data(), n * sizeof(float));
          base_t.push_back(time_once([&] { stream_add(r.data(), u.data(), n); }));
          std::memcpy(r.data(), r0.data(), n * sizeof(float));
          enc_t.push_back(time_once(
              [&] { m = engine.encode_segment(r.data(), u.data(), n, tau, 0.f, nullptr, scratch); }));
          std::memcpy(p.data(), p0.data(), n * sizeof(float));
          dec_t.push_back(time_once([&] { engine.apply(m, p.data()); }));
          // The decode's own baseline: the same parameter traffic as plain loops (a scatter
          // over the sent indices for a sparse message, a dense p -= u for a bitmap).
          std::memcpy(p.data(), p0.data(), n * sizeof(float));
          dec_base_t.push_back(time_once([&] {
            if (m.encoding == Encoding::kSparse)
              scatter_sub(p.data(), m.words.data(), int64_t(m.words.size()), tau);
            else
              stream_add(p.data(), u.data(), n);
          }));
        }
        const double tb = median(base_t), te = median(enc_t), td = median(dec_t);
        const double tdb = median(dec_base_t);
        // Bytes each really moves: encode reads r and u and writes r and the bitmap; apply
        // touches the payload and, per sent element (sparse) or per element (bitmap), params.
        const double enc_bytes = 12.0 * n + n / 4.0 + m.payload_bytes();
        const double dec_bytes = m.encoding == Encoding::kSparse
                                     ? m.payload_bytes() + 8.0 * m.count
                                     : m.payload_bytes() + 8.0 * n;
        char dens[16];
        std::snprintf(dens, sizeof dens, "%s", density == 0.25 ? "bitmap" : "");
        if (density != 0.25) std::snprintf(dens, sizeof dens, "%.0e", density);
        std::printf("%-9s %-5s %-9s %9lld %8.1f %7s | %8.2f %7.1f %6.2f | %8.2f %7.1f %6.2f | %8.2f %8.1f\n",
                    name.c_str(), size_name(n).c_str(), dens, (long long)m.count,
                    dense_bytes / m.wire_bytes(), dtrain::core::encoding_name(m.encoding),
                    n / te / 1e9, enc_bytes / te / 1e9, tb / te, n / td / 1e9, dec_bytes / td / 1e9,
                    tdb / td, n / tb / 1e9, 12.0 * n / tb / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
