// Matmul microkernel and tile loops, per target. Configuration and packed
// layout: lib/matmul.h; design and figures: docs/matmul.md.
//
// Register tile: kMR rows x 32 columns (one panel), held in kMR * 32/N
// accumulators, N = lanes per vector:
//   AVX-512 (N = 16): 14 x 32 -> 28 zmm accumulators of 32, 2 for the B
//                     vectors, 1 for the broadcast A value.
//   AVX2    (N = 8):   3 x 32 -> 12 ymm accumulators of 16, 3 broadcasts, 1 B.
//   SSE4    (N = 4):   1 x 32 ->  8 xmm accumulators (no FMA: mul + add).
// Two FMA pipes of latency 4 need >= 8 independent accumulators; more give
// more FMAs per load (AVX-512: 28 FMAs per 2 B loads and 14 broadcasts).
// On AVX-512, A is packed per tile as [kc][kMR] (one pointer, kMR
// consecutive values per k-step), so the 14-row tile needs no row pointers.
// Each C element is one sequential FMA chain over k = 0..K-1; k-blocks only
// park the chain in the workspace W between blocks, so results do not depend
// on blocking, tiling or threads.

#if defined(TFK_LIB_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TFK_LIB_MATMUL_INL_H_
#undef TFK_LIB_MATMUL_INL_H_
#else
#define TFK_LIB_MATMUL_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/activation-inl.h"
#include "lib/elementwise-inl.h"
#include "lib/matmul.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kLanes = HWY_MAX_BYTES / sizeof(float);
constexpr size_t kNV = kNR / kLanes;  // vectors per panel row
constexpr size_t kMaxMR = kLanes >= 16 ? 14 : (kLanes >= 8 ? 3 : 1);
// AVX-512 packs A (see below); AVX2 and SSE4 read the caller's rows directly
// (3 or 1 row pointers): packing cost them ~3 % and buys them nothing.
constexpr bool kPackA = kLanes >= 16;
// Element (i, k) of a tile's A: packed [kc][kMR], or rows of stride lda.
#define TFK_A_AT(a, lda, i, k) (kPackA ? (a)[(k) * kMR + (i)] : (a)[(i) * (lda) + (k)])

// The epilogue on one vector of S (columns col .. col + N of row `row`).
// c_old / res point at the row's C and R values for those columns.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ApplyEpilogue(D d, V s, const Epilogue& e, const float* c_old, const float* bias,
                           const float* res) {
  V v = hn::Mul(s, hn::Set(d, e.alpha));
  if (e.beta != 0.0f) v = hn::MulAdd(hn::Set(d, e.beta), hn::LoadU(d, c_old), v);
  if (bias != nullptr) v = hn::Add(v, hn::LoadU(d, bias));
  switch (e.act) {
    case TFK_ACT_RELU: v = Relu(d, v); break;
    case TFK_ACT_GELU_ERF: v = GeluErf(d, v); break;
    case TFK_ACT_GELU_TANH: v = GeluTanh(d, v); break;
    case TFK_ACT_SILU: v = Silu(d, v); break;
    default: break;
  }
  if (res != nullptr) v = hn::Add(v, hn::LoadU(d, res));
  return v;
}

// Applies the epilogue to a tile's accumulators (kMR rows x one panel) and
// writes columns [0, n_valid) to c (stride ldc), whose absolute position is
// (row0, col0) for bias and residual. A partial panel goes through row
// buffers, so no load or store touches columns >= n_valid.
template <size_t kMR, class D, class V = hn::Vec<D>>
HWY_INLINE void StoreTile(D d, const V (&acc)[kMR][kNV], float* c, size_t ldc, size_t n_valid,
                          size_t row0, size_t col0, const Epilogue& epi) {
  HWY_ALIGN float cbuf[kNR], rbuf[kNR], ybuf[kNR];
  const float* bias = epi.bias ? epi.bias + col0 : nullptr;
  for (size_t i = 0; i < kMR; ++i) {
    float* crow = c + i * ldc;
    const float* rrow = epi.residual ? epi.residual + (row0 + i) * epi.ldr + col0 : nullptr;
    // Full panel: straight from and to C and R. Partial: through buffers.
    const float* csrc = crow;
    const float* rsrc = rrow;
    float* dst = crow;
    if (n_valid != kNR) {
      if (epi.beta != 0.0f) memcpy(cbuf, crow, n_valid * sizeof(float));
      if (rrow) memcpy(rbuf, rrow, n_valid * sizeof(float));
      csrc = cbuf;
      rsrc = rrow ? rbuf : nullptr;
      dst = ybuf;
    }
#pragma GCC unroll 16
    for (size_t j = 0; j < kNV; ++j) {
      const size_t o = j * kLanes;
      hn::StoreU(ApplyEpilogue(d, acc[i][j], epi, csrc + o, bias ? bias + o : nullptr,
                               rsrc ? rsrc + o : nullptr),
                 d, dst + o);
    }
    if (n_valid != kNR) memcpy(crow, ybuf, n_valid * sizeof(float));
  }
}

// A vector of a panel slice: packed slices are 64-byte aligned; the decoding
// tile also reads unpacked [K, N] weights in place (kUnaligned).
template <bool kUnaligned, class D>
HWY_INLINE hn::Vec<D> LoadB(D d, const float* p) {
  return kUnaligned ? hn::LoadU(d, p) : hn::Load(d, p);
}

