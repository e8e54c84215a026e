// Row loops for elementwise kernels (activations, residual add) and the
// norms' output pass (WriteRow). Each row is processed with full vectors;
// the tail is the last full vector of the row, computed from the input
// before the main loop stores anything (so in-place use stays correct), or,
// for rows shorter than a vector, single lanes.
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

// Number of leading elements of y to skip so that y + k is aligned for a
// whole-vector streaming store (y is float-aligned, so k < Lanes(d)).
template <class D>
HWY_INLINE size_t ElementsToAlign(D d, const float* y) {
  const size_t vec_bytes = hn::Lanes(d) * sizeof(float);
  return ((vec_bytes - reinterpret_cast<uintptr_t>(y) % vec_bytes) % vec_bytes) / sizeof(float);
}

// y[i] = op(d, x[i]) for i < n. x and y are equal or disjoint. kStream: the
// whole vectors are written with non-temporal stores (the caller flushes).
template <bool kStream, class Op>
HWY_INLINE void UnaryRow(const float* x, float* y, size_t n, const Op& op) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  if (n < 2 * N) {
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, y + i);
    for (; i < n; ++i) hn::StoreU(op(d1, hn::LoadU(d1, x + i)), d1, y + i);
    return;
  }
  const auto last = op(d, hn::LoadU(d, x + n - N));
  size_t i = 0;
  if (kStream) {
    for (const size_t head = ElementsToAlign(d, y); i < head; ++i) {
      hn::StoreU(op(d1, hn::LoadU(d1, x + i)), d1, y + i);
    }
    for (; i + N <= n; i += N) hn::Stream(op(d, hn::LoadU(d, x + i)), d, y + i);
  } else {
    for (; i + 2 * N <= n; i += 2 * N) {
      const auto v0 = op(d, hn::LoadU(d, x + i));
      const auto v1 = op(d, hn::LoadU(d, x + i + N));
      hn::StoreU(v0, d, y + i);
      hn::StoreU(v1, d, y + i + N);
    }
    for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, y + i);
  }
  if (i != n) hn::StoreU(last, d, y + n - N);
}

// y[i] = one(tag, i) for i < n >= Lanes(d), where one computes element i
// (or the lanes from i) from inputs that y equals or is disjoint from: the
// last vector is computed before any store (in-place safety) and covers the
// tail. kStream: whole aligned vectors go out as streaming stores (the
// caller flushes), the elements before y's first aligned vector as single
// lanes, which compute the same bits.
template <bool kStream, class D, class One>
HWY_INLINE void WriteRow(D d, float* y, size_t n, const One& one) {
  const size_t N = hn::Lanes(d);
  const auto last = one(d, n - N);
  size_t i = 0;
  if (kStream) {
    const hn::CappedTag<float, 1> d1;
    for (const size_t head = ElementsToAlign(d, y); i < head; ++i) {
      hn::StoreU(one(d1, i), d1, y + i);
    }
    for (; i + N <= n; i += N) hn::Stream(one(d, i), d, y + i);
  } else {
    for (; i + N <= n; i += N) hn::StoreU(one(d, i), d, y + i);
  }
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
    return op(dd, hn::LoadU(dd, a + i), hn::LoadU(dd, b + i));
  };
  if (n < 2 * N) {
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(one(d, i), d, y + i);
    for (; i < n; ++i) hn::StoreU(one(d1, i), d1, y + i);
    return;
  }
  WriteRow<kStream>(d, y, n, one);
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
