#include "core/codec/codec_engine.h"

#include <cstdlib>

#include "core/codec/reference_codec.h"
#include "core/util/error.h"

namespace dtrain::core {

const CodecEngine& CodecEngine::get(const std::string& requested) {
  static const CodecEngine reference(nullptr);
  static const CodecEngine avx2(kernels::cpu_codec_avx2());
  static const CodecEngine avx512(kernels::cpu_codec_avx512());
  std::string name = requested;
  if (name == "auto") {
    const char* env = std::getenv("DTRAIN_CODEC");
    name = env && *env ? env : "auto";
  }
  if (name == "auto") {
    if (avx512.kernels_) return avx512;
    if (avx2.kernels_) return avx2;
    return reference;
  }
  if (name == "reference") return reference;
  const CodecEngine* e = name == "avx512" ? &avx512 : name == "avx2" ? &avx2 : nullptr;
  if (!e)
    throw UserError("unknown codec implementation '" + name + "'",
                    "use auto, avx512, avx2 or reference (DTRAIN_CODEC)");
  if (!e->kernels_)
    throw UserError("this CPU cannot run the " + name + " codec",
                    "use DTRAIN_CODEC=auto, which picks what the CPU supports");
  return *e;
}

std::vector<std::string> CodecEngine::available() {
  std::vector<std::string> names;
  if (kernels::cpu_codec_avx512()) names.push_back("avx512");
  if (kernels::cpu_codec_avx2()) names.push_back("avx2");
  names.push_back("reference");
  return names;
}

EncodedMessage CodecEngine::encode_segment(float* r, const float* u, int64_t n, float tau,
                                           float clip, double* residual_sum_squares,
                                           Scratch& scratch) const {
  if (!kernels_) return reference_encode(r, u, n, tau, clip, residual_sum_squares);
  scratch.bitmap.resize(bitmap_words(n));
  scratch.sparse.resize(kernels::sparse_capacity(n));
  const kernels::CodecEncodeArgs args{r, u, n, tau, clip, scratch.bitmap.data(),
                                       scratch.sparse.data()};
  const kernels::CodecEncodeResult result = kernels_->encode(args);
  if (result.nonfinite_index >= 0) {
    // The kernel stops before storing the vector that holds the bad element, so r + u there
    // is still the value it saw. The residual is partly updated: the caller must stop.
    const int64_t i = result.nonfinite_index;
    refuse_nonfinite_update(i, r[i] + u[i]);
  }
  if (residual_sum_squares) *residual_sum_squares = result.residual_sum_squares;
  EncodedMessage m = message_for(tau, n, result.count);
  if (m.encoding == Encoding::kSparse)
    m.words.assign(scratch.sparse.begin(), scratch.sparse.begin() + result.count);
  else
    m.words.assign(scratch.bitmap.begin(), scratch.bitmap.end());
  return m;
}

void CodecEngine::apply(const EncodedMessage& m, float* params) const {
  if (!kernels_) return reference_apply(m, params);
  float* p = params + m.param_offset;
  if (m.encoding == Encoding::kSparse)
    kernels_->apply_sparse(m.words.data(), static_cast<int64_t>(m.words.size()), m.tau, p);
  else
    kernels_->apply_bitmap(m.words.data(), m.length, m.tau, p);
}

}  // namespace dtrain::core