// Tile of kMR rows x one panel: acc = (first ? 0 : W) + A[:, k0:k0+kc] * Bslice.
// a: the tile's rows of A, packed as [kc][kMR] (kPackA) or the caller's rows
// at column k0 with stride lda; b: the panel slice, [kc][32] with rows ldk
// floats apart (kNR: packed; the caller's B for decoding from unpacked
// [K, N] weights); w: [kMR][32] partial sums. If last, applies the
// epilogue and writes columns [0, n_valid) of the tile to c (stride ldc),
// whose absolute position is (row0, col0) for bias and residual.
// pf (may be null): the caller's share of the next panel slice (see Gemm),
// whose rows of 32 floats (two lines) lie pf_ld floats apart, one 64-byte
// line every 2^pf_shift k-steps: step k = l 2^pf_shift asks for line l % 2
// of row l / 2 (packed slices, pf_shift 0: pf_ld = 32, so pf + 16 k). The
// decoding variant instead asks for both lines of row k of the next panel
// (GemmPlan::next_panel), and pf_l1 chooses where its own panel's
// prefetches go (below).
//
// The decoding variant (kPrefetch) prefetches its panel 64 k-steps (8 KiB)
// ahead into L2 on AMD cores with AVX-512. One Zen 4 core, medians of per-round ratios over 41 rounds against
// 32 k-steps (4 KiB): M = 8, K = N = 4096 +16 %, M = 4 +5 %; 48 k-steps +4 %;
// AVX2's M = 3 +8 %; two threads the same within noise. (4 KiB had been
// chosen on a Xeon, where 64 to 256 measured the same within its noise.)
// Both its streams go into L2 only (PrefetchToL2): against L1, one
// Zen 4 core, K = N = 4096, medians of per-round ratios: M = 8 / 4 / 2
// +19-25 / +18 / +26 %, M = 14 +7 %, AVX2's M = 3 +48 %; two threads M = 8
// / 4 +10-22 / +17 %, M = 2 +3 %; in cache (K = N = 1024) the same within
// 3 %. (128 k-steps ahead into L2: -7 to +11 %.)
// Into L1 kDecodePrefetchStepsL1 = 8 k-steps ahead instead, as the
// several-panel tiles, where the CPU is not AMD with AVX-512
// (detail::DecodePrefetchToL1, pf_l1), since the packed weights are on huge
// pages. Model 167 Xeon, weights from memory (4 layers of 64 MiB), medians
// of per-round ratios of two library copies over 11 rounds in both orders,
// this code against the one before it: AVX2's M = 2 / 3 +12-13 / +27-28 %
// (two threads M = 3 +28 %); AVX-512's M = 14 on two threads +21-22 %, one
// thread the same, M = 13 +1 %; K = N = 1024 (in cache) M = 14 +7 % (AVX2's
// M = 3 the same). With TFK_DECODE_PREFETCH_L1=0 (both copies prefetching
// into L2, 64 k-steps ahead) AVX2's M = 2 and M = 14 in cache measured the
// same, so those gains are the L1's; but AVX2's M = 3 still gained 28 % and
// M = 14 on two threads 18 %: the code's alone (the constant distance made
// a variable), which is how much code generation moves these loops. 4
// k-steps ahead measured 1-2 % below 8; 16 3-4 % above it for AVX-512's
// M = 13-14 but 13-15 % below for AVX2's M = 3. (On 4 KiB pages the same
// change had measured mixed, -13 to +10 %, where the two copies' pages
// differed more than the prefetches did: bench/tfk_ab.cc.)
constexpr size_t kDecodePrefetchSteps = 64, kDecodePrefetchStepsL1 = 8;
// The next tile's parked partial sums (w + kMR * 32: tiles of a panel, and
// the panels of a group, lie one after another in W) are prefetched during
// this tile's first 2 kMR k-steps, one line each, when it will load them
// (not first): W holds a group's 32 panels x mc rows (~1 MiB at mc = 256),
// so they come back from L3, and the 28 loads at a tile's start stalled it.
// One Zen 4 core, medians of per-round ratios over two runs: M = 512,
// K = N = 4096 +1.8-2.7 %, M = 2048, K = 4096, N = 1024 +0-2 %, M = 512,
// K = 1024, N = 4096 +0-1.4 %, M = 2048, K = N = 1024 +2 %; two threads
// +0-2 %. AVX-512 only: AVX2's 3-row tiles run a k-step in ~6 cycles, and
// the test in the loop cost them 10-15 %.
constexpr bool kPrefetchNextW = kPackA;
template <size_t kMR, bool kPrefetch>
HWY_NOINLINE void Tile(size_t kc, const float* HWY_RESTRICT a, size_t lda,
                       const float* HWY_RESTRICT b, size_t ldk, float* HWY_RESTRICT w, bool first,
                       bool last, float* c, size_t ldc, size_t n_valid, size_t row0,
                       size_t col0, const Epilogue& epi, const float* pf, size_t pf_ld,
                       size_t pf_shift, bool pf_l1) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  V acc[kMR][kNV];
#pragma GCC unroll 16
  for (size_t i = 0; i < kMR; ++i) {
#pragma GCC unroll 16
    for (size_t j = 0; j < kNV; ++j) {
      acc[i][j] = first ? hn::Zero(d) : hn::Load(d, w + i * kNR + j * kLanes);
    }
  }
  const size_t pf_dist = pf_l1 ? kDecodePrefetchStepsL1 : kDecodePrefetchSteps;
  // Two k-steps an iteration halve the loop's own instructions (the
  // prefetch tests, pointer steps, the compare and branch: ~10 beside the 44
  // of a k-step on AVX-512): M = 140, K = 512, N = 256 (in L2), one AVX-512 core,
  // medians of per-round ratios in both orders +4 % and +1 %; M = 512,
  // K = N = 2048 +2 %.
#pragma GCC unroll 2
  for (size_t k = 0; k < kc; ++k) {
    const float* bk = b + k * (kPrefetch ? ldk : kNR);
    if (kPrefetch) {
      // Decoding streams each panel once from memory: ask for it pf_dist
      // k-steps ahead (into L2, kDecodePrefetchSteps: beyond what the
      // out-of-order window reaches when a k-step carries many FMAs; into
      // L1, kDecodePrefetchStepsL1: the hardware's streams reach L2 first),
      // within the slice.
      if (k + pf_dist < kc) {
        if (pf_l1) {
          hwy::Prefetch(bk + pf_dist * ldk);
          hwy::Prefetch(bk + pf_dist * ldk + 16);
        } else {
          PrefetchToL2(bk + pf_dist * ldk);
          PrefetchToL2(bk + pf_dist * ldk + 16);
        }
      }
      if (pf != nullptr) {  // the next panel, as a second stream
        PrefetchToL2(pf + k * pf_ld);
        PrefetchToL2(pf + k * pf_ld + 16);
      }
    } else {
      if (pf != nullptr && (k & ((size_t{1} << pf_shift) - 1)) == 0) {
        const size_t l = k >> pf_shift;
        PrefetchToL2(pf + (l >> 1) * pf_ld + (l & 1) * 16);
      }
      if (kPrefetchNextW && !first && k < 2 * kMR) hwy::Prefetch(w + kMR * kNR + k * 16);
    }
    if (kNV <= 2) {
      // AVX-512: both B vectors stay loaded; each broadcast of A is used at
      // once by its row's two FMAs, so 28 accumulators + 2 B + 1 broadcast
      // fit the 32 registers (broadcasting all rows first would spill).
      V bv[kNV];
#pragma GCC unroll 16
      for (size_t j = 0; j < kNV; ++j) bv[j] = LoadB<kPrefetch>(d, bk + j * kLanes);
#pragma GCC unroll 16
      for (size_t i = 0; i < kMR; ++i) {
        const V ai = hn::Set(d, TFK_A_AT(a, lda, i, k));
#pragma GCC unroll 16
        for (size_t j = 0; j < kNV; ++j) acc[i][j] = hn::MulAdd(ai, bv[j], acc[i][j]);
      }
    } else {
      // AVX2 / SSE4: one B vector at a time against the kMR broadcasts
      // (AVX2: 12 accumulators + 3 broadcasts + 1 B = 16 registers).
#pragma GCC unroll 16
      for (size_t j = 0; j < kNV; ++j) {
        const V bj = LoadB<kPrefetch>(d, bk + j * kLanes);
#pragma GCC unroll 16
        for (size_t i = 0; i < kMR; ++i) {
          acc[i][j] = hn::MulAdd(hn::Set(d, TFK_A_AT(a, lda, i, k)), bj, acc[i][j]);
        }
      }
    }
  }
  if (!last) {
#pragma GCC unroll 16
    for (size_t i = 0; i < kMR; ++i) {
#pragma GCC unroll 16
      for (size_t j = 0; j < kNV; ++j) hn::Store(acc[i][j], d, w + i * kNR + j * kLanes);
    }
    return;
  }
  StoreTile<kMR>(d, acc, c, ldc, n_valid, row0, col0, epi);
}

