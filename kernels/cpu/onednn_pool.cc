// Max/average pooling through oneDNN on plain NCHW tensors (the workspace keeps the argmax).
#include "kernels/cpu/onednn_context.h"
#include "kernels/cpu/onednn_kernels.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class OneDnnPool2d : public Pool2dKernel {
 public:
  explicit OneDnnPool2d(const PoolGeometry& g) {
    memory::desc src_md({g.batch, g.channels, g.in_h, g.in_w}, dt::f32, tag::nchw);
    memory::desc dst_md({g.batch, g.channels, g.out_h(), g.out_w()}, dt::f32, tag::nchw);
    const Window2d& w = g.window;
    memory::dims kernel = {w.kernel_h, w.kernel_w};
    memory::dims strides = {w.stride_h, w.stride_w};
    memory::dims padding = {w.pad_h, w.pad_w};
    auto algorithm =
        g.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_forward::primitive_desc fwd_pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_md, dst_md,
                                    strides, kernel, padding, padding),
        engine());
    dnnl::pooling_backward::primitive_desc bwd_pd(
        dnnl::pooling_backward::desc(algorithm, src_md, dst_md, strides, kernel, padding,
                                     padding),
        engine(), fwd_pd);
    fwd_ = dnnl::pooling_forward(fwd_pd);
    bwd_ = dnnl::pooling_backward(bwd_pd);
    src_ = memory(src_md, engine(), DNNL_MEMORY_NONE);
    dst_ = memory(dst_md, engine(), DNNL_MEMORY_NONE);
    if (g.max) workspace_ = memory(fwd_pd.workspace_desc(), engine());
  }

  void forward(const float* src, float* dst) override {
    src_.set_data_handle(const_cast<float*>(src));
    dst_.set_data_handle(dst);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    fwd_.execute(stream(), args);
    stream().wait();
  }

  void backward(const float* diff_dst, float* diff_src) override {
    dst_.set_data_handle(const_cast<float*>(diff_dst));
    src_.set_data_handle(diff_src);
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, dst_},
                                            {DNNL_ARG_DIFF_SRC, src_}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    bwd_.execute(stream(), args);
    stream().wait();
  }

 private:
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
  memory src_, dst_, workspace_;
};

}  // namespace

std::unique_ptr<Pool2dKernel> make_onednn_pool2d(const PoolGeometry& geometry) {
  return std::make_unique<OneDnnPool2d>(geometry);
}

}  // namespace dtrain::kernels::cpu
