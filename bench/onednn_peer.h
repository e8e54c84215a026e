// oneDNN's primitives that tfk is measured beside, on the caller's buffers:
// tfk_bench's peer benchmarks (bench_onednn.cc, bench_matmul_peers.cc) and
// tfk-ab's oneDNN side (tfk_ab_onednn.cc) build them here, so that both tools
// time the same calls. Built only where configure finds oneDNN (libdnnl-dev)
// and OpenMP; oneDNN runs on OpenMP, whose thread count the caller sets
// (omp_set_num_threads) before Run.
#ifndef TFK_BENCH_ONEDNN_PEER_H_
#define TFK_BENCH_ONEDNN_PEER_H_

#include <stddef.h>

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "tfk/tfk.h"

namespace tfk_bench {

// One primitive with one or more argument sets (the layers of a linear
// layer, each with weights of its own). The buffers it reads and writes
// stay the caller's and must outlive it; Linear's weights w are read only
// while Linear runs (it keeps reordered copies).
class OneDnnPeer {
 public:
  // Softmax over each row of x [rows, cols] into y.
  static std::unique_ptr<OneDnnPeer> Softmax(size_t rows, size_t cols, const float* x, float* y);
  // y = act(x) over n floats: ReLU, GELU (erf, tanh) and SiLU (oneDNN's
  // swish with alpha 1).
  static std::unique_ptr<OneDnnPeer> Activation(tfk_activation act, size_t n, const float* x,
                                                float* y);
  // LayerNorm of x [rows, cols] with gamma and beta [cols], eps 1e-5.
  static std::unique_ptr<OneDnnPeer> LayerNorm(size_t rows, size_t cols, const float* x,
                                               const float* gamma, const float* beta, float* y);
  // y = a + b over n floats.
  static std::unique_ptr<OneDnnPeer> Add(size_t n, const float* a, const float* b, float* y);
  // y [M, N] = x [M, K] w [K, N] (row-major) for `layers` argument sets, each
  // with its own copy of w reordered once into oneDNN's preferred layout
  // (format_tag::any), as tfk packs weights once per handle: layers > 1 reads
  // weights from memory, as a model's successive layers do.
  static std::unique_ptr<OneDnnPeer> Linear(size_t M, size_t K, size_t N, size_t layers,
                                            const float* x, const float* w, float* y);

  size_t sets() const { return args_.size(); }
  // Executes the primitive with argument set `set` and waits for it.
  void Run(size_t set = 0);

 private:
  using Args = std::unordered_map<int, dnnl::memory>;
  OneDnnPeer() = default;
  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm_{eng_};
  dnnl::primitive prim_;
  std::vector<Args> args_;
};

}  // namespace tfk_bench

#endif  // TFK_BENCH_ONEDNN_PEER_H_
