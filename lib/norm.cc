// LayerNorm and RMSNorm over rows: public entries and per-target bodies.
// Contracts: include/tfk/tfk.h; numerics: docs/numerics.md.
//
// LayerNorm makes three passes over a row (it stays in L1/L2 after the first):
//   1. mean = p + m_lo, m_lo = sum(x - p) / n with the pivot p = x[0]: for a
//      row such as 1e4 + noise the summands are noise-sized, so the float sum
//      keeps the noise's digits (a plain float sum of 1e4-sized values loses
//      ~5e-4 per add, and rounding the mean to float loses as much again);
//   2. var = sum(((x - p) - m_lo)^2) / n (two-pass: no cancellation);
//   3. y = ((x - p) - m_lo) * (rstd * gamma) + beta.
// RMSNorm: ms = sum(x^2) / n, then y = x * (rstd * gamma).
// Only the first pass reads memory; calls whose input (unless in place) and
// output together reach the streaming threshold (detail::StreamOutput) write
// their output with streaming stores (LayerNorm [2048, 4096], AVX2, 1 thread:
// 6.1 -> 7.9 GB/s; the copy of the same bytes moves 9.5). A pipeline whose
// output pass for row r also made row r + 1's variance pass and row r + 2's
// mean pass (RMSNorm: row r + 1's one pass), so that all reading from memory
// overlapped the writing as in a copy, was no faster here (one Xeon core,
// family 6 model 207, [2048, 4096], medians of per-round ratios over 31
// rounds, two builds: LayerNorm +0.5 / -4 %, RMSNorm +2 / -7 %). An intrinsics
// model of LayerNorm without gamma and beta ran it at 28.4-29.7 GB/s against
// 21.8-22.7 for the three passes (a copy: 32); with gamma and beta at
// 22.1-22.5, or 25.6-26.4 with them held in L1: their 32 KiB, read beside
// three rows of 16 KiB, overflow the 48 KiB L1. Nor are the passes bound by
// their arithmetic: keeping x - p from the first pass in a scratch row, and
// x - p - m_lo from the second, cut LayerNorm from 9 vector operations an
// element to 6 (the same bits) and ran slower (same Xeon and method, 21
// rounds: [2048, 4096] -11 %, [512, 1024] -4 %). Nor did loading gamma and
// beta once for two rows, whose output passes ran as one loop (4 loads for 2
// outputs instead of 6): +2 %, two threads +1 %, AVX2 -7 % (21 rounds).
// If a finite row overflows these float sums (|x| > ~1e19) or may have
// underflowed them (statistic + eps < 2^-100, e.g. |x| ~ 1e-30 with eps = 0),
// or statistic + eps passes FLT_MAX (eps near it), the row is redone in
// double precision on the scalar path. Rows with inf or
// NaN follow IEEE arithmetic through the formulas: NaN everywhere for
// LayerNorm (x - mean is NaN); for RMSNorm with an inf, rstd = 0, so NaN at
// the inf and 0 elsewhere (as a double-precision reference gives).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <math.h>

