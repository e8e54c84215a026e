// Attention kernels, per target: the prefill tile (queries along the lanes)
// and the decoding dot-product kernel. Layout and constants: lib/attention.h;
// design: docs/attention.md.
//
// Register tiles of the prefill path, kAttnMR rows x 32 query lanes, the
// same budget as the matmul's (lib/matmul-inl.h):
//   AVX-512 (16 lanes): 12 x 2 vectors = 24 accumulators + 2 B + 1 broadcast;
//   AVX2    (8 lanes):   3 x 4 vectors = 12 accumulators + 4 B or broadcasts;
//   SSE4    (4 lanes):   1 x 8 vectors =  8 accumulators (no FMA).
// Both products of a KV block run through the one tile, PanelTile: the A
// operand is read by broadcast with strides (rows of K for S^T, columns of V
// for O^T), the B operand is a [k][32] panel in L1 ((scale Q)^T or P^T).

#if defined(TFK_LIB_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TFK_LIB_ATTENTION_INL_H_
#undef TFK_LIB_ATTENTION_INL_H_
#else
#define TFK_LIB_ATTENTION_INL_H_
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/attention.h"
#include "lib/elementwise-inl.h"
#include "lib/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kAttnLanes = HWY_MAX_BYTES / sizeof(float);
constexpr size_t kQV = kQB / kAttnLanes;  // vectors per row of 32 queries
constexpr size_t kAttnMR = kAttnLanes >= 16 ? 12 : (kAttnLanes >= 8 ? 3 : 1);

// ---- K and V elements: float, or bf16 held as uint16_t --------------------

