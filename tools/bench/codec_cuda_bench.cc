// The CUDA codec against the GPU's own memory streaming (r[i] += u[i] over the same arrays,
// float4 loads) in the same run. Times are host wall clock around each call, which includes
// the launch and the round trip that reads the count back: what a worker pays per step.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/codec_cuda.h"
#include "tools/bench/bench_timing.h"

using dtrain::bench::median;
using dtrain::bench::time_once;

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!dtrain::kernels::cuda::device_available(&why)) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 2;
  }
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s\n", prop.name);
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 21;
  std::printf("%-5s %-7s %9s %7s | %8s %7s %6s | %8s %7s %6s | %8s %8s\n", "N", "density",
              "sent", "enc", "Gelem/s", "GB/s", "x base", "Gelem/s", "GB/s", "x base", "base",
              "base GB/s");
  std::printf("%-5s %-7s %9s %7s | %-23s | %-23s | %-17s\n", "", "", "", "",
              "encode incl. residual", "decode/apply", "r += u");
  for (int64_t n : {int64_t(1000000), int64_t(10000000), int64_t(64000000)}) {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> r0(n), u(n);
    for (int64_t i = 0; i < n; ++i) {
      r0[i] = 0.3f * normal(rng);
      u[i] = normal(rng);
    }
    float *dr0, *dr, *du, *dp;
    uint32_t *bitmap, *sparse;
    check(cudaMalloc(&dr0, n * 4), "malloc");
    check(cudaMalloc(&dr, n * 4), "malloc");
    check(cudaMalloc(&du, n * 4), "malloc");
    check(cudaMalloc(&dp, n * 4), "malloc");
    check(cudaMalloc(&bitmap, ((n + 15) / 16) * 4), "malloc");
    check(cudaMalloc(&sparse, (n / 16 + 16) * 4), "malloc");
    check(cudaMemcpy(dr0, r0.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(du, u.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(dp, r0.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    dtrain::kernels::cuda::CudaCodec codec(n);
    for (double density : {1e-4, 1e-3, 1e-2, 0.25}) {
      std::vector<float> m;
      for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 1000000))
        m.push_back(std::fabs(r0[i] + u[i]));
      const int64_t k = std::min<int64_t>(m.size() - 1, int64_t(density * m.size()));
      std::nth_element(m.begin(), m.begin() + (m.size() - 1 - k), m.end());
      const float tau = m[m.size() - 1 - k];
      std::vector<double> tb, te, td;
      dtrain::kernels::cuda::DeviceEncodeResult res;
      for (int rep = 0; rep < repeats; ++rep) {
        check(cudaMemcpy(dr, dr0, n * 4, cudaMemcpyDeviceToDevice), "restore");
        check(cudaDeviceSynchronize(), "sync");
        tb.push_back(time_once([&] { codec.stream_add(dr, du, n); }));
        check(cudaMemcpy(dr, dr0, n * 4, cudaMemcpyDeviceToDevice), "restore");
        check(cudaDeviceSynchronize(), "sync");
        te.push_back(time_once([&] { res = codec.encode(dr, du, n, tau, 0.f, bitmap, sparse); }));
        td.push_back(time_once([&] {
          if (res.sparse) codec.apply_sparse(sparse, res.count, tau, dp);
          else codec.apply_bitmap(bitmap, n, tau, dp);
        }));
      }
      const double b = median(tb), e = median(te), d = median(td);
      const double enc_bytes = 12.0 * n + n / 4.0 + (res.sparse ? 4.0 * res.count + n / 4.0 : 0);
      const double dec_bytes = res.sparse ? 12.0 * res.count : 8.0 * n + n / 4.0;
      char dens[16];
      if (density == 0.25) std::snprintf(dens, sizeof dens, "bitmap");
      else std::snprintf(dens, sizeof dens, "%.0e", density);
      std::printf("%-5s %-7s %9lld %7s | %8.1f %7.0f %6.2f | %8.1f %7.0f %6.2f | %8.1f %8.0f\n",
                  (std::to_string(n / 1000000) + "M").c_str(), dens, (long long)res.count,
                  res.sparse ? "sparse" : "bitmap", n / e / 1e9, enc_bytes / e / 1e9, b / e,
                  n / d / 1e9, dec_bytes / d / 1e9, b / d, n / b / 1e9, 12.0 * n / b / 1e9);
      std::fflush(stdout);
    }
    cudaFree(dr0);
    cudaFree(dr);
    cudaFree(du);
    cudaFree(dp);
    cudaFree(bitmap);
    cudaFree(sparse);
  }
  return 0;
}
