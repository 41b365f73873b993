// CUDA kernels of the update codec. Layouts as in kernels/codec_kernels.h.
#include <cub/block/block_scan.cuh>

#include <stdexcept>
#include <string>

#include "kernels/cuda/codec_cuda.h"

namespace dtrain::kernels::cuda {
namespace {

#define DTRAIN_CUDA_CHECK(call)                                                         \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess)                                                           \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                               ": " #call ": " + cudaGetErrorString(err_));            \
  } while (0)

// A tile is what one block encodes: 256 threads, 8 warps, each warp 4 rounds of 128
// consecutive elements (a float4 per lane), so 4096 elements = 256 bitmap words per tile.
constexpr int kThreads = 256;
constexpr int kRounds = 4;
constexpr int kTile = kThreads * kRounds * 4;
constexpr int kTileWords = kTile / 16;

struct Totals {
  unsigned long long count;
  unsigned long long first_nonfinite;  // ~0ull when none
  double sum_squares;
};

// Per-tile results of encode_mark, combined by finalize_tiles.
struct TileStats {
  uint32_t* counts;
  uint32_t* offsets;
  double* squares;
  unsigned long long* first_nonfinite;
};

constexpr int kFinalizeThreads = 1024;

// One element: r + u, its 2-bit code (01 +tau, 10 -tau), the new residual.
__device__ __forceinline__ uint32_t encode_one(float& v, float tau, float clip, float& squares,
                                               bool& bad) {
  uint32_t code = 0;
  if (!isfinite(v)) {
    bad = true;
    return 0;
  }
  if (v >= tau) {
    v = v - tau;
    code = 1u;
  } else if (v <= -tau) {
    v = v + tau;
    code = 2u;
  }
  if (clip > 0.f) v = fminf(fmaxf(v, -clip), clip);
  squares += v * v;
  return code;
}

// This lane's kRounds float4 of r and of u, all loaded before any is used (many loads in
// flight); a tile's ragged end is read element by element.
__device__ __forceinline__ void load_rounds(const float* __restrict__ r,
                                            const float* __restrict__ u, int64_t n,
                                            int64_t warp_base, int lane, float4 (&rv)[kRounds],
                                            float4 (&uv)[kRounds]) {
#pragma unroll
  for (int round = 0; round < kRounds; ++round) {
    const int64_t i = warp_base + round * 128 + lane * 4;
    if (i + 3 < n) {
      rv[round] = *reinterpret_cast<const float4*>(r + i);
      uv[round] = *reinterpret_cast<const float4*>(u + i);
    } else {
      float a[4] = {0.f, 0.f, 0.f, 0.f}, b[4] = {0.f, 0.f, 0.f, 0.f};
      for (int k = 0; k < 4; ++k)
        if (i + k < n) {
          a[k] = r[i + k];
          b[k] = u[i + k];
        }
      rv[round] = make_float4(a[0], a[1], a[2], a[3]);
      uv[round] = make_float4(b[0], b[1], b[2], b[3]);
    }
  }
}

// Per-tile count, squares and first bad index from every warp's, combined by finalize_tiles.
__device__ __forceinline__ void store_tile_totals(uint32_t warp_count, float squares,
                                                  unsigned long long bad, int lane, int warp,
                                                  TileStats tiles) {
  __shared__ uint32_t warp_counts[kThreads / 32];
  __shared__ double warp_squares[kThreads / 32];
  __shared__ unsigned long long warp_bad[kThreads / 32];
  double sq = squares;
  for (int off = 16; off; off >>= 1) {
    sq += __shfl_down_sync(0xFFFFFFFFu, sq, off);
    bad = min(bad, __shfl_down_sync(0xFFFFFFFFu, bad, off));
  }
  if (lane == 0) {
    warp_counts[warp] = warp_count;
    warp_squares[warp] = sq;
    warp_bad[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint32_t c = 0;
  double s = 0;
  unsigned long long b = ~0ull;
  for (int w = 0; w < kThreads / 32; ++w) {
    c += warp_counts[w];
    s += warp_squares[w];
    b = min(b, warp_bad[w]);
  }
  tiles.counts[blockIdx.x] = c;
  tiles.squares[blockIdx.x] = s;
  tiles.first_nonfinite[blockIdx.x] = b;
}

// r += u, mark, subtract, clip; bitmap words and per-tile counts. Each thread takes four
// consecutive elements per round (one float4 of r and of u); four neighbouring lanes make one
// 16-element bitmap word.
__global__ void __launch_bounds__(kThreads) encode_mark(float* __restrict__ r,
                                                        const float* __restrict__ u, int64_t n,
                                                        float tau, float clip,
                                                        uint32_t* __restrict__ bitmap,
                                                        TileStats tiles) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t warp_base = int64_t(blockIdx.x) * kTile + int64_t(warp) * (kRounds * 128);
  float4 rv[kRounds], uv[kRounds];
  load_rounds(r, u, n, warp_base, lane, rv, uv);
  uint32_t warp_count = 0;
  float squares = 0.f;
  unsigned long long bad = ~0ull;
#pragma unroll
  for (int round = 0; round < kRounds; ++round) {
    const int64_t i = warp_base + round * 128 + lane * 4;
    float v[4] = {rv[round].x + uv[round].x, rv[round].y + uv[round].y,
                  rv[round].z + uv[round].z, rv[round].w + uv[round].w};
    uint32_t code = 0;
    for (int k = 0; k < 4; ++k) {
      if (i + k >= n) break;
      bool nonfinite = false;
      code |= encode_one(v[k], tau, clip, squares, nonfinite) << (2 * k);
      if (nonfinite) bad = min(bad, static_cast<unsigned long long>(i + k));
    }
    if (i + 3 < n) {
      *reinterpret_cast<float4*>(r + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      for (int k = 0; k < 4; ++k)
        if (i + k < n) r[i + k] = v[k];
    }
    warp_count += __popc(code);
    uint32_t word = code << (8 * (lane & 3));
    word |= __shfl_xor_sync(0xFFFFFFFFu, word, 1);
    word |= __shfl_xor_sync(0xFFFFFFFFu, word, 2);
    if ((lane & 3) == 0 && i < n) bitmap[i / 16] = word;
  }
  warp_count = __reduce_add_sync(0xFFFFFFFFu, warp_count);
  store_tile_totals(warp_count, squares, bad, lane, warp, tiles);
}

// One block: exclusive scan of the tile counts into tile offsets (the ordered output's
// prefix scan), and the totals the host reads back. Replaces global atomics and a separate
// device-wide scan, which cost more launches than work at a million elements.
__global__ void __launch_bounds__(kFinalizeThreads) finalize_tiles(TileStats tiles, int num_tiles, Totals* totals) {
  using BlockScan = cub::BlockScan<unsigned long long, kFinalizeThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ double squares_shared[kFinalizeThreads / 32];
  __shared__ unsigned long long bad_shared[kFinalizeThreads / 32];
  const int per_thread = (num_tiles + kFinalizeThreads - 1) / kFinalizeThreads;
  const int begin = min(num_tiles, int(threadIdx.x) * per_thread);
  const int end = min(num_tiles, begin + per_thread);
  unsigned long long count = 0, bad = ~0ull;
  double squares = 0;
  for (int t = begin; t < end; ++t) {
    count += tiles.counts[t];
    squares += tiles.squares[t];
    bad = min(bad, tiles.first_nonfinite[t]);
  }
  unsigned long long offset, total;
  BlockScan(scan_storage).ExclusiveSum(count, offset, total);
  for (int t = begin; t < end; ++t) {
    tiles.offsets[t] = static_cast<uint32_t>(offset);
    offset += tiles.counts[t];
  }
  for (int off = 16; off; off >>= 1) {
    squares += __shfl_down_sync(0xFFFFFFFFu, squares, off);
    bad = min(bad, __shfl_down_sync(0xFFFFFFFFu, bad, off));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    squares_shared[warp] = squares;
    bad_shared[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    unsigned long long b = ~0ull;
    for (int w = 0; w < kFinalizeThreads / 32; ++w) {
      s += squares_shared[w];
      b = min(b, bad_shared[w]);
    }
    *totals = Totals{total, b, s};
  }
}

// The sparse words of one tile, in index order: the tile's offset from the scan plus each
// word's offset within the tile from a block scan of the words' popcounts.
__global__ void __launch_bounds__(kTileWords) sparse_from_bitmap(const uint32_t* __restrict__ bitmap, int64_t n,
                                   const uint32_t* __restrict__ tile_offsets,
                                   const Totals* __restrict__ totals,
                                   uint32_t* __restrict__ sparse) {
  // The encoding is chosen here, on the device, from the count: no round trip to the host.
  if (totals->count > static_cast<unsigned long long>(n / 16) || totals->first_nonfinite != ~0ull)
    return;
  using BlockScan = cub::BlockScan<uint32_t, kTileWords>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  const int64_t word_index = int64_t(blockIdx.x) * kTileWords + threadIdx.x;
  const int64_t words = (n + 15) / 16;
  uint32_t word = word_index < words ? bitmap[word_index] : 0u;
  uint32_t offset;
  BlockScan(scan_storage).ExclusiveSum(static_cast<uint32_t>(__popc(word)), offset);
  uint32_t* out = sparse + tile_offsets[blockIdx.x] + offset;
  while (word) {
    const int bit = __ffs(word) - 1;
    const uint32_t index = static_cast<uint32_t>(word_index * 16 + bit / 2);
    *out++ = (bit & 1) ? (index | 0x80000000u) : index;
    word &= word - 1;
  }
}

__global__ void apply_bitmap_kernel(const uint32_t* __restrict__ bitmap, int64_t n, float tau,
                                    float* __restrict__ params) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t code = (bitmap[i / 16] >> (2 * (i % 16))) & 3u;
    if (code == 1u) params[i] = params[i] - tau;
    else if (code == 2u) params[i] = params[i] + tau;
  }
}

__global__ void apply_sparse_kernel(const uint32_t* __restrict__ words, int64_t count,
                                    float tau, float* __restrict__ params) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t w = words[k];
    float& p = params[w & 0x7FFFFFFFu];
    p = (w >> 31) ? p + tau : p - tau;
  }
}

