// oneDNN's softmax, eltwise (relu, gelu_erf, gelu_tanh) and layer
// normalization on the same shapes as bench_kernels.cc, in the same binary.
// Built only when configure finds oneDNN (libdnnl-dev). oneDNN runs on OpenMP:
// its thread count is set with omp_set_num_threads.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench_util.h"

namespace tfk_bench {
namespace {

using dnnl::memory;

struct Env {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
};

Env& GetEnv() {
  static Env env;
  return env;
}

memory::desc Md(size_t rows, size_t cols) {
  return memory::desc({static_cast<memory::dim>(rows), static_cast<memory::dim>(cols)},
                      memory::data_type::f32, memory::format_tag::ab);
}

template <class MakePrimitive>
void Run(benchmark::State& state, int threads, size_t rows, size_t cols, MakePrimitive make) {
  omp_set_num_threads(threads);
  Env& env = GetEnv();
  const memory::desc md = Md(rows, cols);
  Floats x(rows * cols), y(rows * cols), g(cols), b(cols);
  memory src(md, env.eng, x.p), dst(md, env.eng, y.p);
  memory::desc vec({static_cast<memory::dim>(cols)}, memory::data_type::f32, memory::format_tag::a);
  memory scale(vec, env.eng, g.p), shift(vec, env.eng, b.p);
  dnnl::primitive prim = make(md, env.eng);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst},
                                          {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}};
  for (auto _ : state) {
    prim.execute(env.strm, args);
    env.strm.wait();
  }
  state.SetLabel("oneDNN");
  LetPeerThreadsSleep();
}

void Softmax(size_t rows, size_t cols) {
  RegisterPerThreads("onednn/softmax/" + std::to_string(rows) + "x" + std::to_string(cols),
                     2.0 * rows * cols * 4, [=](benchmark::State& s, int t) {
                       Run(s, t, rows, cols, [](const memory::desc& md, const dnnl::engine& e) {
                         dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, 1);
                         return dnnl::primitive(dnnl::softmax_forward(
                             dnnl::softmax_forward::primitive_desc(d, e)));
                       });
                     });
}

void Eltwise(const char* name, dnnl::algorithm alg, size_t n) {
  RegisterPerThreads(std::string("onednn/") + name + "/" + std::to_string(n), 2.0 * n * 4,
                     [=](benchmark::State& s, int t) {
                       Run(s, t, 1, n, [alg](const memory::desc& md, const dnnl::engine& e) {
                         dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md,
                                                       0.0f, 0.0f);
                         return dnnl::primitive(dnnl::eltwise_forward(
                             dnnl::eltwise_forward::primitive_desc(d, e)));
                       });
                     });
}

void LayerNorm(size_t rows, size_t cols) {
  RegisterPerThreads("onednn/layernorm/" + std::to_string(rows) + "x" + std::to_string(cols),
                     2.0 * rows * cols * 4, [=](benchmark::State& s, int t) {
                       Run(s, t, rows, cols, [](const memory::desc& md, const dnnl::engine& e) {
                         dnnl::layer_normalization_forward::desc d(
                             dnnl::prop_kind::forward_inference, md, 1e-5f,
                             dnnl::normalization_flags::use_scale |
                                 dnnl::normalization_flags::use_shift);
                         return dnnl::primitive(dnnl::layer_normalization_forward(
                             dnnl::layer_normalization_forward::primitive_desc(d, e)));
                       });
                     });
}

const bool kRegistered = [] {
  Softmax(16 * 512, 512);
  Softmax(32 * 2048, 2048);
  Softmax(2048, 32000);
  Softmax(64, 2048);
  for (size_t n : {size_t{16} << 20, size_t{256} << 10}) {
    Eltwise("relu", dnnl::algorithm::eltwise_relu, n);
    Eltwise("gelu_erf", dnnl::algorithm::eltwise_gelu_erf, n);
    Eltwise("gelu_tanh", dnnl::algorithm::eltwise_gelu_tanh, n);
  }
  LayerNorm(2048, 4096);
  LayerNorm(512, 1024);
  return true;
}();

}  // namespace
}  // namespace tfk_bench
