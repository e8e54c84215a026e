// Matmul: target-independent configuration, packed-weight layout and the
// arguments the per-target bodies take. Public contract: include/tfk/tfk.h.
//
// Packed B ("panels"): N is cut into panels of kNR = 32 columns (the last one
// zero-padded); panel p holds, for k = 0..K-1, the 32 values B[k, 32p ..
// 32p+31] contiguously: [n_panels][K][32]. A panel is 128 bytes (two cache
// lines) per k, a whole number of vectors on every x86 target (8 SSE4, 4 AVX2,
// 2 AVX-512 vectors), so one layout serves every ISA and a handle stays valid
// when the ISA cap changes. The microkernels read a panel front to back, and
// a slice [k0, k0 + kc) of it is contiguous.
#ifndef TFK_LIB_MATMUL_H_
#define TFK_LIB_MATMUL_H_

#include <stddef.h>

#include "tfk/tfk.h"

namespace tfk {

constexpr size_t kNR = 32;  // panel width, floats

inline size_t NumPanels(size_t N) { return (N + kNR - 1) / kNR; }

// Cache blocking, from the CPU's cache sizes (sysconf), see docs/matmul.md:
//   kc: k-steps per tile call; a kc x 32 slice of a panel (128 kc bytes, twice
//       L1d) streams from L2 at 128 bytes per k-step, a few bytes per cycle,
//       while the call's fixed costs (12 row pointers, loading and storing the
//       parked partial sums) are spread over more FMAs. Measured on AVX2 with
//       a 32 KiB L1d, M = 512, K = N = 4096: kc = 128 -> 35.1, 256 -> 36.0,
//       512 -> 36.5 GFLOP/s (peak 37);
//   kc_l1: k-steps per tile call where tiles are short (kL1SliceMaxRows):
//       a slice of a third of L1d, which the tiles of an M chunk then read
//       from L1 in turn (MakePlan);
//   mc: the mc x kc block of A fills half of L2;
//   nc: panels per group sharing a workspace of parked partial sums;
//   l2: bytes of L2 (one core's).
struct Blocking {
  size_t kc, kc_l1, mc, nc_panels, l2;
};
Blocking GetBlocking();

// Epilogue applied once, when a tile's last k-block is done:
//   v = alpha * S;  v += beta * C_old (if beta != 0);  v += bias[col];
//   v = act(v);     v += R[row, col] (if R).
struct Epilogue {
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // [n_panels * 32], zero-padded, or null
  int act = TFK_ACT_NONE;
  const float* residual = nullptr;
  size_t ldr = 0;
};

struct GemmArgs {
  size_t M, N, K;
  const float* A;
  size_t lda;
  // Packed B ([n_panels][K][32]), or null: then the unpacked B below is
  // packed block by block into per-thread scratch.
  const float* packed;
  const float* B;
  size_t ldb;
  tfk_layout layout;
  float* C;
  size_t ldc;
  Epilogue epi;
};

}  // namespace tfk

#endif  // TFK_LIB_MATMUL_H_
