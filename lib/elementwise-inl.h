// Row loops for elementwise kernels (activations, residual add) and the
// output pass of the norms and softmax (WriteRow). Each row is processed
// with full vectors; the tail is the last full vector of the row, computed
// from the input before the main loop stores anything (so in-place use
// stays correct), or, for rows shorter than a vector, single lanes.
// Elementwise results do not depend on which lane computes them, so every
// element gets the same bits whatever the row length or thread partition.

#if defined(TFK_LIB_ELEMENTWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TFK_LIB_ELEMENTWISE_INL_H_
#undef TFK_LIB_ELEMENTWISE_INL_H_
#else
#define TFK_LIB_ELEMENTWISE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/threading.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Streaming stores fill whole 64-byte lines only: a line written partly by
// streaming stores goes to memory as a partial write, which memory merges
// by read-modify-write.
constexpr size_t kLineFloats = 64 / sizeof(float);

// Elements of y[0:n) before its first whole line (all n if none).
HWY_INLINE size_t ElementsBeforeLine(const float* y, size_t n) {
  const size_t head = ((64 - reinterpret_cast<uintptr_t>(y) % 64) % 64) / sizeof(float);
  return head < n ? head : n;
}

// True if streaming stores to y would stall the loads of src (null: no
// source). A streaming store waits in the store buffer for its line to fill,
// and a load whose address equals a waiting store's in the low 12 bits
// waits too (4 KiB aliasing). When y runs 1-127 bytes behind src modulo
// 4 KiB, the loads run into the stores just issued. LayerNorm [1024, 2048],
// AVX2, one thread, streaming: 3.4-3.9 GB/s with y 16-48 bytes after x
// (modulo 4 KiB), 5.2-6 at 64, 7-8 at 128, 8-10 at 0 and 256-4032; with
// ordinary stores 6-7 at any offset. gamma, read in step with y, does the
// same: 4.0 GB/s streamed with y 16-32 bytes after it, 7.6-7.9 with
// ordinary stores. Such rows take ordinary stores.
HWY_INLINE bool StreamStalls(const float* y, const float* src) {
  if (src == nullptr) return false;
  const uintptr_t delta = (reinterpret_cast<uintptr_t>(y) - reinterpret_cast<uintptr_t>(src)) % 4096;
  return delta != 0 && delta < 128;
}

// y[i] = one(tag, i) for i < n >= Lanes(d), where one computes element i
// (or the lanes from i) from inputs that y equals or is disjoint from: the
// last vector is computed before any store (in-place safety) and covers the
// tail. kStream, unless `stalls` (StreamStalls of the sources one reads):
// the whole lines of y go out as streaming stores (the caller flushes), the
// elements before and after them as ordinary stores, which compute the same
// bits.
template <bool kStream, class D, class One>
HWY_INLINE void WriteRow(D d, float* y, size_t n, const One& one, bool stalls) {
  const size_t N = hn::Lanes(d);
  const auto last = one(d, n - N);
  size_t i = 0;
  if (kStream && !stalls) {
    const hn::CappedTag<float, 1> d1;
    const size_t head = ElementsBeforeLine(y, n);
    const size_t lines_end = head + (n - head) / kLineFloats * kLineFloats;
    for (; i + N <= head; i += N) hn::StoreU(one(d, i), d, y + i);
    for (; i < head; ++i) hn::StoreU(one(d1, i), d1, y + i);
    for (; i < lines_end; i += N) hn::Stream(one(d, i), d, y + i);  // N divides 16
  }
  for (; i + N <= n; i += N) hn::StoreU(one(d, i), d, y + i);
  if (i != n) hn::StoreU(last, d, y + n - N);
}

// Elementwise inputs are read once, front to back, and often from memory:
// each line is prefetched kPrefetchAhead floats (4 KiB) before it is read,
// which keeps more lines in flight than the hardware prefetcher alone (1 KiB
// ahead against none, ReLU on 16 Mi floats, AVX2, 1 / 2 threads: 13.3-15.5
// -> 15.9-17.5 / 21.6-22.3 -> 23.1-26.4 GB/s; SiLU 0-5 % slower there, the
// check and the prefetch costing ~3 of its ~30 operations a vector). The
// compute-bound activations take longer per line, so their reads need more
// lines in flight: 4 KiB against 1 KiB ahead, one Xeon (family 6 model
// 167), AVX-512, 16 Mi floats with streaming stores, two library copies
// alternating in one process, medians of per-round ratios, 1 / 2 threads:
// GELU-erf +9-11 / +25 %, GELU-tanh -1 / +20 %, SiLU +1 / +7 %, ReLU the
// same; 256 Ki floats (in cache) the same. (2 and 8 KiB gained less, 16
// KiB about as much on one thread and less on two.)
constexpr size_t kPrefetchAhead = 1024;

