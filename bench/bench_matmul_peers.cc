// OpenBLAS cblas_sgemm and oneDNN's matmul (weights reordered once into its
// preferred blocked layout) on the shapes of bench_matmul.cc (each layer of
// a DecodeLayerShapes shape with weights of its own), when configure finds
// them. OpenBLAS's kernel choice is reported in the JSON context
// (openblas_corename): run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
// to let it pick its best kernel for this CPU.
#include <memory>
#include <vector>

#include "bench_matmul.h"

#ifdef TFK_BENCH_OPENBLAS
#include <cblas.h>
#endif
#ifdef TFK_BENCH_ONEDNN
#include <omp.h>

#include "onednn_peer.h"
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
  RegisterPerThreads("matmul/onednn_packed/" + s.Name(), 0,
                     [=](benchmark::State& state, int threads) {
                       omp_set_num_threads(threads);
                       Floats a(s.M * s.K), c(s.M * s.N);
                       // One packed copy of the weights per layer (onednn_peer.h).
                       std::unique_ptr<OneDnnPeer> peer;
                       {
                         const Floats b(s.K * s.N, -0.05f, 0.05f);
                         peer = OneDnnPeer::Linear(s.M, s.K, s.N, s.layers, a.p, b.p, c.p);
                       }
                       for (auto _ : state) {
                         for (size_t l = 0; l < s.layers; ++l) peer->Run(l);
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
