// Shapes and counters shared by the matmul benchmarks of tfk and its peers.
#ifndef TFK_BENCH_BENCH_MATMUL_H_
#define TFK_BENCH_BENCH_MATMUL_H_

#include <string>
#include <vector>

#include "bench_util.h"

namespace tfk_bench {

// M tokens, K in, N out; `layers` layers of distinct weights of that shape
// called in turn by each iteration (named with an _L<layers> suffix).
struct Shape {
  size_t M, K, N;
  size_t layers = 1;
  std::string Name() const {
    return "M" + std::to_string(M) + "_K" + std::to_string(K) + "_N" + std::to_string(N) +
           (layers > 1 ? "_L" + std::to_string(layers) : "");
  }
  double Flops() const { return 2.0 * M * N * K * layers; }
};

inline std::vector<Shape> MatmulShapes() {
  std::vector<Shape> shapes;
  for (size_t M : {1, 8, 64, 512, 2048}) {
    for (auto kn : {std::pair<size_t, size_t>{1024, 1024}, {1024, 4096}, {4096, 1024}, {4096, 4096}}) {
      shapes.push_back({M, kn.first, kn.second});
    }
  }
  shapes.push_back({512, 4096, 11008});
  return shapes;
}

// Decoding with weights that come from memory: four layers of K = N = 4096
// (256 MiB, the size of the largest memory/read benchmark) called in turn,
// as a model's layers are, at M in {1, 2, 4, 8}. A single layer's 64 MiB
// (the shapes above) stays partly in a last-level cache of that size or
// more between calls, which a model's weights, read once per token, do not.
inline std::vector<Shape> DecodeLayerShapes() {
  std::vector<Shape> shapes;
  for (size_t M : {1, 2, 4, 8}) shapes.push_back({M, 4096, 4096, 4});
  return shapes;
}

inline void SetMatmulCounters(benchmark::State& state, const Shape& s) {
  state.counters["GFLOPS"] =
      benchmark::Counter(s.Flops() * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  if (s.M <= 8) {  // decoding: bound by reading the weights
    state.SetBytesProcessed(static_cast<int64_t>(4.0 * s.K * s.N * s.layers * state.iterations()));
  }
}

}  // namespace tfk_bench

#endif  // TFK_BENCH_BENCH_MATMUL_H_
