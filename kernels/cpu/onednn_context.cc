#include "kernels/cpu/onednn_context.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

namespace dtrain::kernels::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

namespace {
std::atomic<int64_t> created{0};
}  // namespace

void count_primitives(int n) { created.fetch_add(n, std::memory_order_relaxed); }
int64_t primitives_created() { return created.load(std::memory_order_relaxed); }

dnnl::memory::format_tag activation_format(int64_t block) {
  using tag = dnnl::memory::format_tag;
  switch (block) {
    case 0: return tag::nchw;
    case 8: return tag::nChw8c;
    case 16: return tag::nChw16c;
    default: throw std::invalid_argument("no activation layout with channel block " +
                                         std::to_string(block));
  }
}

namespace {
// The channel block of the destination a 3x3, 16-to-16 channel convolution picks with "any".
int64_t block_convolutions_choose() {
  using dnnl::memory;
  const memory::dims src = {32, 16, 16, 16}, wei = {16, 16, 3, 3}, one = {1, 1};
  memory::desc src_any(src, memory::data_type::f32, memory::format_tag::any);
  memory::desc wei_any(wei, memory::data_type::f32, memory::format_tag::any);
  dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::convolution_direct, src_any, wei_any,
                                      src_any, one, one, one),
      engine());
  const dnnl_memory_desc_t& d = pd.dst_desc().data;
  const auto& blocking = d.format_desc.blocking;
  if (d.format_kind != dnnl_blocked || blocking.inner_nblks != 1 || blocking.inner_idxs[0] != 1)
    return 0;
  const int64_t block = blocking.inner_blks[0];
  return block == 8 || block == 16 ? block : 0;
}
}  // namespace

int64_t preferred_activation_block() {
  static const int64_t block = [] {
    const char* layout = std::getenv("DTRAIN_CPU_LAYOUT");
    if (layout && std::string(layout) == "plain") return int64_t(0);
    return block_convolutions_choose();
  }();
  return block;
}

namespace {
// oneDNN's instruction sets are bit sets, each holding the ones it extends (dnnl_types.h).
bool effective_isa_includes(dnnl::cpu_isa set) {
  const unsigned bits = unsigned(set);
  return (unsigned(dnnl::get_effective_cpu_isa()) & bits) == bits;
}
}  // namespace

bool uses_avx512() { return effective_isa_includes(dnnl::cpu_isa::avx512_core); }
bool uses_avx2() { return effective_isa_includes(dnnl::cpu_isa::avx2); }

std::string isa_name() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "SSE4.1";
    case isa::avx: return "AVX";
    case isa::avx2: return "AVX2";
    case isa::avx2_vnni: return "AVX2 with VNNI";
    case isa::avx512_core: return "AVX-512";
    case isa::avx512_core_vnni: return "AVX-512 with VNNI";
    case isa::avx512_core_bf16: return "AVX-512 with BF16";
    case isa::avx512_core_amx: return "AVX-512 with AMX";
    default: return "other";
  }
}

LayoutBridge::LayoutBridge(const dnnl::memory::desc& user, const dnnl::memory::desc& internal)
    : same_(user == internal),
      user_(user, engine(), DNNL_MEMORY_NONE) {
  if (same_) {
    internal_ = dnnl::memory(internal, engine(), DNNL_MEMORY_NONE);
    return;
  }
  internal_ = dnnl::memory(internal, engine());  // owns its buffer
  to_internal_ = dnnl::reorder(user_, internal_);
  to_user_ = dnnl::reorder(internal_, user_);
  count_primitives(2);
}

dnnl::memory& LayoutBridge::to_internal(const float* user_data) {
  if (same_) {
    internal_.set_data_handle(const_cast<float*>(user_data));
    return internal_;
  }
  user_.set_data_handle(const_cast<float*>(user_data));
  to_internal_.execute(stream(), user_, internal_);
  return internal_;
}

dnnl::memory& LayoutBridge::output_target(float* user_data) {
  if (same_) internal_.set_data_handle(user_data);
  return internal_;
}

void LayoutBridge::to_user(float* user_data) {
  if (same_) return;
  user_.set_data_handle(user_data);
  to_user_.execute(stream(), internal_, user_);
}

}  // namespace dtrain::kernels::cpu
