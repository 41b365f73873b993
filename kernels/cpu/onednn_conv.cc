// Convolution through oneDNN. Primitives pick their own layouts ("any"); LayoutBridge reorders
// from and to the layouts the model keeps: OIHW weights, and activations plain or blocked
// (op_args.h). Where the model keeps them in the block the primitive picked, nothing is
// reordered (docs/architecture/kernels.md, "Layouts").
#include "kernels/cpu/onednn_kernels.h"

#include "kernels/cpu/onednn_context.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class OneDnnConv2d : public Conv2dKernel {
 public:
  explicit OneDnnConv2d(const ConvGeometry& g) {
    memory::dims src_dims = {g.batch, g.in_channels, g.in_h, g.in_w};
    const Window2d& w = g.window;
    memory::dims wei_dims = {g.out_channels, g.in_channels, w.kernel_h, w.kernel_w};
    memory::dims bias_dims = {g.out_channels};
    memory::dims dst_dims = {g.batch, g.out_channels, g.out_h(), g.out_w()};
    memory::dims strides = {w.stride_h, w.stride_w};
    memory::dims padding = {w.pad_h, w.pad_w};

    memory::desc src_user(src_dims, dt::f32, activation_format(g.src_block));
    memory::desc wei_user(wei_dims, dt::f32, tag::oihw);
    memory::desc dst_user(dst_dims, dt::f32, activation_format(g.dst_block));
    memory::desc bias_md(bias_dims, dt::f32, tag::x);
    memory::desc src_any(src_dims, dt::f32, tag::any);
    memory::desc wei_any(wei_dims, dt::f32, tag::any);
    memory::desc dst_any(dst_dims, dt::f32, tag::any);

    dnnl::convolution_forward::primitive_desc fwd_pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, src_any, wei_any,
                                        bias_md, dst_any, strides, padding, padding),
        engine());
    fwd_ = dnnl::convolution_forward(fwd_pd);
    fwd_src_ = LayoutBridge(src_user, fwd_pd.src_desc());
    fwd_wei_ = LayoutBridge(wei_user, fwd_pd.weights_desc());
    fwd_dst_ = LayoutBridge(dst_user, fwd_pd.dst_desc());
    bias_ = memory(bias_md, engine(), DNNL_MEMORY_NONE);

    dnnl::convolution_backward_data::primitive_desc bwd_data_pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src_any,
                                              wei_any, dst_any, strides, padding, padding),
        engine(), fwd_pd);
    bwd_data_ = dnnl::convolution_backward_data(bwd_data_pd);
    bd_diff_dst_ = LayoutBridge(dst_user, bwd_data_pd.diff_dst_desc());
    bd_wei_ = LayoutBridge(wei_user, bwd_data_pd.weights_desc());
    bd_diff_src_ = LayoutBridge(src_user, bwd_data_pd.diff_src_desc());

    dnnl::convolution_backward_weights::primitive_desc bwd_wei_pd(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src_any,
                                                 wei_any, bias_md, dst_any, strides, padding,
                                                 padding),
        engine(), fwd_pd);
    bwd_weights_ = dnnl::convolution_backward_weights(bwd_wei_pd);
    bw_src_ = LayoutBridge(src_user, bwd_wei_pd.src_desc());
    bw_diff_dst_ = LayoutBridge(dst_user, bwd_wei_pd.diff_dst_desc());
    bw_diff_wei_ = LayoutBridge(wei_user, bwd_wei_pd.diff_weights_desc());
    diff_bias_ = memory(bias_md, engine(), DNNL_MEMORY_NONE);
    count_primitives(3);
  }

  void forward(const float* src, const float* weights, const float* bias, float* dst) override {
    bias_.set_data_handle(const_cast<float*>(bias));
    fwd_.execute(stream(), {{DNNL_ARG_SRC, fwd_src_.to_internal(src)},
                            {DNNL_ARG_WEIGHTS, fwd_wei_.to_internal(weights)},
                            {DNNL_ARG_BIAS, bias_},
                            {DNNL_ARG_DST, fwd_dst_.output_target(dst)}});
    fwd_dst_.to_user(dst);
    stream().wait();
  }

  void backward_data(const float* diff_dst, const float* weights, float* diff_src) override {
    bwd_data_.execute(stream(), {{DNNL_ARG_DIFF_DST, bd_diff_dst_.to_internal(diff_dst)},
                                 {DNNL_ARG_WEIGHTS, bd_wei_.to_internal(weights)},
                                 {DNNL_ARG_DIFF_SRC, bd_diff_src_.output_target(diff_src)}});
    bd_diff_src_.to_user(diff_src);
    stream().wait();
  }

  void backward_weights(const float* src, const float* diff_dst, float* diff_weights,
                        float* diff_bias) override {
    diff_bias_.set_data_handle(diff_bias);
    bwd_weights_.execute(stream(),
                         {{DNNL_ARG_SRC, bw_src_.to_internal(src)},
                          {DNNL_ARG_DIFF_DST, bw_diff_dst_.to_internal(diff_dst)},
                          {DNNL_ARG_DIFF_WEIGHTS, bw_diff_wei_.output_target(diff_weights)},
                          {DNNL_ARG_DIFF_BIAS, diff_bias_}});
    bw_diff_wei_.to_user(diff_weights);
    stream().wait();
  }

 private:
  dnnl::convolution_forward fwd_;
  dnnl::convolution_backward_data bwd_data_;
  dnnl::convolution_backward_weights bwd_weights_;
  LayoutBridge fwd_src_, fwd_wei_, fwd_dst_;
  LayoutBridge bd_diff_dst_, bd_wei_, bd_diff_src_;
  LayoutBridge bw_src_, bw_diff_dst_, bw_diff_wei_;
  memory bias_, diff_bias_;
};

}  // namespace

std::unique_ptr<Conv2dKernel> make_onednn_conv2d(const ConvGeometry& geometry) {
  return std::make_unique<OneDnnConv2d>(geometry);
}

}  // namespace dtrain::kernels::cpu
