#pragma once
// The oneDNN engine and a per-thread stream: every CPU kernel executes through these.
#include <oneapi/dnnl/dnnl.hpp>

#include <string>

namespace dtrain::kernels::cpu {

dnnl::engine& engine();
// One stream per thread: worker threads run kernels concurrently.
dnnl::stream& stream();

// Every oneDNN primitive the CPU kernels create (convolutions, pooling, layout reorders) is
// counted, so a test can check that a step of shapes seen before creates none: primitives are
// built once per shape and cached by the layers (docs/architecture/kernels.md, "Implementations").
void count_primitives(int n);
int64_t primitives_created();

// The memory format of an activation with channel block `block` (op_args.h): nchw for 0.
dnnl::memory::format_tag activation_format(int64_t block);
// The channel block oneDNN's convolutions choose on this CPU (16 with AVX-512, 8 with AVX2), or
// 0 where they keep NCHW or DTRAIN_CPU_LAYOUT=plain is set (to compare the two).
int64_t preferred_activation_block();

// The instruction set oneDNN's kernels use here ("AVX-512", "AVX2", ...), after any cap set by
// ONEDNN_MAX_CPU_ISA: benchmark tables name it so figures from different CPUs are not mixed.
std::string isa_name();
// Whether that instruction set includes AVX-512, or AVX2: our own vector kernels follow oneDNN's
// choice, so ONEDNN_MAX_CPU_ISA holds them to it too (tools/bench/train --isa avx2).
bool uses_avx512();
bool uses_avx2();

// A memory object whose layout a primitive chose ("any"), next to the plain user layout.
// When they differ, to_internal/to_user reorder through an owned buffer; otherwise the user's
// pointer is used directly.
class LayoutBridge {
 public:
  LayoutBridge() = default;
  LayoutBridge(const dnnl::memory::desc& user, const dnnl::memory::desc& internal);
  // Memory holding `user_data` in the internal layout (reordered if needed).
  dnnl::memory& to_internal(const float* user_data);
  // Memory the primitive should write into; call to_user afterwards to get the plain layout.
  dnnl::memory& output_target(float* user_data);
  void to_user(float* user_data);

 private:
  bool same_ = true;
  dnnl::memory user_;
  dnnl::memory internal_;
  dnnl::reorder to_internal_;
  dnnl::reorder to_user_;
};

}  // namespace dtrain::kernels::cpu