using TileFn = void (*)(size_t, const float*, size_t, const float*, size_t, float*, bool, bool, float*,
                        size_t, size_t, size_t, size_t, const Epilogue&, const float*, size_t,
                        size_t, bool);

// Tile kernels for 1 .. kMaxMR rows.
// prefetch: the decoding variant, which prefetches B ahead.
HWY_INLINE TileFn TileForRows(size_t rows, bool prefetch) {
  switch (rows) {
    case 1: return prefetch ? &Tile<1, true> : &Tile<1, false>;
#if HWY_MAX_BYTES >= 32
    case 2: return prefetch ? &Tile<2, true> : &Tile<2, false>;
    case 3: return prefetch ? &Tile<3, true> : &Tile<3, false>;
#endif
#if HWY_MAX_BYTES >= 64
    case 4: return prefetch ? &Tile<4, true> : &Tile<4, false>;
    case 5: return prefetch ? &Tile<5, true> : &Tile<5, false>;
    case 6: return prefetch ? &Tile<6, true> : &Tile<6, false>;
    case 7: return prefetch ? &Tile<7, true> : &Tile<7, false>;
    case 8: return prefetch ? &Tile<8, true> : &Tile<8, false>;
    case 9: return prefetch ? &Tile<9, true> : &Tile<9, false>;
    case 10: return prefetch ? &Tile<10, true> : &Tile<10, false>;
    case 11: return prefetch ? &Tile<11, true> : &Tile<11, false>;
    case 12: return prefetch ? &Tile<12, true> : &Tile<12, false>;
    case 13: return prefetch ? &Tile<13, true> : &Tile<13, false>;
    case 14: return prefetch ? &Tile<14, true> : &Tile<14, false>;
#endif
  }
  return nullptr;
}

// Decoding with one row of A (M = 1): kDecodePanels panels at once, each an
// independent stream of weights from memory. A core here reads one
// sequential stream at ~12 GB/s but four interleaved ones at 15-17 (more
// lines in flight), which is how oneDNN's M = 1 ran at 1.3x tfk's
// single-panel tile. Registers: 4 x kNV accumulators plus the broadcast;
// on AVX2 that is 17 of 16, so two accumulators live in L1 (a load and a
// store each per k-step, hidden behind memory: M = 1, K = N = 4096, one
// thread, medians of 7 alternating runs: 1 panel 11.6 GB/s, 2 panels 15.3,
// 3 panels 14.2, 4 panels 17.0; in cache, 4 MiB of weights, 44 -> 51).
// SSE4's 8 accumulators per panel leave room for one panel only. Each C
// element is still one FMA chain over k in order: the same bits as Tile<1>.
constexpr size_t kDecodePanels = kNV >= 8 ? 1 : 4;

// Decoding tiles of 2-6 rows (AVX-512) read several panels at once too:
// the most (up to 4) whose B vectors and accumulators fit the 32 registers
// with a broadcast, (kM + 1) kP kNV + 1 <= 32: 4 panels for 2 rows, 3 for
// 3-4, 2 for 5-6. They had read one panel, one stream, with software
// prefetches (Tile<kM, true>). One Xeon core (family 6 model 167), medians
// of per-round ratios in both orders, K = N = 4096 with weights read from
// memory (4 layers of 64 MiB called in turn): M = 2 / 3 / 4 / 5 / 6 +20 /
// +4 / +8 / +6 / +13 %, two threads M = 2 / 4 / 6 +14 / +5 / +1 %; one
// layer, partly cached: M = 2 / 3 / 4 / 6 +9 / +5 / +14 / -7 %; K = 1024
// (16 layers): M = 2 / 4 +13 / +10 %. M = 7 on two panels (B as FMA
// operands, 28 accumulators) gained 5 % from memory and lost 6-10 % in
// cache, so 7 rows and more keep one panel.
// These tiles also prefetch each panel kRowPanelsPrefetch k-steps (3 KiB)
// ahead into L2, on top of the hardware's streams: 4 KiB ahead against
// none, same Xeon, medians of per-round ratios in both orders, from memory
// M = 2 / 3 / 4 / 5 / 6 +6 / +10 / +9-10 / +13-19 / +20 %, two threads M =
// 4 / 6 +10 / +22 %, one layer partly cached M = 4 / 6 +17 / +23 %, K =
// 1024 M = 4 +10 %; 8 KiB less (M = 3 +3 %). 3 KiB against 4: from memory
// M = 2 / 3 / 4 / 5 / 6 +1 / +2 / +3 / +2 / +5 %, two threads M = 4 / 6 +2
// / +4 %, K = 1024 (16 layers) M = 4 +3 %, one layer in L3 the same; 2 and
// 2.5 KiB about as 3. M = 1 (no prefetch) measured the same with it.
// Where a task's weights stay in its L2 from call to call (K = N = 1024,
// one layer called again on two threads: 2 MiB a core) prefetches into L2
// only added L1 misses: without them M = 2 / 4 / 6 +15 / +14 / +9 % (model
// 167, medians of per-round ratios of two library copies; against
// prefetches into L1 24 k-steps ahead, detail::DecodePrefetchToL1, +3 % at
// M = 4). But a model's layers evict
// each other: 16 such layers called in turn, without them, -6 / -15 / -22 %
// (one thread -28 / -11 / -18 %), and a task cannot tell the two apart, so
// they stay.
constexpr size_t kRowPanelsPrefetch = 24;
// Prefetched into L1 instead (detail::DecodePrefetchToL1), 8 k-steps ahead
// (1 KiB of each panel): the hardware's streams bring the weights into L2
// and these only need to cover L2's latency; farther ahead they held L1
// fill buffers for a whole trip to memory. Model 167 Xeon, weights from
// memory (4 layers of 64 MiB), medians of per-round ratios of two library
// copies over 9-15 rounds, with kSplitPrefetchL1 alike (8 / 16 against
// 24 / 36 k-steps, then 8 against 16 / 12): M = 6 / 8 +15 / +11 % (two
// threads +12 / +10 %); 8 against 12-16: M = 4 / 8 +8 / +9 % (two threads
// +6 / +7 %); 4 measured 0-4 % above 8 there. Where the weights come from
// L3 instead (one layer called again, 64 MiB on a 480 MiB L3) farther was
// better: M = 8, 8 against 16, -8 / -13 %; K = N = 1024, M = 12 -2.5 /
// 0 %. A model's weights are read from memory at every token.
constexpr size_t kRowPanelsPrefetchL1 = 8;
// One row (M = 1, AVX2 and AVX-512, four panels at once) had relied on the
// hardware's streams alone. With them it prefetches each panel 4 k-steps
// (512 bytes) ahead into L1 where the several-panel tiles do (not on AMD:
// detail::DecodePrefetchToL1). Model 167 Xeon, packed weights on huge
// pages, medians of per-round ratios of two library copies over 11 rounds
// in both orders: K = N = 4096 from memory (4 layers) +11 / +12 %, two
// threads +13 / +12 %, AVX2 +6 %; K = 1024, N = 4096 over 16 layers +11 %;
// one layer of 64 MiB (partly in L3) +5-9 %; K = N = 1024 (in cache) the
// same, two threads +7 %. 8 k-steps ahead +7-10 / +9 / +2 / +7 / +6 / +2-4
// %, 12 +3 %, 2-3 about as 4.
constexpr size_t kOneRowPrefetchL1 = 4;

