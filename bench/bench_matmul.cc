// Matmul on every supported ISA at 1 and all threads, GFLOPS = 2 M N K per
// second: tfk_linear (weights packed once) on the shapes (M tokens, K in,
// N out) M in {1, 8, 64, 512, 2048} x (K, N) in {(1024, 1024), (1024, 4096),
// (4096, 1024), (4096, 4096)}, plus (512, 4096, 11008); tfk_matmul (B packed
// as it goes, on every call) with B [K, N] and [N, K] at M in {1, 64, 512},
// K = N = 1024. Decode shapes (M = 1, 8) also report bytes/s of weights read,
// as do the decoding shapes with four layers of weights called in turn
// (DecodeLayerShapes, M in {1, 2, 4, 8}: weights from memory).
#include <vector>

#include "bench_matmul.h"

namespace tfk_bench {
namespace {

void RegisterTfk(const Shape& s) {
  RegisterPerIsaState("matmul/tfk_linear/" + s.Name(), benchmark::kMillisecond,
                      [=](benchmark::State& state) {
                        Floats x(s.M * s.K), y(s.M * s.N);
                        std::vector<tfk_linear*> layers(s.layers);
                        for (tfk_linear*& layer : layers) {
                          Floats w(s.K * s.N, -0.05f, 0.05f);  // packed, then freed
                          tfk::check(tfk_linear_create(&layer, s.K, s.N, w.p, s.N, TFK_LAYOUT_KN,
                                                       nullptr, TFK_ACT_NONE));
                        }
                        for (auto _ : state) {
                          for (tfk_linear* layer : layers) {
                            tfk::check(
                                tfk_linear_forward(layer, s.M, x.p, s.K, y.p, s.N, nullptr, 0));
                          }
                          benchmark::DoNotOptimize(y.p);
                        }
                        for (tfk_linear* layer : layers) tfk_linear_destroy(layer);
                        SetMatmulCounters(state, s);
                      });
}

void RegisterTfkUnpacked(const Shape& s, tfk_layout layout) {
  const bool nk = layout == TFK_LAYOUT_NK;
  RegisterPerIsaState(std::string("matmul_unpacked/") + (nk ? "NK_" : "KN_") + s.Name(),
                      benchmark::kMillisecond, [=](benchmark::State& state) {
                        Floats a(s.M * s.K), b(s.K * s.N, -0.05f, 0.05f), c(s.M * s.N);
                        const size_t ldb = nk ? s.K : s.N;
                        for (auto _ : state) {
                          tfk::check(tfk_matmul(s.M, s.N, s.K, 1.0f, a.p, s.K, b.p, ldb, layout,
                                                0.0f, c.p, s.N));
                          benchmark::DoNotOptimize(c.p);
                        }
                        SetMatmulCounters(state, s);
                      });
}

const bool kRegistered = [] {
  for (const Shape& s : MatmulShapes()) RegisterTfk(s);
  for (const Shape& s : DecodeLayerShapes()) RegisterTfk(s);
  for (size_t M : {1, 64, 512}) {
    for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) RegisterTfkUnpacked({M, 1024, 1024}, layout);
  }
  return true;
}();

}  // namespace
}  // namespace tfk_bench
