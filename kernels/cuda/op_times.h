#pragma once
// Where a GPU step's time goes, per backend operation (DTRAIN_CUDA_OP_TIMES=1; off otherwise,
// and then an OpTimer costs one branch). CUDA events around each operation on its stream; the
// pairs are read back at the next synchronize (flush_op_times), so timing changes no ordering.
// At exit the process prints one line per operation to stderr: calls, total and mean GPU time,
// share of the timed total. Used by tools/bench/gpu (--op-times) to find the slow kernels.
#include <cuda_runtime.h>

namespace dtrain::kernels::cuda {

bool op_times_enabled();

class OpTimer {
 public:
  OpTimer(cudaStream_t stream, const char* label);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  cudaStream_t stream_;
  const char* label_;
  cudaEvent_t start_ = nullptr;
};

// Adds up every timed operation that has finished (call after a stream synchronize).
void flush_op_times();

}  // namespace dtrain::kernels::cuda
