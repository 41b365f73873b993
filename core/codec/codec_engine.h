#pragma once
// Picks the codec implementation: the fastest SIMD kernels the CPU supports, or the reference.
// DTRAIN_CODEC=reference|avx2|avx512 in the environment overrides "auto" (for debugging and
// benchmarks).
#include <cstdint>
#include <string>
#include <vector>

#include "core/codec/message.h"
#include "kernels/codec_kernels.h"

namespace dtrain::core {

class CodecEngine {
 public:
  // "auto", "avx512", "avx2" or "reference"; throws UserError for an unknown name or one this
  // CPU cannot run.
  static const CodecEngine& get(const std::string& name = "auto");
  // The implementations this CPU runs, fastest first.
  static std::vector<std::string> available();

  const char* name() const { return kernels_ ? kernels_->name() : "reference"; }

  // Buffers the kernels write into, reused from step to step.
  struct Scratch {
    std::vector<uint32_t> bitmap, sparse;
  };

  // One segment, same contract (and same bits) as reference_encode.
  EncodedMessage encode_segment(float* residual, const float* update, int64_t n, float tau,
                                float clip, double* residual_sum_squares, Scratch& scratch) const;
  // params -= decoded message (params is the whole vector; the message's offset is applied).
  void apply(const EncodedMessage& message, float* params) const;

 private:
  explicit CodecEngine(const kernels::CodecKernels* kernels) : kernels_(kernels) {}
  const kernels::CodecKernels* kernels_;  // nullptr: the reference
};

}  // namespace dtrain::core
