// Exponentials of a non-positive argument: softmax and attention
// exponentiate x - max(x) <= 0, and the activations (GELU, SiLU) e^-|.|.

#if defined(TFK_LIB_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TFK_LIB_EXP_INL_H_
#undef TFK_LIB_EXP_INL_H_
#else
#define TFK_LIB_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Both exponentials below share one reduction and polynomial: n =
// round(a / ln 2) by the 1.5*2^23 rounding trick (the same add leaves n + bias
// in the low mantissa bits of t, which a shift turns into 2^(n + bias - 127)),
// r = a - n ln 2 in two Cody-Waite steps (ln 2 = C1 + C2, C1 with 9 bits so
// n*C1 is exact), and a degree-6 polynomial for e^r on |r| <= ln2/2 (fitted
// on relative error: 1.9e-9, 1.7 u in float Horner).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpReduced(D d, V a, V magic, V& t) {
  t = hn::MulAdd(a, hn::Set(d, 1.44269504f), magic);
  const V n = hn::Sub(t, magic);
  const V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), a);
  return hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpPolynomial(D d, V r) {
  V p = hn::Set(d, 0.001383684342727065f);
  p = hn::MulAdd(p, r, hn::Set(d, 0.008374815806746483f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.04166822507977486f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.16666419804096222f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.49999991059303284f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  return hn::MulAdd(p, r, hn::Set(d, 1.0f));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Pow2FromBits(D d, V t) {
  const hn::RebindToSigned<D> di;
  return hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));
}

// exp(a) for a = x - max <= 0 (softmax, attention), bias 127. Relative error
// <= 3 u. Results below 2^-126 (a < -87.33) are flushed to 0: against a sum
// >= 1 they are below float resolution. About 12 operations, against ~20 for
// Highway's general Exp, which also handles a > 0 and subnormal results.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V a) {
  V t;
  const V p = ExpPolynomial(d, ExpReduced(d, a, hn::Set(d, 12582912.0f + 127.0f), t));
  return hn::IfThenZeroElse(hn::Lt(a, hn::Set(d, -87.33f)), hn::Mul(p, Pow2FromBits(d, t)));
}

// exp(a + a_lo) for a <= 0 and |a_lo| <= ulp(a), subnormal results included:
// the activations (GELU, SiLU) multiply e^a by x, so a flushed e^a would cost
// them an absolute error up to |x| 2^-126. Two changes to ExpNonPositive:
//  - the bias is 127 + 64, so the shifted bits give 2^(n+64), a normal number
//    for every n >= -151 (a >= -104); p 2^(n+64) is exact and one
//    multiplication by 2^-64 rounds it, once, to a subnormal where it is one
//    (absolute error <= 2^-150);
//  - a_lo, the low part of an argument formed exactly as a + a_lo (GELU-erf's
//    -x^2/2), is added to the reduced argument, where |r| <= ln2/2 absorbs it.
// a is clamped at -104, where e^a < 2^-150 rounds to 0 (so -inf gives 0).
// Relative error <= 3 u above 2^-126, plus 2^-150 absolute. 15 operations
// (14 without a_lo), one of them a shift: on AVX2 here 8.5 ns a vector against
// 15.1 for Highway's Exp, whose conversions and shifts share one port.
//
// MulExpNonPositiveSubnormal returns f e^(a + a_lo) for f passed as f 2^-64
// (exact power-of-two prescaling, e.g. folded into constants), which saves
// the separate 2^-64 multiplication and rounds the product once.
// e^(a + a_lo) 2^64 = p 2^(n+64), exact; kLow: whether a_lo is used.
template <bool kLow, class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositiveTimes2Pow64(D d, V a, V a_lo) {
  V t;
  V r = ExpReduced(d, hn::Max(a, hn::Set(d, -104.0f)), hn::Set(d, 12582912.0f + 191.0f), t);
  if (kLow) r = hn::Add(r, a_lo);
  return hn::Mul(ExpPolynomial(d, r), Pow2FromBits(d, t));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V MulExpNonPositiveSubnormal(D d, V f_times_2_m64, V a, V a_lo) {
  return hn::Mul(ExpNonPositiveTimes2Pow64<true>(d, a, a_lo), f_times_2_m64);
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositiveSubnormal(D d, V a) {
  return hn::Mul(ExpNonPositiveTimes2Pow64<false>(d, a, hn::Zero(d)), hn::Set(d, 0x1p-64f));
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_EXP_INL_H_ toggle
