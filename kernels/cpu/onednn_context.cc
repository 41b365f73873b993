#include "kernels/cpu/onednn_context.h"

#include <atomic>

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