// Prefetches the line of p[i] once per 16 floats (64 bytes) of i, for a loop
// that steps i by Lanes(d). Also used by the norms and softmax for the row
// they handle next.
template <class D>
HWY_INLINE void PrefetchPerLine(D d, const float* p, size_t i) {
  if (i % kLineFloats < hn::Lanes(d)) hwy::Prefetch(p + i);
}

// Prefetches the line holding p into L2 but not L1 (x86's prefetcht1;
// elsewhere Highway's prefetch). For streams from memory asked for far
// ahead, where prefetched into L1 the same lines arrived slower (figures at
// the callers: the next row of softmax and the norms where their inputs are
// far larger than the cache, PrefetchNextRowHalf; the decoding matmul tile).
// Here, compiled for each target: as an inline function outside the
// targets' attributes, GCC 12 emitted other prefetches for it.
HWY_INLINE void PrefetchToL2(const void* p) {
#if HWY_ARCH_X86
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
#else
  hwy::Prefetch(p);
#endif
}

// The norms and softmax read a row from memory in their first pass only
// (the later ones find it in L1/L2), and prefetch the next row of their
// chunk (next) during their last two passes over the row of n floats
// (RMSNorm's are its only two): at element i, a line of half of it,
// next[0, n/2) in the first of them (first = 0), next[n/2, n) in the second
// (first = n), once per two lines of the pass. All in the last pass, the reads stopped
// while the passes before it ran; all in the pass before the last, they
// stopped while the last pass streamed its output (figures at the callers).
// kToL2: into L2 only (prefetcht1), for the inputs far larger than the
// last-level cache (the calls whose outputs are streamed), which come from
// memory; into L1 their reads were slower (one Zen 4 core, medians of
// per-round ratios over two runs, L2 against L1: softmax [2048, 32000]
// +6-9 %, two threads +4-7 %; [65536, 2048] +10 % / +12 %; LayerNorm
// [2048, 4096] +7-15 % / +2-16 %), while rows found in cache lost 1-3 %
// with it (softmax [64, 2048], LayerNorm [512, 1024]).
template <bool kToL2 = false, class D>
HWY_INLINE void PrefetchNextRowHalf(D d, const float* next, size_t first, size_t i) {
  if (i % (2 * kLineFloats) >= hn::Lanes(d)) return;
  const float* line = next + (first + i) / 2;
  if (kToL2) {
    PrefetchToL2(line);
  } else {
    hwy::Prefetch(line);
  }
}

// Prefetches the line kPrefetchAhead floats past p[i] if it lies within
// p[0:n), once per line.
template <class D>
HWY_INLINE void PrefetchAhead(D d, const float* p, size_t i, size_t n) {
  if (i + kPrefetchAhead < n) PrefetchPerLine(d, p + kPrefetchAhead, i);
}

// PrefetchAhead for the `count` elements from i, checked once: the lines
// whose first element index (i + o) is a multiple of 16. In a loop of few
// operations a vector the per-vector check and branch cost more than the
// prefetch itself: ReLU, AVX2 on a Xeon (family 6 model 207), one thread,
// medians of per-round ratios: 256 Ki floats (L2) +21 %, 16 Mi (L3) +28 %,
// 64 Mi (from memory) +5 %; AVX-512, SSE4 and the GELUs the same.
//
// kFar (the streamed calls, whose data does not stay in the last-level cache,
// so the input comes from memory): each line is also
// asked into L2 kPrefetchFar floats (32 KiB) ahead, so that more lines are
// in flight than the L1 prefetches alone allow (one Xeon, family 6 model
// 167, AVX-512, 16 Mi floats, in-process A/B as above, 1 / 2 threads: ReLU
// +9-15 % / +1-4 %, GELU-erf +1-5 % / 0, GELU-tanh +3-6 % / 0, SiLU +4-5 % /
// +4 %; 64 Mi floats, one thread: ReLU +6 %, GELU-erf +4 %, SiLU +5 %. 8 and
// 16 KiB ahead gained as much on the GELUs, 1-4 % less on ReLU; 64 KiB the
// same as 32. Dropping the L1 prefetches where the L2 ones are made: ReLU
// +5 %, GELU-erf -4 % on one thread, so both stay.)
constexpr size_t kPrefetchFar = 8192;
template <bool kFar = false>
HWY_INLINE void PrefetchAheadStep(const float* p, size_t i, size_t n, size_t count) {
  const size_t first = (kLineFloats - i % kLineFloats) % kLineFloats;
  if (kFar && i + kPrefetchFar + count <= n) {
    for (size_t o = first; o < count; o += kLineFloats) PrefetchToL2(p + i + o + kPrefetchFar);
  }
  if (i + kPrefetchAhead + count > n) return;
  for (size_t o = first; o < count; o += kLineFloats) hwy::Prefetch(p + i + o + kPrefetchAhead);
}