template <size_t kM>
constexpr size_t DecodePanelsForRows() {
  if (kM == 1) return kDecodePanels;
  if (kNV > 2) return 1;
  for (size_t p = 4; p >= 2; --p) {
    if ((kM + 1) * p * kNV + 1 <= 32) return p;
  }
  return 1;
}

// kM rows of A, element (i, k) at a[k a_ks + i] (packed A: a_ks is the
// packed tile's row count, a sub-tile's a starts at its first row; one
// unpacked row: a_ks = 1), times kP panels of B: b, panel_stride floats
// apart, rows ldk floats apart (packed: K kNR and kNR; unpacked [K, N]:
// kNR and ldb), kc k-steps of them. w: kP x kM x kNR partial sums, 64-byte
// aligned, loaded unless `first` and stored unless `last` (null if both);
// if last, c: rows ldc apart, columns col0 .., of which n_cols remain
// (> (kP - 1) kNR), row0 the first row's index (bias and residual).
// With kM > 1, each k-step prefetches row k + pf_dist of the panels
// if that is below pf_rows, the rows from b on (0: none): of its 2 kP lines
// (line 2p + h: panel p, bytes 64h ..), those whose bit is set in pf_lines;
// into L1 if pf_l1, else into L2 only (detail::DecodePrefetchToL1). One row
// prefetches all 2 kP lines into L1 where pf_dist is not 0
// (kOneRowPrefetchL1).
// Each C element is one FMA chain over k in order: the bits of Tile<kM>.
template <size_t kM, size_t kP>
HWY_NOINLINE void TileRowPanels(size_t kc, const float* HWY_RESTRICT a, size_t a_ks,
                                const float* HWY_RESTRICT b, size_t panel_stride, size_t ldk,
                                float* HWY_RESTRICT w, bool first, bool last, float* c,
                                size_t ldc, size_t n_cols, size_t row0, size_t col0,
                                const Epilogue& epi, size_t pf_dist, size_t pf_rows,
                                uint32_t pf_lines, bool pf_l1) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  V acc[kP][kM][kNV];
  // fn(accumulator, its offset in w) for each accumulator.
  const auto each = [&](const auto& fn) HWY_ATTR {
#pragma GCC unroll 16
    for (size_t p = 0; p < kP; ++p) {
#pragma GCC unroll 16
      for (size_t i = 0; i < kM; ++i) {
#pragma GCC unroll 16
        for (size_t j = 0; j < kNV; ++j) fn(acc[p][i][j], (p * kM + i) * kNR + j * kLanes);
      }
    }
  };
  each([&](V& v, size_t o) HWY_ATTR { v = first ? hn::Zero(d) : hn::Load(d, w + o); });
  for (size_t k = 0; k < kc; ++k) {
    if (kM == 1) {
      // One row: each B vector is used once, straight from memory.
      if (pf_dist != 0 && k + pf_dist < pf_rows) {
        const float* row = b + (k + pf_dist) * ldk;
#pragma GCC unroll 16
        for (size_t p = 0; p < kP; ++p) {
          hwy::Prefetch(row + p * panel_stride);
          hwy::Prefetch(row + p * panel_stride + 16);
        }
      }
      const V ak = hn::Set(d, a[k * a_ks]);
#pragma GCC unroll 16
      for (size_t p = 0; p < kP; ++p) {
        const float* bk = b + p * panel_stride + k * ldk;
#pragma GCC unroll 16
        for (size_t j = 0; j < kNV; ++j) {
          acc[p][0][j] = hn::MulAdd(ak, hn::LoadU(d, bk + j * kLanes), acc[p][0][j]);
        }
      }
    } else {
      if (k + pf_dist < pf_rows) {
        const float* row = b + (k + pf_dist) * ldk;
        if (pf_l1) {
#pragma GCC unroll 16
          for (size_t p = 0; p < kP; ++p) {
            if (pf_lines & (1u << (2 * p))) hwy::Prefetch(row + p * panel_stride);
            if (pf_lines & (2u << (2 * p))) hwy::Prefetch(row + p * panel_stride + 16);
          }
        } else {
#pragma GCC unroll 16
          for (size_t p = 0; p < kP; ++p) {
            if (pf_lines & (1u << (2 * p))) PrefetchToL2(row + p * panel_stride);
            if (pf_lines & (2u << (2 * p))) PrefetchToL2(row + p * panel_stride + 16);
          }
        }
      }
      // B's kP x kNV vectors loaded once for the kM rows, as in Tile.
      V bv[kP][kNV];
#pragma GCC unroll 16
      for (size_t p = 0; p < kP; ++p) {
#pragma GCC unroll 16
        for (size_t j = 0; j < kNV; ++j) {
          bv[p][j] = hn::LoadU(d, b + p * panel_stride + k * ldk + j * kLanes);
        }
      }
#pragma GCC unroll 16
      for (size_t i = 0; i < kM; ++i) {
        const V ai = hn::Set(d, a[k * a_ks + i]);
#pragma GCC unroll 16
        for (size_t p = 0; p < kP; ++p) {
#pragma GCC unroll 16
          for (size_t j = 0; j < kNV; ++j) acc[p][i][j] = hn::MulAdd(ai, bv[p][j], acc[p][i][j]);
        }
      }
    }
  }
  if (!last) {
    each([&](V& v, size_t o) HWY_ATTR { hn::Store(v, d, w + o); });
    return;
  }
