// oneDNN's softmax, eltwise (relu, gelu_erf, gelu_tanh) and layer
// normalization on the same shapes as bench_kernels.cc, in the same binary
// (the primitives: onednn_peer.h). Built only when configure finds oneDNN
// (libdnnl-dev). oneDNN runs on OpenMP: its thread count is set with
// omp_set_num_threads.
#include <omp.h>

#include "bench_util.h"
#include "onednn_peer.h"

namespace tfk_bench {
namespace {

// Times make(x, y, gamma, beta)'s primitive on buffers of rows x cols.
template <class Make>
void Run(benchmark::State& state, int threads, size_t rows, size_t cols, const Make& make) {
  omp_set_num_threads(threads);
  Floats x(rows * cols), y(rows * cols), g(cols), b(cols);
  const std::unique_ptr<OneDnnPeer> peer = make(x.p, y.p, g.p, b.p);
  for (auto _ : state) peer->Run();
  state.SetLabel("oneDNN");
  LetPeerThreadsSleep();
}

void Softmax(size_t rows, size_t cols) {
  RegisterPerThreads("onednn/softmax/" + std::to_string(rows) + "x" + std::to_string(cols),
                     2.0 * rows * cols * 4, [=](benchmark::State& s, int t) {
                       Run(s, t, rows, cols, [&](float* x, float* y, float*, float*) {
                         return OneDnnPeer::Softmax(rows, cols, x, y);
                       });
                     });
}

void Activation(const char* name, tfk_activation act, size_t n) {
  RegisterPerThreads(std::string("onednn/") + name + "/" + std::to_string(n), 2.0 * n * 4,
                     [=](benchmark::State& s, int t) {
                       Run(s, t, 1, n, [&](float* x, float* y, float*, float*) {
                         return OneDnnPeer::Activation(act, n, x, y);
                       });
                     });
}

void LayerNorm(size_t rows, size_t cols) {
  RegisterPerThreads("onednn/layernorm/" + std::to_string(rows) + "x" + std::to_string(cols),
                     2.0 * rows * cols * 4, [=](benchmark::State& s, int t) {
                       Run(s, t, rows, cols, [&](float* x, float* y, float* g, float* b) {
                         return OneDnnPeer::LayerNorm(rows, cols, x, g, b, y);
                       });
                     });
}

const bool kRegistered = [] {
  Softmax(16 * 512, 512);
  Softmax(32 * 2048, 2048);
  Softmax(2048, 32000);
  Softmax(64, 2048);
  for (size_t n : {size_t{16} << 20, size_t{256} << 10}) {
    Activation("relu", TFK_ACT_RELU, n);
    Activation("gelu_erf", TFK_ACT_GELU_ERF, n);
    Activation("gelu_tanh", TFK_ACT_GELU_TANH, n);
  }
  LayerNorm(2048, 4096);
  LayerNorm(512, 1024);
  return true;
}();

}  // namespace
}  // namespace tfk_bench