#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/elementwise-inl.h"
#include "lib/fpenv.h"
#include "lib/memory.h"
#include "lib/norm.h"
#include "lib/threading.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum over k < n of f(x[k])^2 (kSquare) or f(x[k]), n >= Lanes(d); squares
// are accumulated with one FMA each. Fixed order for a given target and n:
// deterministic. The last vector may overlap the previous ones: the lanes
// already summed are zeroed.
// next (may be null): the first half of the row handled next is prefetched
// (PrefetchNextRowHalf; kToL2 as there).
template <bool kSquare, bool kToL2 = false, class D, class F>
HWY_INLINE float SumRow(D d, const float* x, size_t n, const F& f, const float* next = nullptr) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const auto acc = [](V s, V v) HWY_ATTR { return kSquare ? hn::MulAdd(v, v, s) : hn::Add(s, v); };
  V s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    if (next != nullptr) {
#pragma GCC unroll 4
      for (size_t k = 0; k < 4; ++k) PrefetchNextRowHalf<kToL2>(d, next, 0, i + k * N);
    }
    s0 = acc(s0, f(hn::LoadU(d, x + i)));
    s1 = acc(s1, f(hn::LoadU(d, x + i + N)));
    s2 = acc(s2, f(hn::LoadU(d, x + i + 2 * N)));
    s3 = acc(s3, f(hn::LoadU(d, x + i + 3 * N)));
  }
  for (; i + N <= n; i += N) {
    if (next != nullptr) PrefetchNextRowHalf<kToL2>(d, next, 0, i);
    s0 = acc(s0, f(hn::LoadU(d, x + i)));
  }
  if (i != n) {
    s1 = acc(s1, hn::IfThenZeroElse(hn::FirstN(d, N - (n - i)), f(hn::LoadU(d, x + n - N))));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

// y[k] = (((x[k] - pivot) - shift) * mul) * gamma[k] + beta[k] (gamma 1 and
// beta 0 where null; without gamma one MulAdd). gamma multiplies the
// normalised value, whose magnitude is at most sqrt(n), not mul: rstd can
// be anything from 2^-64 to 2^50, and rstd * gamma left float's normal
// range for gammas near 1e28 or 1e-21 whose outputs are ordinary floats,
// giving inf, NaN (0 x inf) or a subnormal's few bits. As many roundings
// either way; this order's one range limit is gradual: a normalised value
// below 2^-126 (an element 2^126 times smaller than the row's spread) is
// a subnormal, off by at most 2^-150, which gamma then scales
// (docs/numerics.md).
// n >= Lanes(d). kStream: streaming stores, as WriteRow writes them.
// next (may be null): the row the caller normalises next, whose second half
// is prefetched here, its first half in the pass before (the variance's
// SumRow; RMSNorm's only one). Only a row's first pass reads memory; the
// later passes find it in L1/L2, so without this the memory stream stops
// while they run (AVX2, [2048, 4096], 1 / 2 threads: LayerNorm 7.5-8.5 ->
// 10.0-10.8 / 13.8-15.2 -> 16.8-17.6 GB/s, RMSNorm 10.6-11.2 -> 12.3-12.9
// GB/s on one thread, the same on two, all of it prefetched here). Half in
// the pass before, the reads go on while this pass streams its output out:
// one Zen 4 core, medians of per-round ratios, LayerNorm [2048, 4096]
// AVX-512 +6 %, two threads +9 %, AVX2 +18-30 %; RMSNorm the same within
// 3 %; [512, 1024] the same within 2 %. (Prefetching the row after next
// instead: -9 %; all of the next row in either earlier pass: the same as
// halves; a third of it in each of LayerNorm's three passes, the mean's
// too: -14 %, two threads -26 %, on a Xeon of family 6 model 207, AVX-512,
// [2048, 4096], 21 rounds.)
template <bool kStream, class D>
HWY_INLINE void AffineRow(D d, const float* x, float* y, size_t n, float pivot, float shift,
                          float mul, const float* gamma, const float* beta, const float* next) {
  const auto one = [&](auto dd, size_t k) HWY_ATTR {
    if (next != nullptr) PrefetchNextRowHalf<kStream>(dd, next, n, k);
    using V = hn::Vec<decltype(dd)>;
    const V vmul = hn::Set(dd, mul);
    const V b = beta ? hn::LoadU(dd, beta + k) : hn::Zero(dd);
    const V c = hn::Sub(hn::Sub(hn::LoadU(dd, x + k), hn::Set(dd, pivot)), hn::Set(dd, shift));
    if (gamma == nullptr) return hn::MulAdd(c, vmul, b);
    return hn::MulAdd(hn::Mul(c, vmul), hn::LoadU(dd, gamma + k), b);
  };
  const bool stalls =
      kStream && (StreamStalls(y, x) || StreamStalls(y, gamma) || StreamStalls(y, beta));
  WriteRow<kStream>(d, y, n, one, stalls);
}

constexpr float kMinStatistic = 7.8886091e-31f;  // 2^-100

template <bool kStream, class D>
HWY_INLINE void LayerNormRowT(D d, const float* x, float* y, size_t n, const float* gamma,
                              const float* beta, float eps, const float* next) {
  using V = hn::Vec<D>;
  // mean = p + m_lo is kept unrounded as two floats; x - mean is formed as
  // (x - p) - m_lo, where x - p is exact for x within a factor 2 of p.
  const float p = x[0];
  const V vp = hn::Set(d, p);
  const float m_lo =
      SumRow<false>(d, x, n, [&](V v) HWY_ATTR { return hn::Sub(v, vp); }) /
      static_cast<float>(n);
  const V vm_lo = hn::Set(d, m_lo);
  const float sq = SumRow</*kSquare=*/true, /*kToL2=*/kStream>(
      d, x, n, [&](V v) HWY_ATTR { return hn::Sub(hn::Sub(v, vp), vm_lo); }, next);
  const float var = sq / static_cast<float>(n);
  // var + eps past FLT_MAX (eps near it) would give rstd = 0: double too.
  if (!(isfinite(m_lo) && var + eps >= kMinStatistic && var + eps < INFINITY) &&
      RowIsFinite(x, n)) {
    return LayerNormRowF64(x, y, n, gamma, beta, eps);
  }
  AffineRow<kStream>(d, x, y, n, p, m_lo, 1.0f / sqrtf(var + eps), gamma, beta, next);
}

template <bool kStream, class D>
HWY_INLINE void RmsNormRowT(D d, const float* x, float* y, size_t n, const float* gamma,
                            float eps, const float* next) {
  using V = hn::Vec<D>;
  const float sq =
      SumRow</*kSquare=*/true, /*kToL2=*/kStream>(d, x, n, [](V v) HWY_ATTR { return v; }, next);
  const float ms = sq / static_cast<float>(n);
  if (!(ms + eps >= kMinStatistic && ms + eps < INFINITY) && RowIsFinite(x, n)) {
    return RmsNormRowF64(x, y, n, gamma, eps);
  }
  AffineRow<kStream>(d, x, y, n, 0.0f, 0.0f, 1.0f / sqrtf(ms + eps), gamma, nullptr, next);
}

// Runs row(kStream tag, d, x_row, y_row) over the rows in parallel; d is a
// full vector when a row holds one, else a single lane. Calls whose input
// (unless in place) and output together reach the streaming threshold
// (detail::StreamOutput) write with streaming stores: a row's three passes
// are short, and without the read-for-ownership of y's lines an
// out-of-place pass moves 2 bytes per byte written instead of 3.
template <class RowFn>
HWY_INLINE void ForEachRow(const NormArgs& a, const RowFn& row) {
  const hn::ScalableTag<float> d;
  const size_t out = a.rows * a.cols * sizeof(float);
  const bool stream = a.cols >= hn::Lanes(d) && detail::StreamOutput(a.x == a.y ? 0 : out, out);
  detail::ParallelFor(a.rows, a.cols * 2 * sizeof(float), [&](size_t begin, size_t end) HWY_ATTR {
    for (size_t r = begin; r < end; ++r) {
      const float* x = a.x + r * a.ldx;
      float* y = a.y + r * a.ldy;
      const float* next = r + 1 < end ? x + a.ldx : nullptr;
      if (stream) {
        row(std::true_type(), d, x, y, next);
      } else if (a.cols >= hn::Lanes(d)) {
        row(std::false_type(), d, x, y, next);
      } else {
        row(std::false_type(), hn::CappedTag<float, 1>(), x, y, nullptr);
      }
    }
    if (stream) hwy::FlushStream();
  });
}

void LayerNormRows(const NormArgs& a) {
  ForEachRow(a, [&](auto stream, auto d, const float* x, float* y, const float* next) HWY_ATTR {
    LayerNormRowT<decltype(stream)::value>(d, x, y, a.cols, a.gamma, a.beta, a.eps, next);
  });
}

void RmsNormRows(const NormArgs& a) {
  ForEachRow(a, [&](auto stream, auto d, const float* x, float* y, const float* next) HWY_ATTR {
    RmsNormRowT<decltype(stream)::value>(d, x, y, a.cols, a.gamma, a.eps, next);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "lib/dispatch.h"
#include "lib/status.h"

namespace tfk {
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(RmsNormRows);

bool RowIsFinite(const float* x, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    if (!isfinite(x[k])) return false;
  }
  return true;
}

void LayerNormRowF64(const float* x, float* y, size_t n, const float* gamma,
                     const float* beta, float eps) {
  double mean = 0.0, var = 0.0;
  for (size_t k = 0; k < n; ++k) mean += x[k];
  mean /= static_cast<double>(n);
  for (size_t k = 0; k < n; ++k) var += (x[k] - mean) * (x[k] - mean);
  const double rstd = 1.0 / sqrt(var / static_cast<double>(n) + eps);
  for (size_t k = 0; k < n; ++k) {
    const double v = (x[k] - mean) * rstd * (gamma ? gamma[k] : 1.0f) + (beta ? beta[k] : 0.0f);
    y[k] = static_cast<float>(v);
  }
}

void RmsNormRowF64(const float* x, float* y, size_t n, const float* gamma, float eps) {
  double sq = 0.0;
  for (size_t k = 0; k < n; ++k) sq += static_cast<double>(x[k]) * x[k];
  const double rstd = 1.0 / sqrt(sq / static_cast<double>(n) + eps);
  for (size_t k = 0; k < n; ++k) y[k] = static_cast<float>(x[k] * rstd * (gamma ? gamma[k] : 1.0f));
}

namespace {
tfk_status CheckNorm(const char* fn, size_t rows, size_t cols, const float* x, size_t ldx,
                     const float* y, size_t ldy, float eps) {
  using namespace detail;  // NOLINT
  TFK_RETURN_IF_ERROR(CheckSize(fn, "rows", rows));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "cols", cols));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "x", x, rows, cols, ldx));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "y", y, rows, cols, ldy));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "x", x, ldx, "y", y, ldy, rows, cols));
  if (!(eps >= 0.0f) || !isfinite(eps)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "eps (%g) is not finite and >= 0", eps);
  }
  return TFK_SUCCESS;
}