HWY_INLINE VF LoadKV(DF d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadKV(DF d, const uint16_t* p) {
  // bf16 -> f32 is exact: the 16 bits become the high half of the float.
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
HWY_INLINE float KVToFloat(float x) { return x; }
HWY_INLINE float KVToFloat(uint16_t x) { return Bf16ToFloat(x); }

// dst[r][0:n] = float(src[r * ld + 0:n]) for r < rows (dst stride n).
template <class T>
HWY_INLINE void RowsToFloat(const T* src, size_t ld, size_t rows, size_t n, float* dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t r = 0; r < rows; ++r) {
    const T* s = src + r * ld;
    float* o = dst + r * n;
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(LoadKV(d, s + i), d, o + i);
    for (; i < n; ++i) o[i] = KVToFloat(s[i]);
  }
}

// ---- Prefill: the panel tile ----------------------------------------------

// out[i][0:32] = init_i + sum_{k < n_k} A(i, k) * b[k][0:32] for i < kMR, with
// init_i = out[i] * rescale (per lane) or 0 if rescale is null, and
// A(i, k) = a[i * stride + k] if kRowsOfA (rows of K), else a[k * stride + i]
// (columns of V). b and out are rows of 32 floats, 64-byte aligned. Each
// output is one FMA chain over k in order.
template <size_t kMR, bool kRowsOfA>
HWY_NOINLINE void PanelTile(size_t n_k, const float* HWY_RESTRICT a, size_t stride,
                            const float* HWY_RESTRICT b, float* HWY_RESTRICT out,
                            const float* HWY_RESTRICT rescale) {
  const DF d;
  VF acc[kMR][kQV];
#pragma GCC unroll 16
  for (size_t i = 0; i < kMR; ++i) {
#pragma GCC unroll 16
    for (size_t v = 0; v < kQV; ++v) {
      acc[i][v] = rescale ? hn::Mul(hn::Load(d, out + i * kQB + v * kAttnLanes),
                                    hn::Load(d, rescale + v * kAttnLanes))
                          : hn::Zero(d);
    }
  }
  for (size_t k = 0; k < n_k; ++k) {
    const float* bk = b + k * kQB;
    const float* ak = kRowsOfA ? a + k : a + k * stride;
    if (kQV <= 2) {
      // AVX-512: both B vectors stay loaded, each broadcast is used at once.
      VF bv[kQV];
#pragma GCC unroll 16
      for (size_t v = 0; v < kQV; ++v) bv[v] = hn::Load(d, bk + v * kAttnLanes);
#pragma GCC unroll 16
      for (size_t i = 0; i < kMR; ++i) {
        const VF ai = hn::Set(d, kRowsOfA ? ak[i * stride] : ak[i]);
#pragma GCC unroll 16
        for (size_t v = 0; v < kQV; ++v) acc[i][v] = hn::MulAdd(ai, bv[v], acc[i][v]);
      }
    } else {
#pragma GCC unroll 16
      for (size_t v = 0; v < kQV; ++v) {
        const VF bv = hn::Load(d, bk + v * kAttnLanes);
#pragma GCC unroll 16
        for (size_t i = 0; i < kMR; ++i) {
          acc[i][v] = hn::MulAdd(hn::Set(d, kRowsOfA ? ak[i * stride] : ak[i]), bv, acc[i][v]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (size_t i = 0; i < kMR; ++i) {
#pragma GCC unroll 16
    for (size_t v = 0; v < kQV; ++v) hn::Store(acc[i][v], d, out + i * kQB + v * kAttnLanes);
  }
}

// PanelTile over `rows` rows: full tiles of kAttnMR, then one smaller tile.
template <bool kRowsOfA>
HWY_INLINE void PanelRows(size_t rows, size_t n_k, const float* a, size_t stride,
                          const float* b, float* out, const float* rescale) {
  const size_t step = kRowsOfA ? stride : 1;  // A offset from one row to the next
  size_t i = 0;
  for (; i + kAttnMR <= rows; i += kAttnMR) {
    PanelTile<kAttnMR, kRowsOfA>(n_k, a + i * step, stride, b, out + i * kQB, rescale);
  }
  a += i * step;
  out += i * kQB;
  switch (rows - i) {
#define TFK_TAIL(r) \
  case r: return PanelTile<r, kRowsOfA>(n_k, a, stride, b, out, rescale);
#if HWY_MAX_BYTES >= 32
    TFK_TAIL(1) TFK_TAIL(2)
#endif
#if HWY_MAX_BYTES >= 64
    TFK_TAIL(3) TFK_TAIL(4) TFK_TAIL(5) TFK_TAIL(6) TFK_TAIL(7) TFK_TAIL(8) TFK_TAIL(9)
    TFK_TAIL(10) TFK_TAIL(11)
#endif
#undef TFK_TAIL
    default: return;
  }
}

// ---- Prefill: online softmax over a block of S^T ---------------------------

// Sets st[j][lane] = -inf for keys j0 + j >= visible[lane].
HWY_INLINE void MaskBlock(size_t j0, size_t nj, const int32_t* visible, float* st) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const VF neg_inf = hn::Set(d, -INFINITY);
  for (size_t v = 0; v < kQV; ++v) {
    const auto lim = hn::Load(di, visible + v * kAttnLanes);
    for (size_t j = 0; j < nj; ++j) {
      float* s = st + j * kQB + v * kAttnLanes;
      const auto seen = hn::RebindMask(d, hn::Gt(lim, hn::Set(di, static_cast<int32_t>(j0 + j))));
      hn::Store(hn::IfThenElse(seen, hn::Load(d, s), neg_inf), d, s);
    }
  }
}

// Per lane (query): m' = max(m, max_j st[j]), st[j] = exp(st[j] - m'),
// l = l * alpha + sum_j st[j] with alpha = exp(m - m') the factor for the
// output so far. A lane that has seen only -inf keeps m = -inf and uses 0 as
// its shift (so exp(-inf - -inf) never occurs). NaN and +inf scores make the
// lane NaN, as in tfk_softmax.
HWY_INLINE void OnlineSoftmaxBlock(size_t nj, float* st, float* m, float* l, float* alpha) {
  const DF d;
  const VF neg_inf = hn::Set(d, -INFINITY);
  for (size_t v = 0; v < kQV; ++v) {
    const size_t o = v * kAttnLanes;
    VF mb = neg_inf;
    for (size_t j = 0; j < nj; ++j) mb = hn::Max(mb, hn::Load(d, st + j * kQB + o));
    const VF m_old = hn::Load(d, m + o);
    const VF m_new = hn::Max(m_old, mb);
    const VF shift = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    VF sum = hn::Zero(d);
    size_t j = 0;
    for (; j + 4 <= nj; j += 4) {  // 4 exponentials interleaved
      VF p[4];
#pragma GCC unroll 4
      for (size_t k = 0; k < 4; ++k) p[k] = hn::Sub(hn::Load(d, st + (j + k) * kQB + o), shift);
      ExpNonPositiveN<4>(d, p);
#pragma GCC unroll 4
      for (size_t k = 0; k < 4; ++k) {
        hn::Store(p[k], d, st + (j + k) * kQB + o);
        sum = hn::Add(sum, p[k]);
      }
    }
    for (; j < nj; ++j) {
      float* s = st + j * kQB + o;
      const VF p = ExpNonPositive(d, hn::Sub(hn::Load(d, s), shift));
      hn::Store(p, d, s);
      sum = hn::Add(sum, p);
    }
    const VF al = ExpNonPositive(d, hn::Sub(m_old, shift));
    hn::Store(hn::MulAdd(hn::Load(d, l + o), al, sum), d, l + o);
    hn::Store(al, d, alpha + o);
    hn::Store(m_new, d, m + o);
  }
}

// ---- Decoding: dot products and value accumulation -------------------------

// Decoding streams K and V from memory, so both passes ask for lines ahead,
// evenly over their work (a burst of prefetches stalls on the line-fill
// buffers; a pass that asks for none leaves memory idle while it computes):
// the dot products of key j ask for K row j + dist (~8 KiB ahead); the
// value sums ask for the next block's V rows (NextRows). Rows below `avail`
// exist. 8 KiB rather than the matmul decoding tile's 4: the dot pass takes
// about half of a key's time (profile, bf16 from L2: ~31 ns a key), so it
// runs through K about twice as fast as the call reads memory, and 4 KiB
// (16 bf16 rows) was too short a lead. One thread, 1 query x 32 heads
// against 8192 tokens, in-process A/B in both orders: bf16 +8-9 % (11.3-11.9
// -> 12.3-12.9 GB/s), fp32 -1 .. +2 %, 2 threads +0-3 %; 16 KiB the same.
// A call whose K and V exceed half the last-level cache (`spread`) reads a
// one-query block as 4 interleaved streams: K by quarters of the block, the
// next block's V by quarters of its range. A core here reads 4 streams at
// 15-17 GB/s against ~12 for one (bench memory/read). One thread, 1 query x
// 32 heads against 8192 cached tokens, old and new library alternated in one
// process, medians of 15 calls, per sitting: fp32 5.9-8.1 -> 7.6-10.5 GB/s
// (K alone in 4 streams: 6.4-7.4 against 7.0-8.4 with V too), 2 threads 9.9
// -> 11.9; bf16 +0-13 %. From cache 4 streams lost 2-15 % (1 head, 256 fp32
// keys: 18.4-24.0 against 15.7-23.5 GB/s), so calls that fit keep one
// stream. Steps of several queries (GQA) keep adjacent keys: quartered, GQA
// 32/8 lost up to 17 %.
// Steps of several queries (GQA) that read K and V from memory (spread)
// ask for them into L2 only (to_l2, PrefetchToL2), where L1 had been
// slower: one Zen 4 core, 1 token x 32 heads on 8 KV heads, fp32 / bf16,
// medians of per-round ratios: 8192 tokens +60-78 / +20-43 % (two threads
// +48 / +14 %), 2048 tokens fp32 +30 %. In cache (512 tokens) they keep L1:
// L2 lost 4 % there. One-query steps keep L1 too: on Zen 4 they leave
// memory to the hardware prefetchers (detail::DecodeSpreadPrefetch;
// prefetching into L2 there gained 6 % fp32 but lost 10 % bf16), and where
// they prefetch, into L1 is what was measured.
//
// PrefetchLines asks for the lines [p, p + bytes), 64 bytes apart.
HWY_INLINE void PrefetchLines(const char* p, size_t bytes, bool to_l2) {
  if (to_l2) {
    for (size_t off = 0; off < bytes; off += 64) PrefetchToL2(p + off);
  } else {
    for (size_t off = 0; off < bytes; off += 64) hwy::Prefetch(p + off);
  }
}

template <class T>
HWY_INLINE void PrefetchRow(const T* row, size_t n, bool to_l2 = false) {
  PrefetchLines(reinterpret_cast<const char*>(row), n * sizeof(T), to_l2);
}

template <class T>
HWY_INLINE void PrefetchKeyAhead(const T* k, size_t ld_k, size_t j, size_t avail, size_t n,
                                 size_t dist, bool to_l2) {
  if (dist != 0 && j + dist < avail) PrefetchRow(k + (j + dist) * ld_k, n, to_l2);
}

// The value pass's requests for the next block's V rows, spread over its
// row steps (windows x nk): rows stored back to back (the KV cache) are one
// range, asked for in order, `step` bytes per row step, or (spread) as 4
// parts, one step of each in turn (where the steps do not divide by 4, a
// part may end a step short: a few lines left to the hardware); rows with
// gaps (step 0) are asked for per window, its own columns of row j + nk.
struct NextRows {
  size_t rows = 0;              // rows of the next block to ask for; 0: none
  size_t step = 0;              // bytes per row step if back to back, else 0
  const char* base = nullptr;   // back to back: the range and its bytes
  size_t bytes = 0;
  size_t first_step = 0;        // back to back: the current window's first row step
  size_t shift = 0;             // back to back: asked for as 1 << shift streams
  size_t part = 0;              // of `part` bytes each
  bool to_l2 = false;           // from memory: into L2 only (PrefetchLines)
};

// out[0:4] = the lane sums of (the whole vectors) v[0:4] after SumsOf4
// combined them per 128-bit block: halves are added until one block is left.
template <class D>
HWY_INLINE void StoreBlockSums(D d, hn::Vec<D> v, float* out) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    hn::Store(v, d, out);
  } else {
    const hn::Half<D> dh;
    StoreBlockSums(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
  }
}

// out[i] = sum of the lanes of a_i, i < 4: two interleave-and-add steps
// transpose and sum within each 128-bit block ([a0, a1, a2, a3] block sums),
// then blocks are added. ~10 operations for four sums, against ~7 each for
// SumOfLanes (measured in decoding, where these sums are most of the
// non-FMA work).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void SumsOf4(D d, V a0, V a1, V a2, V a3, float* out) {
  const hn::Repartition<double, D> dd;
  const V t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const V t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto w0 = hn::BitCast(dd, t0), w1 = hn::BitCast(dd, t1);
  const V u = hn::Add(hn::BitCast(d, hn::InterleaveLower(dd, w0, w1)),
                      hn::BitCast(d, hn::InterleaveUpper(dd, w0, w1)));
  StoreBlockSums(d, u, out);
}

// ---- Decoding from a bf16 cache: pairs split into even and odd lanes -------
//
// 2N bf16 values loaded as N 32-bit lanes hold element 2i in the low half
// and 2i+1 in the high half of lane i, so one shift and one AND give both as
// floats (two operations per 2N values, against a widening load, a
// zero-extension and a shift per N). The query and the output accumulator
// are kept "pair-split" to line up with them: each chunk of 2N elements is
// stored as [x0 x2 .. x(2N-2) | x1 x3 .. x(2N-1)]; elements past the last
// whole chunk stay in place and take the scalar path.

// Reorders x[0:n] into pair-split form, or back with `inverse`.
HWY_INLINE void SplitPairs(float* x, size_t n, bool inverse) {
  const size_t N = hn::Lanes(DF());
  HWY_ALIGN float tmp[2 * HWY_MAX_BYTES / sizeof(float)];
  for (size_t c0 = 0; c0 + 2 * N <= n; c0 += 2 * N) {
    for (size_t i = 0; i < 2 * N; ++i) tmp[i] = x[c0 + i];
    for (size_t i = 0; i < N; ++i) {
      if (inverse) {
        x[c0 + 2 * i] = tmp[i];
        x[c0 + 2 * i + 1] = tmp[N + i];
      } else {
        x[c0 + i] = tmp[2 * i];
        x[c0 + N + i] = tmp[2 * i + 1];
      }
    }
  }
}

HWY_INLINE void LoadPairs(DF d, const uint16_t* p, VF& even, VF& odd) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Repartition<uint16_t, DF> d16;
  const auto raw = hn::BitCast(du, hn::LoadU(d16, p));
  even = hn::BitCast(d, hn::ShiftLeft<16>(raw));
  odd = hn::BitCast(d, hn::And(raw, hn::Set(du, 0xFFFF0000u)));
}

// ---- Decoding: dot products and value sums of up to 4 queries at once ----
//
// The queries that share a KV head (GQA's n_heads / n_kv_heads heads of a
// token) read the same K and V rows. Processed together, each K or V vector
// loaded from L1/L2 feeds one FMA per query: with 4 queries, a quarter of the
// loads of one query at a time, which had left GQA decoding compute-bound
// (~48 ns per key and query on AVX2 here, against 12.8 ns for its 32 FMAs).
// The register tiles keep at least 4 independent FMA chains (latency 4
// cycles, about one FMA a cycle): dot products kQ queries x KeysPerStep(kQ)
// keys, value sums kQ queries x ValueVectors(kQ) vectors of columns. The
// tiles depend only on the number of queries, so results do not depend on
// the thread count.

// Columns come in chunks: float, N values in one vector; bf16, 2N values
// pair-split into two vectors (LoadPairs), q and o kept in the same order.
template <class T>
struct Chunk;
template <>
struct Chunk<float> {
  static constexpr size_t kVecs = 1;
  static HWY_INLINE void Load(DF d, const float* p, VF* out) { out[0] = hn::LoadU(d, p); }
};
template <>
struct Chunk<uint16_t> {
  static constexpr size_t kVecs = 2;
  static HWY_INLINE void Load(DF d, const uint16_t* p, VF* out) { LoadPairs(d, p, out[0], out[1]); }
};

constexpr size_t KeysPerStep(size_t kQ) { return kQ == 1 ? 4 : 2; }
constexpr size_t ValueVectors(size_t kQ) { return kQ == 1 ? 8 : kQ == 2 ? 4 : 2; }

// Keeps v in a register from here on. GCC folds the load of a vector into
// every FMA that uses it, so a query vector shared by kKeys keys was loaded
// kKeys times; in GQA's 4-query dot products that made 10 loads per 8 FMAs,
// which bound them. GQA 32/8, one query against 8192 keys, one thread,
// medians of 7 alternating runs: AVX-512 fp32 11.4 -> 12.0 GB/s, bf16 12.0
// -> 15.0; AVX2 fp32 7.0 -> 7.5, bf16 8.1 -> 9.4. MHA (one query, 4 keys a
// step) the same within noise.
template <class V>
HWY_INLINE void KeepInRegister(V& v) {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  asm("" : "+v"(v.raw));
#else
  (void)v;
#endif
}

// Dot products of kQ queries with kKeys keys gap rows apart from row j:
// s[f * ld_s + j + t gap] = dot(q + f * ld_q, K row j + t gap). Lanes are
// summed 4 accumulators at a time, then the elements past the last whole
// chunk are added.
template <size_t kQ, size_t kKeys, class T>
HWY_INLINE void DotStep(size_t j, size_t gap, const float* q, size_t ld_q, const T* k, size_t ld,
                        size_t n, float* s, size_t ld_s) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kV = Chunk<T>::kVecs;
  constexpr size_t kAcc = (kQ * kKeys + 3) / 4 * 4;
  const size_t n_full = n - n % (kV * N);
  const T* r[kKeys];
#pragma GCC unroll 4
  for (size_t t = 0; t < kKeys; ++t) r[t] = k + (j + t * gap) * ld;
  VF acc[kAcc];
#pragma GCC unroll 8
  for (size_t a = 0; a < kAcc; ++a) acc[a] = hn::Zero(d);
  for (size_t i = 0; i < n_full; i += kV * N) {
    VF kv[kKeys][kV];
#pragma GCC unroll 4
    for (size_t t = 0; t < kKeys; ++t) Chunk<T>::Load(d, r[t] + i, kv[t]);
#pragma GCC unroll 4
    for (size_t f = 0; f < kQ; ++f) {
#pragma GCC unroll 2
      for (size_t u = 0; u < kV; ++u) {
        VF qv = hn::LoadU(d, q + f * ld_q + i + u * N);
        if (kKeys > 1) KeepInRegister(qv);
#pragma GCC unroll 4
        for (size_t t = 0; t < kKeys; ++t) {
          acc[f * kKeys + t] = hn::MulAdd(kv[t][u], qv, acc[f * kKeys + t]);
        }
      }
    }
  }
  HWY_ALIGN float sums[kAcc];
#pragma GCC unroll 2
  for (size_t a = 0; a < kAcc; a += 4) SumsOf4(d, acc[a], acc[a + 1], acc[a + 2], acc[a + 3], sums + a);
  for (size_t f = 0; f < kQ; ++f) {
    for (size_t t = 0; t < kKeys; ++t) {
      float x = sums[f * kKeys + t];
      for (size_t i = n_full; i < n; ++i) x += q[f * ld_q + i] * KVToFloat(r[t][i]);
      s[f * ld_s + j + t * gap] = x;
    }
  }
}

// Scores of kQ queries for keys [0, nk) (rows of stride ld). If prefetch,
// asks for K rows below avail ahead, as above. A step takes kK adjacent keys,
// or, one query and spread, one key from each quarter of the block.
template <size_t kQ, class T>
HWY_INLINE void DotRows(size_t nk, const float* q, size_t ld_q, const T* k, size_t ld, size_t n,
                        float* s, size_t ld_s, bool prefetch, bool spread, size_t avail) {
  constexpr size_t kK = KeysPerStep(kQ);
  // Prefetch distance in rows, ~8 KiB (computed once: a division per key
  // showed in profiles); 0: none.
  const size_t dist = !prefetch ? 0 : n * sizeof(T) >= 8192 ? 1 : 8192 / (n * sizeof(T));
  const bool to_l2 = kQ > 1 && spread;  // see PrefetchLines
  if (kQ == 1 && spread) {
    const size_t gap = nk / kK;
    for (size_t j = 0; j < gap; ++j) {
      for (size_t t = 0; t < kK; ++t) PrefetchKeyAhead(k, ld, j + t * gap, avail, n, dist, to_l2);
      DotStep<kQ, kK>(j, gap, q, ld_q, k, ld, n, s, ld_s);
    }
  } else {
    for (size_t j = 0; j + kK <= nk; j += kK) {
      for (size_t t = j; t < j + kK; ++t) PrefetchKeyAhead(k, ld, t, avail, n, dist, to_l2);
      DotStep<kQ, kK>(j, 1, q, ld_q, k, ld, n, s, ld_s);
    }
  }
  for (size_t j = nk / kK * kK; j < nk; ++j) {
    PrefetchKeyAhead(k, ld, j, avail, n, dist, to_l2);
    DotStep<kQ, 1>(j, 1, q, ld_q, k, ld, n, s, ld_s);
  }
}

// o_f[c0, c0 + kW N) = init_f + sum_{j < nk} p_f[j] V row j, f < kQ, with
// o_f = o + f * ld_o, p_f = p + f * ld_p, init_f = first ? 0 : alpha[f] o_f:
// kQ x kW independent FMA chains, each V vector loaded once. c0 starts a
// chunk; kW is a multiple of the chunk's vectors. Each row step asks for a
// part of the next block (NextRows).
template <size_t kQ, size_t kW, class T>
HWY_INLINE void ValueColumns(size_t nk, const float* p, size_t ld_p, const T* v, size_t ld,
                             size_t c0, float* o, size_t ld_o, const float* alpha, bool first,
                             const NextRows& next) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kV = Chunk<T>::kVecs;
  static_assert(kW % kV == 0, "whole chunks");
  VF acc[kQ][kW];
#pragma GCC unroll 4
  for (size_t f = 0; f < kQ; ++f) {
    const VF a = hn::Set(d, alpha[f]);
#pragma GCC unroll 8
    for (size_t w = 0; w < kW; ++w) {
      acc[f][w] = first ? hn::Zero(d) : hn::Mul(a, hn::LoadU(d, o + f * ld_o + c0 + w * N));
    }
  }
  // A window that starts inside a line leaves that line to the window before.
  const size_t window_bytes = kW * N * sizeof(T);
  const size_t rows = (c0 * sizeof(T)) % 64 == 0 ? next.rows : 0;
  const size_t mask = (size_t{1} << next.shift) - 1;
  for (size_t j = 0; j < nk; ++j) {
    const T* row = v + j * ld + c0;
    if (next.step != 0) {
      const size_t i = next.first_step + j;
      const size_t off = (i & mask) * next.part + (i >> next.shift) * next.step;
      if (off + next.step <= next.bytes) {
        PrefetchLines(next.base + off, next.step, next.to_l2);
      }
    } else if (j < rows) {
      const char* ahead = reinterpret_cast<const char*>(row + nk * ld);
      PrefetchLines(ahead, window_bytes, next.to_l2);
    }
    VF vv[kW];
#pragma GCC unroll 8
    for (size_t w = 0; w < kW; w += kV) Chunk<T>::Load(d, row + w * N, vv + w);
#pragma GCC unroll 4
    for (size_t f = 0; f < kQ; ++f) {
      const VF pj = hn::Set(d, p[f * ld_p + j]);
#pragma GCC unroll 8
      for (size_t w = 0; w < kW; ++w) acc[f][w] = hn::MulAdd(pj, vv[w], acc[f][w]);
    }
  }
#pragma GCC unroll 4
  for (size_t f = 0; f < kQ; ++f) {
#pragma GCC unroll 8
    for (size_t w = 0; w < kW; ++w) hn::StoreU(acc[f][w], d, o + f * ld_o + c0 + w * N);
  }
}

