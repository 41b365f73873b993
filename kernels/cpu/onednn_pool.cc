// Max/average pooling through oneDNN. oneDNN 2.6 has a JIT pooling for plain NCHW only with
// AVX-512; on an AVX2 CPU NCHW falls back to a reference loop that took 13 of a LeNet step's
// 33 ms (docs/performance.md, "Where a CNN step's time goes"). So the kernel pools in the
// layout of its input where that has a fast kernel, else in a blocked one, and LayoutBridge
// reorders at its edges where the model's layouts differ (op_args.h).
#include <string>

#include "kernels/cpu/onednn_context.h"
#include "kernels/cpu/onednn_kernels.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct PoolPrimitives {
  dnnl::pooling_forward::primitive_desc fwd;
  dnnl::pooling_backward::primitive_desc bwd;
};

PoolPrimitives describe(const PoolGeometry& g, tag layout) {
  memory::desc src_md({g.batch, g.channels, g.in_h, g.in_w}, dt::f32, layout);
  memory::desc dst_md({g.batch, g.channels, g.out_h(), g.out_w()}, dt::f32, layout);
  const Window2d& w = g.window;
  memory::dims kernel = {w.kernel_h, w.kernel_w};
  memory::dims strides = {w.stride_h, w.stride_w};
  memory::dims padding = {w.pad_h, w.pad_w};
  auto algorithm =
      g.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  dnnl::pooling_forward::primitive_desc fwd(
      dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_md, dst_md,
                                  strides, kernel, padding, padding),
      engine());
  dnnl::pooling_backward::primitive_desc bwd(
      dnnl::pooling_backward::desc(algorithm, src_md, dst_md, strides, kernel, padding, padding),
      engine(), fwd);
  return {fwd, bwd};
}

// oneDNN names its fallbacks "simple..." or "ref...".
bool is_reference(const dnnl::primitive_desc_base& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.rfind("simple", 0) == 0 || impl.rfind("ref", 0) == 0;
}

// The input's layout where oneDNN has a fast kernel for it, else the first blocked layout that
// has one (16 channels a block for AVX-512, 8 for AVX2).
PoolPrimitives choose_layout(const PoolGeometry& g) {
  PoolPrimitives own = describe(g, activation_format(g.src_block));
  if (!is_reference(own.fwd) && !is_reference(own.bwd)) return own;
  for (tag blocked : {tag::nChw16c, tag::nChw8c}) {
    PoolPrimitives p = describe(g, blocked);
    if (!is_reference(p.fwd) && !is_reference(p.bwd)) return p;
  }
  return own;
}

class OneDnnPool2d : public Pool2dKernel {
 public:
  explicit OneDnnPool2d(const PoolGeometry& g) {
    const PoolPrimitives p = choose_layout(g);
    memory::desc src_user({g.batch, g.channels, g.in_h, g.in_w}, dt::f32,
                          activation_format(g.src_block));
    memory::desc dst_user({g.batch, g.channels, g.out_h(), g.out_w()}, dt::f32,
                          activation_format(g.dst_block));
    fwd_ = dnnl::pooling_forward(p.fwd);
    bwd_ = dnnl::pooling_backward(p.bwd);
    count_primitives(2);
    src_ = LayoutBridge(src_user, p.fwd.src_desc());
    dst_ = LayoutBridge(dst_user, p.fwd.dst_desc());
    diff_dst_ = LayoutBridge(dst_user, p.bwd.diff_dst_desc());
    diff_src_ = LayoutBridge(src_user, p.bwd.diff_src_desc());
    if (g.max) workspace_ = memory(p.fwd.workspace_desc(), engine());
  }

  void forward(const float* src, float* dst) override {
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src_.to_internal(src)},
                                            {DNNL_ARG_DST, dst_.output_target(dst)}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    fwd_.execute(stream(), args);
    dst_.to_user(dst);
    stream().wait();
  }

  void backward(const float* diff_dst, float* diff_src) override {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_DIFF_DST, diff_dst_.to_internal(diff_dst)},
        {DNNL_ARG_DIFF_SRC, diff_src_.output_target(diff_src)}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    bwd_.execute(stream(), args);
    diff_src_.to_user(diff_src);
    stream().wait();
  }

 private:
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
  LayoutBridge src_, dst_, diff_dst_, diff_src_;
  memory workspace_;
};

}  // namespace

std::unique_ptr<Pool2dKernel> make_onednn_pool2d(const PoolGeometry& geometry) {
  return std::make_unique<OneDnnPool2d>(geometry);
}

}  // namespace dtrain::kernels::cpu
