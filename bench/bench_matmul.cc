// Matmul on every supported ISA at 1 and all threads, GFLOPS = 2 M N K per
// second: tfk_linear (weights packed once) on the shapes (M tokens, K in,
// N out) M in {1, 8, 64, 512, 2048} x (K, N) in {(1024, 1024), (1024, 4096),
// (4096, 1024), (4096, 4096)}, plus (512, 4096, 11008); tfk_matmul (B packed
// as it goes, on every call) with B [K, N] and [N, K] at M in {1, 64, 512},
// K = N = 1024. Decode shapes (M = 1, 8) also report bytes/s of weights read.
#include "bench_matmul.h"

namespace tfk_bench {
namespace {

void RegisterTfk(const Shape& s) {
  const double flops = 2.0 * s.M * s.N * s.K;
  RegisterPerIsaState("matmul/tfk_linear/" + s.Name(), benchmark::kMillisecond,
                      [=](benchmark::State& state) {
                        Floats x(s.M * s.K), w(s.K * s.N, -0.05f, 0.05f), y(s.M * s.N);
                        tfk_linear* layer = nullptr;
                        tfk::check(tfk_linear_create(&layer, s.K, s.N, w.p, s.N, TFK_LAYOUT_KN,
                                                     nullptr, TFK_ACT_NONE));
                        for (auto _ : state) {
                          tfk::check(tfk_linear_forward(layer, s.M, x.p, s.K, y.p, s.N, nullptr, 0));
                          benchmark::DoNotOptimize(y.p);
                        }
                        tfk_linear_destroy(layer);
                        SetMatmulCounters(state, s, flops);
                      });
}

void RegisterTfkUnpacked(const Shape& s, tfk_layout layout) {
  const double flops = 2.0 * s.M * s.N * s.K;
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
                        SetMatmulCounters(state, s, flops);
                      });
}

const bool kRegistered = [] {
  for (const Shape& s : MatmulShapes()) RegisterTfk(s);
  for (size_t M : {1, 64, 512}) {
    for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) RegisterTfkUnpacked({M, 1024, 1024}, layout);
  }
  return true;
}();

}  // namespace
}  // namespace tfk_bench