// o_f[0:n] = (first ? 0 : alpha[f] o_f) + sum_{j < nk} p_f[j] V row j[0:n]
// for kQ queries; columns past the last whole chunk take the scalar path.
// If prefetch, asks for the next block's V rows below avail, as above: in 4
// streams if one query and spread.
template <size_t kQ, class T>
HWY_INLINE void AccumulateValues(size_t nk, const float* p, size_t ld_p, const T* v, size_t ld,
                                 size_t n, float* o, size_t ld_o, const float* alpha, bool first,
                                 bool prefetch, bool spread, size_t avail) {
  const size_t N = hn::Lanes(DF());
  constexpr size_t kV = Chunk<T>::kVecs, kW = ValueVectors(kQ);
  const size_t n_full = n - n % (kV * N);
  NextRows next;
  next.to_l2 = kQ > 1 && spread;
  const size_t beyond = avail > nk ? avail - nk : 0;  // rows past this block
  if (prefetch) next.rows = beyond < nk ? beyond : nk;
  const size_t steps = (n_full / (kW * N) + n_full % (kW * N) / (kV * N)) * nk;
  if (ld == n && next.rows != 0 && steps != 0) {
    next.base = reinterpret_cast<const char*>(v + nk * ld);
    next.bytes = next.rows * n * sizeof(T);
    next.step = (next.bytes + steps - 1) / steps;
    next.shift = kQ == 1 && spread ? 2 : 0;
    next.part = ((steps + (size_t{1} << next.shift) - 1) >> next.shift) * next.step;
  }
  size_t c = 0;
  for (; c + kW * N <= n_full; c += kW * N, next.first_step += nk) {
    ValueColumns<kQ, kW>(nk, p, ld_p, v, ld, c, o, ld_o, alpha, first, next);
  }
  for (; c < n_full; c += kV * N, next.first_step += nk) {
    ValueColumns<kQ, kV>(nk, p, ld_p, v, ld, c, o, ld_o, alpha, first, next);
  }
  for (size_t f = 0; f < kQ; ++f) {
    for (size_t cc = n_full; cc < n; ++cc) {
      float acc = first ? 0.0f : alpha[f] * o[f * ld_o + cc];
      for (size_t j = 0; j < nk; ++j) acc += p[f * ld_p + j] * KVToFloat(v[j * ld + cc]);
      o[f * ld_o + cc] = acc;
    }
  }
}