#pragma GCC unroll 16
  for (size_t p = 0; p < kP; ++p) {
    const size_t left = n_cols - p * kNR;
    StoreTile<kM>(d, acc[p], c + p * kNR, ldc, left < kNR ? left : kNR, row0, col0 + p * kNR,
                  epi);
  }
}

// TileRowPanels<rows, DecodePanelsForRows<rows>()>, and that panel count,
// for 1 .. 7 rows (null and 1 where there is no such tile).
using RowPanelsFn = void (*)(size_t, const float*, size_t, const float*, size_t, size_t, float*,
                             bool, bool, float*, size_t, size_t, size_t, size_t,
                             const Epilogue&, size_t, size_t, uint32_t, bool);
template <size_t kM>
HWY_INLINE RowPanelsFn RowPanelsTile(size_t& panels) {
  panels = DecodePanelsForRows<kM>();
  if constexpr (DecodePanelsForRows<kM>() > 1) {
    return &TileRowPanels<kM, DecodePanelsForRows<kM>()>;
  } else {
    return nullptr;
  }
}
HWY_INLINE RowPanelsFn RowPanelsForRows(size_t rows, size_t& panels) {
  panels = 1;
  switch (rows) {
    case 1: return RowPanelsTile<1>(panels);
    case 2: return RowPanelsTile<2>(panels);
    case 3: return RowPanelsTile<3>(panels);
    case 4: return RowPanelsTile<4>(panels);
    case 5: return RowPanelsTile<5>(panels);
    case 6: return RowPanelsTile<6>(panels);
    case 7: return RowPanelsTile<7>(panels);
  }
  return nullptr;
}

// Decoding tiles of 7-12 rows (AVX-512), whose accumulators leave no room
// for a second panel, run as 2-3 sub-tiles of 3-4 rows over kSplitPanels
// panels (3) instead, k-block by k-block: the first sub-tile reads the
// block from memory, as three streams; the others find it in L1. Partial
// sums wait in w between blocks (each C element is still one FMA chain over
// k in order: the bits of Tile<rows>). FMAs per panel and k-step are those
// of the one-panel tile (2 rows a vector), a second and third load of each
// B vector aside. They had read one panel as one stream with software
// prefetches (and the next panel as a second, where one task ran): one Xeon
// core (family 6 model 167), K = N = 4096, medians of per-round ratios in
// both orders, weights from memory (4 layers of 64 MiB called in turn):
// M = 7 / 8 / 10 / 12 / 14 +12 / +19-23 / +8 / +6 / +2 % (M = 13-14, four
// sub-tiles, keep the one-panel tile: since the L1 prefetches, they measured
// +18-22 % from memory on one thread but -6 % on two and -34 % at K = N =
// 1024, in cache; as two 7-row tiles of the k-blocked path +8-11 %, two
// threads -22-25 %); sub-tiles of 2 rows over 4 panels or of 2-3 over 3 ran
// 16 / 12 % slower than of 4 over 3.
// Each sub-tile prefetches its share of the six lines of a k-step (a half
// or a third) kSplitPrefetch k-steps ahead (4.5 KiB of each panel), so
// prefetches go out whichever sub-tile computes. Where the weights come
// from L3 or memory, blocks are short (kSplitKcStream k-steps): the
// sub-tiles take turns often enough for the out-of-order core to overlap
// one's FMAs with the next one's loads. Where the weights fit L2, blocks are
// longer (kSplitKcCached), as each costs a sub-tile 24 loads and stores of
// partial sums (M = 8, K = N = 512, one core: 32 k-steps -10 %, 8 -38 %).
// Against blocks of 64 k-steps with the first sub-tile prefetching every
// line a block ahead, same Xeon and method: from memory M = 7 / 8 / 9 / 10
// / 11 / 12 +18 / +14 / +24 / +24 / +26 / +23 %, two threads M = 8 / 12 +6
// / +17 %; K = N = 1024 (4 MiB, in L3) M = 8 / 12 +18 / +28 %; K = N = 512
// (in L2) -2 to -3 %. Blocks of 16 / 64 k-steps from memory: M = 8 +9 / +0
// %; prefetching 16 / 32 k-steps ahead +9 / +7 %; the first sub-tile
// prefetching every line 24 k-steps ahead: M = 8 +14 %, M = 12 at K = 1024
// -3 %. 48 k-steps ahead against the 24 of the one-panel tiles (which
// measure the same either way), another Xeon (family 6 model 207), from
// memory (tfk-ab --layers 4): M = 8 +8 % on one and two threads, M = 10 /
// 12 +6 / +4 %, two threads M = 12 +5 %; 36 k-steps about as 48, 64 -4 %,
// 96 -2 %; none at all -14 %; M = 8 at K = N = 1024 (in L3) the same. With
// it, blocks of 64 k-steps lost 7 % and of 16 measured the same as 32.
// Back on a model 167 Xeon (a calmer host), against 48, medians of
// per-round ratios of two library copies (tfk-ab, 9-11 rounds), from
// memory: 24 k-steps M = 7 / 8 / 12 +15 / +19 / +7 %, two threads M = 8
// +14 %; 36 k-steps M = 7 / 8 / 12 +9 / +11 / +13 %, two threads M = 8
// +9 %; 32 about as 36, 8-16 about as 24, 96 -1 %; in L3 (one layer,
// M = 10) and in L2 (K = N = 1024, M = 8) -2 to +1 %. 36 takes most of
// that gain here and, per the model 207 runs above, loses nothing there
// (where 24 lost 6-8 %). These distances into L2 now serve AMD cores only
// (detail::DecodePrefetchToL1), where they were not measured; elsewhere
// the prefetches go into L1, kSplitPrefetchL1 ahead.
constexpr size_t kSplitPanels = DecodePanelsForRows<3>();
static_assert(kSplitPanels == DecodePanelsForRows<4>(), "sub-tiles of 3 and 4 rows");
constexpr size_t kSplitMinRows = 7, kSplitMaxRows = 12;
constexpr size_t kSplitKcStream = 32, kSplitKcCached = 64;
constexpr size_t kSplitPrefetch = 36;
constexpr size_t kSplitPrefetchL1 = 8;  // into L1: see kRowPanelsPrefetchL1

// Sub-tile `sub` of `subs`: its lines of a k-step (TileRowPanels' pf_lines),
// [sub, sub + 1) x 2 kSplitPanels / subs.
constexpr uint32_t SplitPrefetchLines(size_t sub, size_t subs) {
  constexpr size_t kLines = 2 * kSplitPanels;
  return (1u << ((sub + 1) * kLines / subs)) - (1u << (sub * kLines / subs));
}
static_assert(2 * kSplitPanels < 32, "a bit per line");
constexpr uint32_t kSplitAllLines = (1u << 2 * kSplitPanels) - 1;
static_assert((SplitPrefetchLines(0, 2) | SplitPrefetchLines(1, 2)) == kSplitAllLines &&
                  (SplitPrefetchLines(0, 2) & SplitPrefetchLines(1, 2)) == 0,
              "two sub-tiles prefetch every line once");
