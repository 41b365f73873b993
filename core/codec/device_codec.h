#pragma once
// The update codec on a GPU worker's memory (docs/architecture/core.md, "The update" and "The
// model"). Encoding runs where the residual and the step live, and only the message's words come
// back to the host: the one copy out of a step. A received message's words go up once and are
// applied there; the same words clear the momentum of the elements sent (momentum factor masking).
// Messages are bytes, so CPU and GPU workers of one job exchange them freely.
#include <cstdint>

#include "core/codec/message.h"
#include "core/tensor/tensor.h"
#include "kernels/backend.h"

namespace dtrain::core {

class DeviceCodec {
 public:
  explicit DeviceCodec(kernels::Backend& backend);

  // Same contract and bits as CodecEngine::encode_segment, on device pointers r and u.
  EncodedMessage encode_segment(float* r, const float* u, int64_t n, float tau, float clip,
                                double* residual_sum_squares);
  // params -= decoded m (params: the whole device vector; the message's offset is applied).
  // With `clear`, clear[i] = 0 at every element m sent. `on_device`: m's words, already in
  // this backend's memory (GPU-to-GPU sharing); null: they are copied up from m.words.
  void apply(const EncodedMessage& m, float* params, float* clear = nullptr,
             const uint32_t* on_device = nullptr);
  // The words of the last encode_segment, still in device memory until the next encode.
  const uint32_t* last_words() const { return last_words_; }

  // Benchmarks (tools/bench/gpu_bench): with profiling on, each call waits for the device
  // before and after its part, and the seconds add up here. Off (the default) nothing waits
  // that would not anyway.
  struct Profile {
    double encode_s = 0, copy_s = 0, apply_s = 0;
  };
  void set_profiling(bool on) { profiling_ = on; }
  const Profile& profile() const { return profile_; }

 private:
  static uint32_t* words(Tensor& t) { return reinterpret_cast<uint32_t*>(t.data()); }

  kernels::Backend& backend_;
  Tensor bitmap_, sparse_, received_;
  const uint32_t* last_words_ = nullptr;
  bool profiling_ = false;
  Profile profile_;  // 32-bit words held in float tensors on the device
};

}  // namespace dtrain::core
