// OpenBLAS cblas_sgemm and oneDNN's matmul (weights reordered once into its
// preferred blocked layout) on the shapes of bench_matmul.cc (each layer of
// a DecodeLayerShapes shape with weights of its own), when configure finds
// them. OpenBLAS's kernel choice is reported in the JSON context
// (openblas_corename): run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
// to let it pick its best kernel for this CPU.
#include <memory>
#include <unordered_map>
#include <vector>

#include "bench_matmul.h"

#ifdef TFK_BENCH_OPENBLAS
#include <cblas.h>
#endif
#ifdef TFK_BENCH_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tfk_bench {
namespace {

#ifdef TFK_BENCH_OPENBLAS
void RegisterOpenBlas(const Shape& s) {
  RegisterPerThreads("matmul/openblas/" + s.Name(), 0, [=](benchmark::State& state, int threads) {
    openblas_set_num_threads(threads);
    Floats a(s.M * s.K), c(s.M * s.N);
    std::vector<std::unique_ptr<Floats>> b;
    for (size_t l = 0; l < s.layers; ++l) {
      b.push_back(std::make_unique<Floats>(s.K * s.N, -0.05f, 0.05f));
    }
    for (auto _ : state) {
      for (const auto& bl : b) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.M),
                    static_cast<int>(s.N), static_cast<int>(s.K), 1.0f, a.p, static_cast<int>(s.K),
                    bl->p, static_cast<int>(s.N), 0.0f, c.p, static_cast<int>(s.N));
      }
      benchmark::DoNotOptimize(c.p);
    }
    SetMatmulCounters(state, s);
    state.SetLabel(std::string("OpenBLAS ") + openblas_get_corename());
  });
}
#endif

#ifdef TFK_BENCH_ONEDNN
void RegisterOneDnn(const Shape& s) {
  RegisterPerThreads("matmul/onednn_packed/" + s.Name(), 0, [=](benchmark::State& state, int threads) {
    using dnnl::memory;
    omp_set_num_threads(threads);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const memory::dim M = s.M, K = s.K, N = s.N;
    memory::desc a_md({M, K}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc b_any({K, N}, memory::data_type::f32, memory::format_tag::any);
    memory::desc b_md({K, N}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc c_md({M, N}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
    Floats a(s.M * s.K), c(s.M * s.N);
    memory a_mem(a_md, eng, a.p), c_mem(c_md, eng, c.p);
    std::vector<memory> b_mem;  // one packed copy per layer
    for (size_t l = 0; l < s.layers; ++l) {
      Floats b(s.K * s.N, -0.05f, 0.05f);
      memory b_user(b_md, eng, b.p);
      b_mem.emplace_back(pd.weights_desc(), eng);
      dnnl::reorder(b_user, b_mem.back()).execute(strm, b_user, b_mem.back());  // pack once
      strm.wait();
    }
    dnnl::matmul prim(pd);
    // The argument maps are built once, outside the timed loop (tfk's call
    // takes pointers only).
    std::vector<std::unordered_map<int, memory>> args;
    for (const memory& bl : b_mem) {
      args.push_back({{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, bl}, {DNNL_ARG_DST, c_mem}});
    }
    for (auto _ : state) {
      for (const auto& layer_args : args) prim.execute(strm, layer_args);
      strm.wait();
    }
    SetMatmulCounters(state, s);
    state.SetLabel("oneDNN packed");
    LetPeerThreadsSleep();
  });
}
#endif

const bool kRegistered = [] {
  std::vector<Shape> shapes = MatmulShapes();
  for (const Shape& s : DecodeLayerShapes()) shapes.push_back(s);
  for (const Shape& s : shapes) {
#ifdef TFK_BENCH_OPENBLAS
    RegisterOpenBlas(s);
#endif
#ifdef TFK_BENCH_ONEDNN
    RegisterOneDnn(s);
#endif
    (void)s;
  }
#ifdef TFK_BENCH_OPENBLAS
  benchmark::AddCustomContext("openblas_corename", openblas_get_corename());
#endif
  return true;
}();

}  // namespace
}  // namespace tfk_bench