static_assert((SplitPrefetchLines(0, 3) | SplitPrefetchLines(1, 3) | SplitPrefetchLines(2, 3)) ==
                      kSplitAllLines &&
                  (SplitPrefetchLines(0, 3) & SplitPrefetchLines(1, 3)) == 0 &&
                  (SplitPrefetchLines(1, 3) & SplitPrefetchLines(2, 3)) == 0 &&
                  (SplitPrefetchLines(0, 3) & SplitPrefetchLines(2, 3)) == 0,
              "three sub-tiles prefetch every line once");

// Rows [0, rows) of A (packed [K][rows]), 7 <= rows <= kSplitMaxRows,
// against kSplitPanels packed panels from b (K kNR floats apart), kc
// k-steps a block; w: rows x kSplitPanels x kNR floats, 64-byte aligned; c,
// ldc, n_cols, row0, col0, pf_dist, pf_l1: as TileRowPanels (pf_dist:
// kSplitPrefetchL1 or kSplitPrefetch).
HWY_INLINE void TileRowsSplit(size_t K, size_t kc, const float* a, size_t rows, const float* b,
                              float* w, float* c, size_t ldc, size_t n_cols, size_t row0,
                              size_t col0, const Epilogue& epi, size_t pf_dist, bool pf_l1) {
  if constexpr (kSplitPanels > 1) {
    const size_t subs = (rows + 3) / 4, base = rows / subs, extra = rows % subs;
    for (size_t kd = 0; kd < K; kd += kc) {
      const size_t kl = K - kd < kc ? K - kd : kc;
      const bool first = kd == 0, last = kd + kl == K;
      for (size_t sub = 0, i0 = 0; sub < subs; ++sub) {
        const size_t sr = base + (sub < extra ? 1 : 0);
        const auto fn = sr == 4 ? &TileRowPanels<4, kSplitPanels> : &TileRowPanels<3, kSplitPanels>;
        fn(kl, a + kd * rows + i0, rows, b + kd * kNR, K * kNR, kNR, w + i0 * kSplitPanels * kNR,
           first, last, c + i0 * ldc, ldc, n_cols, row0 + i0, col0, epi, pf_dist, K - kd,
           SplitPrefetchLines(sub, subs), pf_l1);
        i0 += sr;
      }
    }
  }
}

// Transposes a square block of kLanes x kLanes floats in registers: on
// entry r[i] holds row i (kLanes consecutive values), on exit r[j] holds
// column j. 32-bit and 64-bit interleaves within 128-bit blocks transpose
// each 4 x 4 sub-block; wider vectors then transpose the blocks themselves
// (AVX2: halves; AVX-512: a 4 x 4 transpose of blocks). AVX-512: 80
// shuffles and blends for 256 floats.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void TransposeSquare(D d, V* r) {
  const hn::Repartition<double, D> dd;
  constexpr size_t kG = kLanes / 4;  // groups of 4 rows
  // v[g][j], block b: rows 4g .. 4g + 3 at column 4b + j.
  V v[kG][4];
#pragma GCC unroll 4
  for (size_t g = 0; g < kG; ++g) {
    const V a0 = hn::InterleaveLower(d, r[4 * g], r[4 * g + 1]);
    const V a1 = hn::InterleaveUpper(d, r[4 * g], r[4 * g + 1]);
    const V b0 = hn::InterleaveLower(d, r[4 * g + 2], r[4 * g + 3]);
    const V b1 = hn::InterleaveUpper(d, r[4 * g + 2], r[4 * g + 3]);
    v[g][0] = hn::BitCast(d, hn::InterleaveLower(dd, hn::BitCast(dd, a0), hn::BitCast(dd, b0)));
    v[g][1] = hn::BitCast(d, hn::InterleaveUpper(dd, hn::BitCast(dd, a0), hn::BitCast(dd, b0)));
    v[g][2] = hn::BitCast(d, hn::InterleaveLower(dd, hn::BitCast(dd, a1), hn::BitCast(dd, b1)));
    v[g][3] = hn::BitCast(d, hn::InterleaveUpper(dd, hn::BitCast(dd, a1), hn::BitCast(dd, b1)));
  }
#pragma GCC unroll 4
  for (size_t j = 0; j < 4; ++j) {
#if HWY_MAX_BYTES == 64
    // Blocks: x = [v0.0 v1.0 v0.2 v1.2], y = [v0.1 v1.1 v0.3 v1.3], z and w
    // the same of v2 and v3; column 4b + j = [v0.b v1.b v2.b v3.b].
    const V x = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(v[1][j]), v[0][j]);
    const V y = hn::OddEvenBlocks(v[1][j], hn::SwapAdjacentBlocks(v[0][j]));
    const V z = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(v[3][j]), v[2][j]);
    const V w = hn::OddEvenBlocks(v[3][j], hn::SwapAdjacentBlocks(v[2][j]));
    r[0 + j] = hn::ConcatLowerLower(d, z, x);
    r[4 + j] = hn::ConcatLowerLower(d, w, y);
    r[8 + j] = hn::ConcatUpperUpper(d, z, x);
    r[12 + j] = hn::ConcatUpperUpper(d, w, y);
#elif HWY_MAX_BYTES == 32
    r[0 + j] = hn::ConcatLowerLower(d, v[1][j], v[0][j]);
    r[4 + j] = hn::ConcatUpperUpper(d, v[1][j], v[0][j]);
#else
    r[j] = v[0][j];
#endif
  }
}

// Reads 32 rows of B stored [N, K] (rows[i] points at row i's column 0)
// over columns [0, kc) rounded down to whole 64-byte lines, as k-steps:
// f(v, k, r) gets r[j] = column k + j of rows v kLanes .. (v + 1) kLanes,
// for each row block v in order of k. A step takes a whole line of each row:
// rows K floats apart (4 KiB at K = 1024) share a few L1 sets, so a line
// must be used up before the next row's evicts it (AVX2 using half of each
// line per step: 14 GB/s of B where whole lines gave 24, one Zen 4 core,
// K = N = 1024). Returns the columns done.
template <class D, class F>
HWY_INLINE size_t TransposedRowSteps(D d, const float* const* rows, size_t kc, const F& f) {
  constexpr size_t kLine = 64 / sizeof(float);
  constexpr size_t kSub = kLine / kLanes;  // transposes per row block and line
  size_t k = 0;
  for (; k + kLine <= kc; k += kLine) {
#pragma GCC unroll 8
    for (size_t v = 0; v < kNV; ++v) {
#pragma GCC unroll 4
      for (size_t h = 0; h < kSub; ++h) {
        hn::Vec<D> r[kLanes];
#pragma GCC unroll 16
        for (size_t i = 0; i < kLanes; ++i) r[i] = hn::LoadU(d, rows[v * kLanes + i] + k + h * kLanes);
        TransposeSquare(d, r);
        f(v, k + h * kLanes, r);
      }
    }
  }
  return k;
}