__global__ void stream_add_kernel(float4* __restrict__ r, const float4* __restrict__ u,
                                  int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    float4 a = r[i];
    const float4 b = u[i];
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
    r[i] = a;
  }
}

__global__ void stream_add_tail(float* r, const float* u, int64_t from, int64_t n) {
  const int64_t i = from + threadIdx.x;
  if (i < n) r[i] += u[i];
}

int grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

}  // namespace

struct CudaCodec::Impl {
  int64_t max_n = 0;
  int64_t max_tiles = 0;
  TileStats tiles{};
  // Mapped pinned memory: finalize_tiles writes the totals straight into host memory, which
  // saves a copy (a few microseconds per call, which matters at a million elements).
  Totals* host_totals = nullptr;
  Totals* totals = nullptr;  // the device's view of host_totals
  cudaStream_t stream = nullptr;
};

bool device_available(std::string* why) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    return false;
  }
  if (devices == 0) {
    if (why) *why = "no CUDA device present";
    return false;
  }
  return true;
}

CudaCodec::CudaCodec(int64_t max_n) : impl_(new Impl) {
  impl_->max_n = max_n;
  impl_->max_tiles = (max_n + kTile - 1) / kTile + 1;
  DTRAIN_CUDA_CHECK(cudaStreamCreate(&impl_->stream));
  TileStats& t = impl_->tiles;
  DTRAIN_CUDA_CHECK(cudaMalloc(&t.counts, impl_->max_tiles * sizeof(uint32_t)));
  DTRAIN_CUDA_CHECK(cudaMalloc(&t.offsets, impl_->max_tiles * sizeof(uint32_t)));
  DTRAIN_CUDA_CHECK(cudaMalloc(&t.squares, impl_->max_tiles * sizeof(double)));
  DTRAIN_CUDA_CHECK(cudaMalloc(&t.first_nonfinite, impl_->max_tiles * sizeof(unsigned long long)));
  DTRAIN_CUDA_CHECK(cudaHostAlloc(&impl_->host_totals, sizeof(Totals), cudaHostAllocMapped));
  DTRAIN_CUDA_CHECK(cudaHostGetDevicePointer(&impl_->totals, impl_->host_totals, 0));
}

