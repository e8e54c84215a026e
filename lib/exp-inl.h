// Exponential of a non-positive argument, shared by softmax and attention
// (both exponentiate x - max(x) <= 0).

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

// exp(a) for a = x - max <= 0 (softmax, attention) (up to an FMA
// residual): n = round(a / ln 2) by the 1.5*2^23 rounding trick (the same add
// leaves n + 127 in the low mantissa bits, which a shift turns into 2^n),
// r = a - n ln 2 in two Cody-Waite steps (ln 2 = C1 + C2, C1 with 9 bits so
// n*C1 is exact), and a degree-6 polynomial for e^r on |r| <= ln2/2 (fitted
// on relative error: 1.9e-9, 1.7 u in float Horner). Relative error <= 3 u.
// Results below 2^-126 (a < -87.33) are flushed to 0: against a sum >= 1
// they are below float resolution. About 12 operations, against ~20 for
// Highway's general Exp, which also handles a > 0 and denormal results.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V a) {
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f + 127.0f);  // 1.5 * 2^23 + bias
  const V t = hn::MulAdd(a, hn::Set(d, 1.44269504f), magic);
  const V n = hn::Sub(t, magic);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), a);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 0.001383684342727065f);
  p = hn::MulAdd(p, r, hn::Set(d, 0.008374815806746483f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.04166822507977486f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.16666419804096222f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.49999991059303284f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));
  return hn::IfThenZeroElse(hn::Lt(a, hn::Set(d, -87.33f)), hn::Mul(p, scale));
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_EXP_INL_H_ toggle