#if HWY_MAX_BYTES == 64
// Packs 16 k-steps of a tile of mr rows (kMinTransposedRows..16): rows
// src + i lda, columns [0, 16), to t[k * mr + i]. The rows (and the last
// one again up to 16) are transposed in registers (TransposeSquare); output
// vector k holds the tile's mr values of step k (and 16 - mr more), stored
// whole at t + mr k: its extra floats land in step k + 1's slots, written
// next. `last`: t + 16 mr ends the tile, so step 15 stores mr floats only.
// The scalar gather it replaces (two memory operations an element, with the
// row pointers spilled) took 6 % of M = 512, K = N = 4096 on one AVX-512
// core.
// kStream (a piece the call's tasks share, PackedPiece): where t is 64-byte
// aligned, the block's mr whole lines are arranged in an L1 staging buffer
// and leave as streaming stores, so no line of the shared buffer is read
// before it is written. Stored in place, each line, last read by both cores
// in the previous call, had first to be taken from the other core: with two
// threads packing cost ~3 ns an element against 0.5 on one (M = 64, K =
// 4096, N = 1024: 10 % of the samples, and 6 % more in the other task
// waiting for it). Streamed, the tiles read the piece back from memory, once
// per core, while they stream B anyway: packing's share of the samples
// fell to 4-5 %. Two Zen 4 cores, medians of per-round ratios over three
// runs: M = 64, K = 4096, N = 1024 +3 to +20 % (unstreamed, it ran at ~157
// or ~190 GFLOP/s from one process to the next; streamed, at 190), K =
// 1024, N = 4096 +0-6 %. Where no other task reads the piece, it is not
// streamed (GemmPlan::stream_a), nor on CPUs where reading it back from
// memory cost more than the transfer (detail::StreamSharedPackedA: on a
// Xeon, +3-5 % unstreamed).
constexpr size_t kMinTransposedRows = 8;
template <bool kStream>
HWY_INLINE void PackATileTransposed(const float* src, size_t lda, size_t mr, float* t, bool last) {
  const hn::ScalableTag<float> d;
  hn::Vec<decltype(d)> r[16];
#pragma GCC unroll 16
  for (size_t i = 0; i < 16; ++i) r[i] = hn::LoadU(d, src + (i < mr ? i : mr - 1) * lda);
  TransposeSquare(d, r);
  if (kStream && (reinterpret_cast<uintptr_t>(t) & 63) == 0) {
    HWY_ALIGN float stage[16 * 16];  // step k's mr values at stage + k mr
#pragma GCC unroll 16
    for (size_t k = 0; k < 16; ++k) hn::StoreU(r[k], d, stage + k * mr);
    for (size_t j = 0; j < mr; ++j) hn::Stream(hn::Load(d, stage + j * 16), d, t + j * 16);
    return;
  }
  // In order of k: each store's extra floats are overwritten by the next.
#pragma GCC unroll 16
  for (size_t k = 0; k < 15; ++k) hn::StoreU(r[k], d, t + k * mr);
  if (last) {
    hn::BlendedStore(r[15], hn::FirstN(d, mr), d, t + 15 * mr);
  } else {
    hn::StoreU(r[15], d, t + 15 * mr);
  }
}
#endif

// One row of A times B stored [N, K], read in place: columns [32 p, 32 p +
// 32) of C's row c (M = 1 of tfk_matmul with [N, K] weights, a GEMV). Each
// of the panel's 32 rows of B is read front to back, kLanes of them at a
// time turned into k-steps by TransposeSquare, so every output is one FMA
// chain over k in order from zero: the bits of Tile<1> on the packed panel
// (and of tfk_linear). Rows past N repeat row N - 1 and are not stored.
// It reads B once, as 32 sequential streams (before, B's slices were packed
// into scratch by 4 x 4 transposes, then multiplied by Tile<1>).
inline HWY_NOINLINE void GemvPanelNK(size_t K, const float* HWY_RESTRICT a, const float* B,
                              size_t ldb, size_t N, size_t p, float* c, const Epilogue& epi) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t col0 = p * kNR;
  const size_t n_valid = N - col0 < kNR ? N - col0 : kNR;
  const float* rows[kNR];
  for (size_t i = 0; i < kNR; ++i) rows[i] = B + (i < n_valid ? col0 + i : N - 1) * ldb;
  V acc[1][kNV];
#pragma GCC unroll 8
  for (size_t v = 0; v < kNV; ++v) acc[0][v] = hn::Zero(d);
  size_t k = TransposedRowSteps(d, rows, K, [&](size_t v, size_t k0, const V* r) HWY_ATTR {
#pragma GCC unroll 16
    for (size_t j = 0; j < kLanes; ++j) acc[0][v] = hn::MulAdd(hn::Set(d, a[k0 + j]), r[j], acc[0][v]);
  });
  for (; k < K; ++k) {
    HWY_ALIGN float col[kNR];
    for (size_t i = 0; i < kNR; ++i) col[i] = rows[i][k];
#pragma GCC unroll 8
    for (size_t v = 0; v < kNV; ++v) {
      acc[0][v] = hn::MulAdd(hn::Set(d, a[k]), hn::Load(d, col + v * kLanes), acc[0][v]);
    }
  }
  StoreTile<1>(d, acc, c + col0, 0, n_valid, 0, col0, epi);
}

// Row tiles of a chunk of `rows` rows: as few as kMaxMR rows allow, of
// heights that differ by at most one (tile t starts at row Start(t) and has
// Rows(t) rows), so that chunks equal in rows are equal work. Chunks of
// whole 14-row tiles gave M = 512 two of 266 and 246 rows, and one thread
// waited for the other: two Zen 4 cores, medians of per-round ratios,
// M = 512, K = N = 1024 +2.5 %, K = N = 4096 +1.3 %, M = 2048, K = 1024,
// N = 4096 +1.4 %; one thread the same within noise.
struct RowTiles {
  size_t n, base, extra;
  explicit RowTiles(size_t rows)
      : n((rows + kMaxMR - 1) / kMaxMR), base(rows / n), extra(rows % n) {}
  size_t Start(size_t t) const { return t * base + (t < extra ? t : extra); }
  size_t Rows(size_t t) const { return base + (t < extra ? 1 : 0); }
};

