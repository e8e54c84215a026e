// Matmul: tfk_linear (weights packed once) and tfk_matmul on every supported
// ISA at 1 and all threads, GFLOPS = 2 M N K per second. Shapes (M tokens,
// K in, N out): M in {1, 8, 64, 512, 2048} x (K, N) in {(1024, 1024),
// (1024, 4096), (4096, 1024), (4096, 4096)}, plus (512, 4096, 11008).
// Decode shapes (M = 1, 8) also report bytes/s of weights read.
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

const bool kRegistered = [] {
  for (const Shape& s : MatmulShapes()) RegisterTfk(s);
  return true;
}();

}  // namespace
}  // namespace tfk_bench
