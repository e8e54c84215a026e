// Shapes and counters shared by the matmul benchmarks of tfk and its peers.
#ifndef TFK_BENCH_BENCH_MATMUL_H_
#define TFK_BENCH_BENCH_MATMUL_H_

#include <string>
#include <vector>

#include "bench_util.h"

namespace tfk_bench {

struct Shape {
  size_t M, K, N;
  std::string Name() const {
    return "M" + std::to_string(M) + "_K" + std::to_string(K) + "_N" + std::to_string(N);
  }
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

inline void SetMatmulCounters(benchmark::State& state, const Shape& s, double flops) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  if (s.M <= 8) {  // decoding: bound by reading the weights
    state.SetBytesProcessed(static_cast<int64_t>(4.0 * s.K * s.N * state.iterations()));
  }
}

}  // namespace tfk_bench

#endif  // TFK_BENCH_BENCH_MATMUL_H_
