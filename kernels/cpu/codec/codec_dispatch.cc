// Run-time CPU feature checks. Compiled for the baseline ISA, so nothing here can fault on an
// older CPU; the SIMD files are entered only after their check passed.
#include "kernels/codec_kernels.h"

namespace dtrain::kernels {
namespace cpu {
const CodecKernels& avx512_codec_instance();
const CodecKernels& avx2_codec_instance();
const CodecKernels& portable_codec_instance();

const CodecKernels& best_codec() {
  if (const CodecKernels* k = cpu_codec_avx512()) return *k;
  if (const CodecKernels* k = cpu_codec_avx2()) return *k;
  return portable_codec_instance();
}
}  // namespace cpu

const CodecKernels* cpu_codec_avx512() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) return nullptr;
  return &cpu::avx512_codec_instance();
}

const CodecKernels* cpu_codec_avx2() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return nullptr;
  return &cpu::avx2_codec_instance();
}

}  // namespace dtrain::kernels