// Packs rows [0, rows) and columns [0, kc) of A (stride lda) as the tiles
// of RowTiles(rows), each [kc][tile rows]: tile t starts at dst + Start(t)
// kc. Tiles of 8 rows or more go 16 k-steps at a time through a register
// transpose (PackATileTransposed); the rest element by element, k outer:
// each k-step writes its tile-row values contiguously while the rows are
// read as mr sequential streams. Row outer (stores 56 bytes apart) took
// 7.6 % of the samples of M = 512, K = N = 4096 on one AVX-512 core, k
// outer 4.0 % (137 -> 142 GFLOP/s, medians of 9 alternating runs).
// PackATile packs one tile (`tile` of rt); kStream: its transposed blocks
// are streamed (PackATileTransposed), and the caller fences before the tile
// is read.
template <bool kStream>
HWY_INLINE void PackATile(const float* a, size_t lda, const RowTiles& rt, size_t tile, size_t kc,
                          float* dst) {
  const size_t r = rt.Start(tile), mr = rt.Rows(tile);
  float* t = dst + r * kc;
  const float* src = a + r * lda;
  size_t k = 0;
#if HWY_MAX_BYTES == 64
  static_assert(kMaxMR <= 16, "PackATileTransposed packs at most 16 rows");
  if (mr >= kMinTransposedRows) {
    for (; k + 16 <= kc; k += 16) {
      PackATileTransposed<kStream>(src + k, lda, mr, t + k * mr, k + 16 == kc);
    }
  }
#endif
  for (; k < kc; ++k) {
    for (size_t i = 0; i < mr; ++i) t[k * mr + i] = src[i * lda + k];
  }
}

HWY_INLINE void PackA(const float* a, size_t lda, size_t rows, size_t kc, float* dst) {
  const RowTiles rt(rows);
  for (size_t tile = 0; tile < rt.n; ++tile) PackATile<false>(a, lda, rt, tile, kc, dst);
}

// Packs columns [32 p, 32 p + 32) and rows [k0, k0 + kc) of B into dst
// ([kc][32], 64-byte aligned, zero-padded past N). [K, N]: each row's 32
// values are copied as whole vectors. [N, K]: the panel's columns are rows of
// B; a whole panel goes a 64-byte line of each of its 32 rows at a time
// through register transposes (TransposedRowSteps), writing whole rows of
// dst; the k-steps left over, and partial panels, in 4 x 4 blocks of
// 128-bit vectors, the edges element by element. (The 4 x 4 blocks alone,
// which took a quarter of each row's line per step: tfk_matmul with [N, K]
// B on one Zen 4 core, AVX3 / AVX2, M = 64, K = N = 1024 -22 / -19 %, M = 8,
// K = N = 4096 -28 / -32 %; M = 512 -1 / -4 %.)
// tfk_matmul packs B on every call: with a memcpy per row of 32 and an
// element-wise gather it was a fifth (M = 512) to almost half (M = 64)
// slower than tfk_linear at K = N = 1024 on one AVX-512 core (docs/matmul.md).
HWY_INLINE void PackPanelSlice(const float* B, size_t ldb, tfk_layout layout, size_t N,
                               size_t p, size_t k0, size_t kc, float* dst) {
  const hn::ScalableTag<float> d;
  const size_t col0 = p * kNR;
  const size_t n = N - col0 < kNR ? N - col0 : kNR;
  if (layout == TFK_LAYOUT_KN) {
    const float* src = B + k0 * ldb + col0;
    size_t k = 0;
    if (n == kNR) {
      // Rows a step, in 8 vectors: their loads (each row on its own page
      // when N >= 1024) are issued together (AVX-512, M = 8, K = N = 4096:
      // +5 %, where one row a step had been 9 % slower in another build of
      // the same loop).
      constexpr size_t kRows = kNV <= 2 ? 4 : (kNV <= 4 ? 2 : 1);
      for (; k + kRows <= kc; k += kRows, src += kRows * ldb) {
        hn::Vec<decltype(d)> v[kRows][kNV];
#pragma GCC unroll 4
        for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
          for (size_t j = 0; j < kNV; ++j) v[r][j] = hn::LoadU(d, src + r * ldb + j * kLanes);
        }
#pragma GCC unroll 4
        for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
          for (size_t j = 0; j < kNV; ++j) hn::Store(v[r][j], d, dst + (k + r) * kNR + j * kLanes);
        }
      }
    }
    for (; k < kc; ++k, src += ldb) {
      float* out = dst + k * kNR;
      for (size_t j = 0; j < n; ++j) out[j] = src[j];
      for (size_t j = n; j < kNR; ++j) out[j] = 0.0f;
    }
    return;
  }
  const hn::Full128<float> d4;
  const float* src = B + col0 * ldb + k0;  // row j of src: column col0 + j of the panel
  // A whole panel: whole lines of its 32 rows through register transposes
  // (TransposedRowSteps); the rest in 4 x 4 blocks of 128-bit vectors.
  size_t k_done = 0;
  if (n == kNR) {
    const float* rows[kNR];
    for (size_t i = 0; i < kNR; ++i) rows[i] = src + i * ldb;
    using V = hn::Vec<decltype(d)>;
    k_done = TransposedRowSteps(d, rows, kc, [&](size_t v, size_t k, const V* r) HWY_ATTR {
#pragma GCC unroll 16
      for (size_t j = 0; j < kLanes; ++j) hn::Store(r[j], d, dst + (k + j) * kNR + v * kLanes);
    });
  }
  const size_t n4 = n / 4 * 4, kc4 = k_done + (kc - k_done) / 4 * 4;
  for (size_t k = k_done; k < kc4; k += 4) {
    for (size_t j = 0; j < n4; j += 4) {
      const float* r = src + j * ldb;
      const auto r0 = hn::LoadU(d4, r + k), r1 = hn::LoadU(d4, r + ldb + k);
      const auto r2 = hn::LoadU(d4, r + 2 * ldb + k), r3 = hn::LoadU(d4, r + 3 * ldb + k);
      const auto t0 = hn::InterleaveLower(d4, r0, r1), t1 = hn::InterleaveLower(d4, r2, r3);
      const auto t2 = hn::InterleaveUpper(d4, r0, r1), t3 = hn::InterleaveUpper(d4, r2, r3);
      float* out = dst + k * kNR + j;
      hn::Store(hn::ConcatLowerLower(d4, t1, t0), d4, out);
      hn::Store(hn::ConcatUpperUpper(d4, t1, t0), d4, out + kNR);
      hn::Store(hn::ConcatLowerLower(d4, t3, t2), d4, out + 2 * kNR);
      hn::Store(hn::ConcatUpperUpper(d4, t3, t2), d4, out + 3 * kNR);
    }
  }
  for (size_t k = k_done; k < kc; ++k) {
    float* out = dst + k * kNR;
    for (size_t j = k < kc4 ? n4 : 0; j < n; ++j) out[j] = src[j * ldb + k];
    for (size_t j = n; j < kNR; ++j) out[j] = 0.0f;
  }
}

#undef TFK_A_AT

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_MATMUL_INL_H_ toggle