// gamma/beta [cols] are optional; when given they must not overlap y.
tfk_status CheckParam(const char* fn, const char* name, const float* p, size_t cols,
                      const float* y, size_t rows, size_t ldy) {
  if (p == nullptr) return TFK_SUCCESS;
  TFK_RETURN_IF_ERROR(detail::CheckMatrix(fn, name, p, 1, cols, cols));
  const char* y_name = "y";
  // Treat the vector as a 1-row matrix and y as its own extent.
  const float* y_end = y + (rows - 1) * ldy + cols;
  if (p < y_end && y < p + cols) {
    return detail::Fail(TFK_INVALID_ARGUMENT, fn, "%s overlaps %s", name, y_name);
  }
  return TFK_SUCCESS;
}
}  // namespace
}  // namespace tfk

extern "C" {

TFK_API tfk_status tfk_layernorm(size_t rows, size_t cols, const float* x, size_t ldx,
                                 const float* gamma, const float* beta, float eps, float* y,
                                 size_t ldy) {
  const char* fn = "tfk_layernorm";
  tfk::detail::ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(tfk::CheckNorm(fn, rows, cols, x, ldx, y, ldy, eps));
  TFK_RETURN_IF_ERROR(tfk::CheckParam(fn, "gamma", gamma, cols, y, rows, ldy));
  TFK_RETURN_IF_ERROR(tfk::CheckParam(fn, "beta", beta, cols, y, rows, ldy));
  const tfk::NormArgs args{rows, cols, x, ldx, y, ldy, gamma, beta, eps};
  TFK_DISPATCH(tfk::LayerNormRows)(args);
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_rmsnorm(size_t rows, size_t cols, const float* x, size_t ldx,
                               const float* gamma, float eps, float* y, size_t ldy) {
  const char* fn = "tfk_rmsnorm";
  tfk::detail::ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(tfk::CheckNorm(fn, rows, cols, x, ldx, y, ldy, eps));
  TFK_RETURN_IF_ERROR(tfk::CheckParam(fn, "gamma", gamma, cols, y, rows, ldy));
  const tfk::NormArgs args{rows, cols, x, ldx, y, ldy, gamma, nullptr, eps};
  TFK_DISPATCH(tfk::RmsNormRows)(args);
  return TFK_SUCCESS;
}

}  // extern "C"
#endif  // HWY_ONCE