// y[i] = op(d, x[i]) for i < n. x and y are equal or disjoint. kStream: as
// WriteRow (the caller flushes). The body of the row goes Op::kVectors
// vectors a step through op.N<kVectors>, which interleaves their dependency
// chains (lib/activation-inl.h); the head before y's first whole line (when
// streaming), the rest and the tail go a vector at a time.
template <bool kStream, class Op>
HWY_INLINE void UnaryRow(const float* x, float* y, size_t n, const Op& op) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  if (n < 2 * N) {
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, y + i);
    for (; i < n; ++i) hn::StoreU(op(d1, hn::LoadU(d1, x + i)), d1, y + i);
    return;
  }
  const auto one = [&](auto dd, size_t i) HWY_ATTR {
    PrefetchAhead(dd, x, i, n);
    return op(dd, hn::LoadU(dd, x + i));
  };
  const auto store = [&](bool stream, V v, size_t i) HWY_ATTR {
    if (stream) {
      hn::Stream(v, d, y + i);
    } else {
      hn::StoreU(v, d, y + i);
    }
  };
  const V last = op(d, hn::LoadU(d, x + n - N));
  // [head, body_end): whole lines of y when streaming, else the whole row.
  const bool stream = kStream && !StreamStalls(y, x);
  const size_t head = stream ? ElementsBeforeLine(y, n) : 0;
  const size_t body_end = stream ? head + (n - head) / kLineFloats * kLineFloats : n;
  size_t i = 0;
  for (; i + N <= head; i += N) hn::StoreU(one(d, i), d, y + i);
  for (; i < head; ++i) hn::StoreU(one(d1, i), d1, y + i);
  constexpr size_t kK = Op::kVectors;
  for (; i + kK * N <= body_end; i += kK * N) {
    V v[kK];
    PrefetchAheadStep<kStream>(x, i, n, kK * N);
#pragma GCC unroll 4
    for (size_t k = 0; k < kK; ++k) v[k] = hn::LoadU(d, x + i + k * N);
    op.template N<kK>(d, v);
#pragma GCC unroll 4
    for (size_t k = 0; k < kK; ++k) store(stream, v[k], i + k * N);
  }
  for (; i + N <= body_end; i += N) store(stream, one(d, i), i);  // N divides 16
  for (; i + N <= n; i += N) hn::StoreU(one(d, i), d, y + i);
  if (i != n) hn::StoreU(last, d, y + n - N);
}

// y[i] = op(d, a[i], b[i]); y equals a or b, or is disjoint from both.
template <bool kStream, class Op>
HWY_INLINE void BinaryRow(const float* a, const float* b, float* y, size_t n,
                          const Op& op) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  const auto one = [&](auto dd, size_t i) HWY_ATTR {
    PrefetchAhead(dd, a, i, n);
    PrefetchAhead(dd, b, i, n);
    return op(dd, hn::LoadU(dd, a + i), hn::LoadU(dd, b + i));
  };
  if (n < 2 * N) {
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(one(d, i), d, y + i);
    for (; i < n; ++i) hn::StoreU(one(d1, i), d1, y + i);
    return;
  }
  WriteRow<kStream>(d, y, n, one, kStream && (StreamStalls(y, a) || StreamStalls(y, b)));
}

// Elements per parallel item when a matrix is dense and treated as one flat
// array: 64 KiB of input, so a single long row still spreads over threads.
constexpr size_t kFlatBlock = 16384;

// Runs row_fn(x_offset, y_offset, n) over [rows, cols]: over flat blocks when
// both matrices are dense, else over rows. bytes_per_elem is the traffic per
// element (for the small-input threshold). With kStream, each task ends with
// a store fence so its streaming stores are visible when the call returns.
template <bool kStream, class RowFn>
HWY_INLINE void ForEachRowSegment(size_t rows, size_t cols, size_t ldx, size_t ldy,
                                  size_t bytes_per_elem, const RowFn& row_fn) {
  if (ldx == cols && ldy == cols) {
    const size_t n = rows * cols;
    const size_t blocks = (n + kFlatBlock - 1) / kFlatBlock;
    detail::ParallelFor(blocks, kFlatBlock * bytes_per_elem,
                        [&](size_t begin, size_t end) HWY_ATTR {
                          const size_t lo = begin * kFlatBlock;
                          const size_t hi = end * kFlatBlock < n ? end * kFlatBlock : n;
                          row_fn(lo, lo, hi - lo);
                          if (kStream) hwy::FlushStream();
                        });
    return;
  }
  detail::ParallelFor(rows, cols * bytes_per_elem, [&](size_t begin, size_t end) HWY_ATTR {
    for (size_t r = begin; r < end; ++r) row_fn(r * ldx, r * ldy, cols);
    if (kStream) hwy::FlushStream();
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_ELEMENTWISE_INL_H_ toggle