// exp(a) for one float a <= 0 by the vector routine (same results as lanes).
HWY_INLINE float ExpNonPositive1(float a) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(ExpNonPositive(d1, hn::Set(d1, a)));
}

// Online softmax over s[0:nk) for one query: returns alpha, updates m and l,
// turns s into probabilities. s has room for a multiple of N entries.
HWY_INLINE float OnlineSoftmaxRow(size_t nk, float* s, float& m, float& l) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t padded = (nk + N - 1) / N * N;
  for (size_t j = nk; j < padded; ++j) s[j] = -INFINITY;
  VF mb = hn::Set(d, -INFINITY);
  for (size_t j = 0; j < padded; j += N) mb = hn::Max(mb, hn::LoadU(d, s + j));
  float m_new = hn::GetLane(hn::MaxOfLanes(d, mb));
  if (m_new < m || isnan(m)) m_new = m;  // max(m, block) keeping a NaN m
  const float shift = m_new == -INFINITY ? 0.0f : m_new;
  const VF vshift = hn::Set(d, shift);
  VF sum = hn::Zero(d);
  for (size_t j = 0; j < padded; j += N) {
    const VF p = ExpNonPositive(d, hn::Sub(hn::LoadU(d, s + j), vshift));
    hn::StoreU(p, d, s + j);
    sum = hn::Add(sum, p);
  }
  const float alpha = ExpNonPositive1(m - shift);
  l = l * alpha + hn::GetLane(hn::SumOfLanes(d, sum));
  m = m_new;
  return alpha;
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_ATTENTION_INL_H_ toggle
