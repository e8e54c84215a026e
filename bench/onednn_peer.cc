// oneDNN's primitives beside tfk (onednn_peer.h), in oneDNN 2.x's API
// (Debian 12 has 2.6: operation descriptors, then primitive descriptors).
#include "onednn_peer.h"

namespace tfk_bench {
namespace {

using dnnl::memory;

memory::desc Md(size_t rows, size_t cols) {
  return memory::desc({static_cast<memory::dim>(rows), static_cast<memory::dim>(cols)},
                      memory::data_type::f32, memory::format_tag::ab);
}

memory Mem(const memory::desc& md, const dnnl::engine& eng, const float* p) {
  return memory(md, eng, const_cast<float*>(p));  // oneDNN reads it only
}

}  // namespace

std::unique_ptr<OneDnnPeer> OneDnnPeer::Softmax(size_t rows, size_t cols, const float* x,
                                                float* y) {
  std::unique_ptr<OneDnnPeer> p(new OneDnnPeer);
  const memory::desc md = Md(rows, cols);
  dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, 1);
  p->prim_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(d, p->eng_));
  p->args_ = {{{DNNL_ARG_SRC, Mem(md, p->eng_, x)}, {DNNL_ARG_DST, Mem(md, p->eng_, y)}}};
  return p;
}

std::unique_ptr<OneDnnPeer> OneDnnPeer::Activation(tfk_activation act, size_t n, const float* x,
                                                   float* y) {
  std::unique_ptr<OneDnnPeer> p(new OneDnnPeer);
  const memory::desc md = Md(1, n);
  const dnnl::algorithm alg = act == TFK_ACT_RELU        ? dnnl::algorithm::eltwise_relu
                              : act == TFK_ACT_GELU_ERF  ? dnnl::algorithm::eltwise_gelu_erf
                              : act == TFK_ACT_GELU_TANH ? dnnl::algorithm::eltwise_gelu_tanh
                                                         : dnnl::algorithm::eltwise_swish;
  const float alpha = act == TFK_ACT_SILU ? 1.0f : 0.0f;  // swish: x sigmoid(alpha x)
  dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, alpha, 0.0f);
  p->prim_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, p->eng_));
  p->args_ = {{{DNNL_ARG_SRC, Mem(md, p->eng_, x)}, {DNNL_ARG_DST, Mem(md, p->eng_, y)}}};
  return p;
}

std::unique_ptr<OneDnnPeer> OneDnnPeer::LayerNorm(size_t rows, size_t cols, const float* x,
                                                  const float* gamma, const float* beta, float* y) {
  std::unique_ptr<OneDnnPeer> p(new OneDnnPeer);
  const memory::desc md = Md(rows, cols);
  dnnl::layer_normalization_forward::desc d(
      dnnl::prop_kind::forward_inference, md, 1e-5f,
      dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift);
  p->prim_ = dnnl::layer_normalization_forward(
      dnnl::layer_normalization_forward::primitive_desc(d, p->eng_));
  const memory::desc vec({static_cast<memory::dim>(cols)}, memory::data_type::f32,
                         memory::format_tag::a);
  p->args_ = {{{DNNL_ARG_SRC, Mem(md, p->eng_, x)},
               {DNNL_ARG_DST, Mem(md, p->eng_, y)},
               {DNNL_ARG_SCALE, Mem(vec, p->eng_, gamma)},
               {DNNL_ARG_SHIFT, Mem(vec, p->eng_, beta)}}};
  return p;
}

std::unique_ptr<OneDnnPeer> OneDnnPeer::Add(size_t n, const float* a, const float* b, float* y) {
  std::unique_ptr<OneDnnPeer> p(new OneDnnPeer);
  const memory::desc md = Md(1, n);
  dnnl::binary::desc d(dnnl::algorithm::binary_add, md, md, md);
  p->prim_ = dnnl::binary(dnnl::binary::primitive_desc(d, p->eng_));
  p->args_ = {{{DNNL_ARG_SRC_0, Mem(md, p->eng_, a)},
               {DNNL_ARG_SRC_1, Mem(md, p->eng_, b)},
               {DNNL_ARG_DST, Mem(md, p->eng_, y)}}};
  return p;
}

std::unique_ptr<OneDnnPeer> OneDnnPeer::Linear(size_t M, size_t K, size_t N, size_t layers,
                                               const float* x, const float* w, float* y) {
  std::unique_ptr<OneDnnPeer> p(new OneDnnPeer);
  const memory::desc a_md = Md(M, K), b_md = Md(K, N), c_md = Md(M, N);
  const memory::desc b_any({static_cast<memory::dim>(K), static_cast<memory::dim>(N)},
                           memory::data_type::f32, memory::format_tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), p->eng_);
  p->prim_ = dnnl::matmul(pd);
  memory user = Mem(b_md, p->eng_, w);
  for (size_t l = 0; l < layers; ++l) {
    memory packed(pd.weights_desc(), p->eng_);
    dnnl::reorder(user, packed).execute(p->strm_, user, packed);
    p->strm_.wait();
    // Argument maps built once, outside any timed loop (tfk's call takes
    // pointers only).
    p->args_.push_back({{DNNL_ARG_SRC, Mem(a_md, p->eng_, x)},
                        {DNNL_ARG_WEIGHTS, packed},
                        {DNNL_ARG_DST, Mem(c_md, p->eng_, y)}});
  }
  return p;
}

void OneDnnPeer::Run(size_t set) {
  prim_.execute(strm_, args_[set]);
  strm_.wait();
}

}  // namespace tfk_bench
