// tfk-ab's problem (bench/tfk_ab.cc): the kernel, its shape and its buffers,
// shared by the sides that run it, the library builds and a peer library.
#ifndef TFK_BENCH_TFK_AB_H_
#define TFK_BENCH_TFK_AB_H_

#include <stddef.h>

#include <functional>
#include <string>

#include "tfk/tfk.h"

namespace tfk_ab {

enum class Kernel { kSoftmax, kLayerNorm, kRmsNorm, kAdd, kLinear, kActivation };

struct Problem {
  Kernel kernel;
  tfk_activation act;         // kActivation
  size_t rows, cols;          // softmax, norms: [rows, cols]; add, activations: cols
  size_t M, K, N, layers;     // linear: X [M, K] times `layers` weights [K, N]
  float *x, *y, *b;           // input, output, add's second input
  const float *gamma, *beta;  // layernorm (rmsnorm: gamma)
  const float* w;             // linear: the weights, [K, N] row-major
  int threads;
};

// oneDNN's call for the problem, on its buffers (its weights packed once per
// layer, the layers taken in turn), run on `threads` OpenMP threads; empty,
// with *why set, where oneDNN has no such kernel or tfk-ab was built without
// it. Defined in tfk_ab_onednn.cc where oneDNN is found.
std::function<void()> OneDnnCall(const Problem& p, std::string* why);

// The machine's limits (tfk_ab_limits.cc), on `threads` threads and the
// vectors of `isa` (the library side's active ISA, a Highway target name);
// empty, with *why set, where the kernel has no such limit or the ISA no
// loop:
// - a copy of the bytes the kernel reads and writes, x to y: the limit a
//   kernel of one input and one output is measured against (not add and
//   linear);
// - the FMA loop doing the flops of linear's call: the limit a compute-bound
//   matmul is measured against (linear only).
std::function<void()> CopyCall(const Problem& p, const char* isa, std::string* why);
std::function<void()> PeakCall(const Problem& p, const char* isa, std::string* why);

}  // namespace tfk_ab

#endif  // TFK_BENCH_TFK_AB_H_
