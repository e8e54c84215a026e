// tfk's row kernels on every supported ISA, 1 and all threads: DRAM-sized
// inputs and L2-resident ones (softmax [64, 2048], 256K-float activations
// and adds, LayerNorm [512, 1024]).
#include "bench_util.h"

namespace tfk_bench {
namespace {

std::string Shape(size_t a, size_t b) { return std::to_string(a) + "x" + std::to_string(b); }

void RegisterSoftmax(size_t rows, size_t cols) {
  RegisterPerIsa("softmax/" + Shape(rows, cols), 2.0 * rows * cols * 4, [=] {
    auto x = std::make_shared<Floats>(rows * cols), y = std::make_shared<Floats>(rows * cols);
    return Runner([=] {
      tfk::softmax(rows, cols, x->data(), y->data(), 0.125f);
      benchmark::DoNotOptimize(y->data());
    });
  });
}

void RegisterActivation(const char* name, tfk_activation act, size_t n) {
  RegisterPerIsa(std::string(name) + "/" + std::to_string(n), 2.0 * n * 4, [=] {
    auto x = std::make_shared<Floats>(n), y = std::make_shared<Floats>(n);
    return Runner([=] {
      tfk::activate(act, 1, n, x->data(), y->data());
      benchmark::DoNotOptimize(y->data());
    });
  });
}

// y = a + b (the residual add): two reads and a write, like the triad.
void RegisterAdd(size_t n) {
  RegisterPerIsa("add/" + std::to_string(n), 3.0 * n * 4, [=] {
    auto a = std::make_shared<Floats>(n), b = std::make_shared<Floats>(n);
    auto y = std::make_shared<Floats>(n);
    return Runner([=] {
      tfk::add(1, n, a->data(), b->data(), y->data());
      benchmark::DoNotOptimize(y->data());
    });
  });
}

void RegisterNorm(const char* name, bool layer, size_t rows, size_t cols) {
  RegisterPerIsa(std::string(name) + "/" + Shape(rows, cols), 2.0 * rows * cols * 4, [=] {
    auto x = std::make_shared<Floats>(rows * cols), y = std::make_shared<Floats>(rows * cols);
    auto g = std::make_shared<Floats>(cols), b = std::make_shared<Floats>(cols);
    return Runner([=] {
      if (layer) {
        tfk::layernorm(rows, cols, x->data(), g->data(), b->data(), 1e-5f, y->data());
      } else {
        tfk::rmsnorm(rows, cols, x->data(), g->data(), 1e-5f, y->data());
      }
      benchmark::DoNotOptimize(y->data());
    });
  });
}

void RegisterRope(tfk_rope_pairing pairing, size_t tokens, size_t heads, size_t d) {
  const char* name = pairing == TFK_ROPE_HALF ? "rope_half/" : "rope_interleaved/";
  RegisterPerIsa(name + std::to_string(tokens) + "x" + Shape(heads, d), 2.0 * tokens * heads * d * 4,
                 [=] {
                   auto x = std::make_shared<Floats>(tokens * heads * d, -1.0f, 1.0f);
                   tfk::rope_config c{d, d, pairing, 10000.0};
                   return Runner([=] {
                     tfk::rope(c, tokens, heads, x->data());  // in place, positions 0 ..
                     benchmark::DoNotOptimize(x->data());
                   });
                 });
}

const bool kRegistered = [] {
  RegisterSoftmax(16 * 512, 512);
  RegisterSoftmax(32 * 2048, 2048);
  RegisterSoftmax(2048, 32000);
  RegisterSoftmax(64, 2048);  // L2-resident
  for (size_t n : {size_t{16} << 20, size_t{256} << 10}) {
    RegisterActivation("relu", TFK_ACT_RELU, n);
    RegisterActivation("gelu_erf", TFK_ACT_GELU_ERF, n);
    RegisterActivation("gelu_tanh", TFK_ACT_GELU_TANH, n);
    RegisterActivation("silu", TFK_ACT_SILU, n);
    RegisterAdd(n);
  }
  RegisterNorm("layernorm", true, 2048, 4096);
  RegisterNorm("layernorm", true, 512, 1024);  // L2-resident
  RegisterNorm("rmsnorm", false, 2048, 4096);
  RegisterRope(TFK_ROPE_HALF, 512, 32, 128);
  RegisterRope(TFK_ROPE_INTERLEAVED, 512, 32, 128);
  return true;
}();

}  // namespace
}  // namespace tfk_bench