CudaCodec::~CudaCodec() {
  cudaFree(impl_->tiles.counts);
  cudaFree(impl_->tiles.offsets);
  cudaFree(impl_->tiles.squares);
  cudaFree(impl_->tiles.first_nonfinite);
  cudaFreeHost(impl_->host_totals);
  cudaStreamDestroy(impl_->stream);
  delete impl_;
}

DeviceEncodeResult CudaCodec::encode(float* r, const float* u, int64_t n, float tau, float clip,
                                     uint32_t* bitmap, uint32_t* sparse) {
  if (n > impl_->max_n || n >= (int64_t(1) << 31))
    throw std::invalid_argument("CudaCodec::encode: n exceeds the size it was built for");
  DeviceEncodeResult out;
  if (n == 0) return out;
  const int tiles = static_cast<int>((n + kTile - 1) / kTile);
  // Three kernels queued without a host round trip in between; the last one reads the count
  // on the device to decide whether the sparse words are needed.
  encode_mark<<<tiles, kThreads, 0, impl_->stream>>>(r, u, n, tau, clip, bitmap, impl_->tiles);
  finalize_tiles<<<1, kFinalizeThreads, 0, impl_->stream>>>(impl_->tiles, tiles, impl_->totals);
  sparse_from_bitmap<<<tiles, kTileWords, 0, impl_->stream>>>(bitmap, n, impl_->tiles.offsets,
                                                              impl_->totals, sparse);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  const Totals totals = *impl_->host_totals;  // written by the GPU; visible after the sync
  out.count = static_cast<int64_t>(totals.count);
  out.residual_sum_squares = totals.sum_squares;
  if (totals.first_nonfinite != ~0ull) {
    out.nonfinite_index = static_cast<int64_t>(totals.first_nonfinite);
    return out;
  }
  out.sparse = out.count <= n / 16;
  return out;
}

void CudaCodec::apply_bitmap(const uint32_t* bitmap, int64_t n, float tau, float* params) {
  if (n == 0) return;
  apply_bitmap_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(bitmap, n, tau, params);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

void CudaCodec::apply_sparse(const uint32_t* words, int64_t count, float tau, float* params) {
  if (count == 0) return;
  apply_sparse_kernel<<<grid_for(count, 256), 256, 0, impl_->stream>>>(words, count, tau, params);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

void CudaCodec::stream_add(float* r, const float* u, int64_t n) {
  const int64_t n4 = n / 4;
  if (n4 > 0)
    stream_add_kernel<<<grid_for(n4, 256), 256, 0, impl_->stream>>>(
        reinterpret_cast<float4*>(r), reinterpret_cast<const float4*>(u), n4);
  if (n4 * 4 < n) stream_add_tail<<<1, 32, 0, impl_->stream>>>(r, u, n4 * 4, n);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

}  // namespace dtrain::kernels::cuda
