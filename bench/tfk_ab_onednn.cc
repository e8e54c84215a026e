// tfk-ab's oneDNN side: the primitives tfk_bench times beside tfk
// (bench_onednn.cc, bench_matmul_peers.cc), on tfk-ab's buffers. Built where
// configure finds oneDNN; it runs on OpenMP, whose thread count is set here.
#include <omp.h>

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "tfk_ab.h"

namespace tfk_ab {
namespace {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

// What the call keeps alive: the engine and stream, the primitive, its
// argument maps (one per layer for linear: their weights packed once).
struct State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::primitive prim;
  std::vector<Args> args;
  size_t next = 0;
};

memory::desc Md(size_t rows, size_t cols) {
  return memory::desc({static_cast<memory::dim>(rows), static_cast<memory::dim>(cols)},
                      memory::data_type::f32, memory::format_tag::ab);
}

memory Mem(const memory::desc& md, const dnnl::engine& eng, const float* p) {
  return memory(md, eng, const_cast<float*>(p));  // oneDNN reads it only
}

dnnl::primitive Eltwise(dnnl::algorithm alg, float alpha, const memory::desc& md,
                        const dnnl::engine& eng) {
  dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, alpha, 0.0f);
  return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, eng));
}

}  // namespace

std::function<void()> OneDnnCall(const Problem& p, std::string* why) {
  omp_set_num_threads(p.threads);
  auto s = std::make_shared<State>();
  const dnnl::engine& eng = s->eng;
  const memory::desc md = Md(p.rows, p.cols);
  const Args io = {{DNNL_ARG_SRC, Mem(md, eng, p.x)}, {DNNL_ARG_DST, Mem(md, eng, p.y)}};
  switch (p.kernel) {
    case Kernel::kSoftmax: {
      dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, 1);
      s->prim = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(d, eng));
      s->args = {io};
      break;
    }
    case Kernel::kLayerNorm: {
      dnnl::layer_normalization_forward::desc d(
          dnnl::prop_kind::forward_inference, md, 1e-5f,
          dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift);
      s->prim = dnnl::layer_normalization_forward(
          dnnl::layer_normalization_forward::primitive_desc(d, eng));
      const memory::desc vec({static_cast<memory::dim>(p.cols)}, memory::data_type::f32,
                             memory::format_tag::a);
      Args a = io;
      a.insert({DNNL_ARG_SCALE, Mem(vec, eng, p.gamma)});
      a.insert({DNNL_ARG_SHIFT, Mem(vec, eng, p.beta)});
      s->args = {a};
      break;
    }
    case Kernel::kRmsNorm:
      *why = "oneDNN's 2.x API, which tfk-ab uses, has no RMSNorm";
      return {};
    case Kernel::kAdd: {
      dnnl::binary::desc d(dnnl::algorithm::binary_add, md, md, md);
      s->prim = dnnl::binary(dnnl::binary::primitive_desc(d, eng));
      s->args = {{{DNNL_ARG_SRC_0, Mem(md, eng, p.x)},
                  {DNNL_ARG_SRC_1, Mem(md, eng, p.b)},
                  {DNNL_ARG_DST, Mem(md, eng, p.y)}}};
      break;
    }
    case Kernel::kActivation: {
      // SiLU is oneDNN's swish, x sigmoid(alpha x), with alpha 1.
      const dnnl::algorithm alg = p.act == TFK_ACT_RELU        ? dnnl::algorithm::eltwise_relu
                                  : p.act == TFK_ACT_GELU_ERF  ? dnnl::algorithm::eltwise_gelu_erf
                                  : p.act == TFK_ACT_GELU_TANH ? dnnl::algorithm::eltwise_gelu_tanh
                                                               : dnnl::algorithm::eltwise_swish;
      s->prim = Eltwise(alg, p.act == TFK_ACT_SILU ? 1.0f : 0.0f, md, eng);
      s->args = {io};
      break;
    }
    case Kernel::kLinear: {
      // Weights in oneDNN's preferred layout (format_tag::any), reordered
      // into it once per layer, as tfk packs them once per handle.
      const memory::desc a_md = Md(p.M, p.K), b_md = Md(p.K, p.N), c_md = Md(p.M, p.N);
      const memory::desc b_any({static_cast<memory::dim>(p.K), static_cast<memory::dim>(p.N)},
                               memory::data_type::f32, memory::format_tag::any);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
      s->prim = dnnl::matmul(pd);
      for (size_t l = 0; l < p.layers; ++l) {
        memory user = Mem(b_md, eng, p.w), packed(pd.weights_desc(), eng);
        dnnl::reorder(user, packed).execute(s->strm, user, packed);
        s->strm.wait();
        s->args.push_back({{DNNL_ARG_SRC, Mem(a_md, eng, p.x)},
                           {DNNL_ARG_WEIGHTS, packed},
                           {DNNL_ARG_DST, Mem(c_md, eng, p.y)}});
      }
      break;
    }
  }
  return [s] {
    s->prim.execute(s->strm, s->args[s->next]);
    s->strm.wait();
    s->next = s->next + 1 == s->args.size() ? 0 : s->next + 1;
  };
}

}  // namespace tfk_ab
