// Activation functions shared by kernels (activations now, matmul epilogues
// later): GELU in its erf and tanh forms. Highway 1.0.3 has Exp and Tanh but
// no Erf, so the erf form is built here from Exp and a fitted polynomial.
//
// Both are written as x * P(x) with P computed without cancellation, so the
// relative error stays small for negative x, where 1 + erf(.) and 1 + tanh(.)
// would cancel:
//   GELU_erf(x)  = x * Phi(x),  Phi(x) = 0.5 erfc(-x / sqrt 2)
//   GELU_tanh(x) = 0.5 x (1 + tanh u) = x sigmoid(2u),
//                  u = sqrt(2/pi) (x + 0.044715 x^3)
// Error bounds with u = 2^-24 (derived in docs/numerics.md, asserted by
// tests/activation_test.cc):
//   GELU_erf:  16 u relative, plus (|x| + 4) 2^-149 absolute near underflow;
//   GELU_tanh: (8 + 6 |2u|) u relative (the exp argument carries 5 roundings
//              of a value of size |2u|), plus (|x| + 4) 2^-149 absolute.
// Special values: GELU(+inf) = +inf, GELU(-inf) = -0, NaN -> NaN, both for
// huge |x| and denormals.

#if defined(TFK_LIB_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TFK_LIB_ACTIVATION_INL_H_
#undef TFK_LIB_ACTIVATION_INL_H_
#else
#define TFK_LIB_ACTIVATION_INL_H_
#endif

#include <math.h>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ReLU that keeps NaN (x86 max would turn NaN into 0).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Relu(D d, V x) {
  return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x);
}

// hi + lo = a * a exactly (|a| <= 2^62): one FMA, or without FMA (SSE4)
// Veltkamp's split of a into 12-bit halves and Dekker's product.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void ExactSquare(D d, V a, V& hi, V& lo) {
  hi = hn::Mul(a, a);
#if HWY_NATIVE_FMA
  (void)d;
  lo = hn::MulSub(a, a, hi);
#else
  const V c = hn::Mul(a, hn::Set(d, 4097.0f));  // 2^12 + 1
  const V a_hi = hn::Sub(c, hn::Sub(c, a));
  const V a_lo = hn::Sub(a, a_hi);
  const V cross = hn::Mul(a_hi, a_lo);
  lo = hn::Add(hn::Add(hn::Sub(hn::Mul(a_hi, a_hi), hi), hn::Add(cross, cross)),
               hn::Mul(a_lo, a_lo));
#endif
}

// 0.5 * erfc(|x| / sqrt 2) for float x, relative error <= 12 u.
// erfc(z) = exp(-z^2) * t * q(t), t = 1 / (1 + z/2); q is a degree-9 fit of
// erfcx(z)/t on z in [0, 10] (tools/fit_erfcx.py: 2e-8 relative, 2.6e-7 with
// float Horner). z^2 = x^2 / 2 is formed exactly as hi + lo with an FMA, so
// the exp argument carries no rounding: exp(-z^2) = exp(-hi/2) (1 - lo/2).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V HalfErfcScaled(D d, V x) {
  // Past |x| = 14.6 (z = 10.3) exp(-z^2) < 2^-149 and the result is 0; the
  // clamp keeps x^2 finite (the fit's range ends at z = 10, where the result
  // is already below 2^-143).
  const V ax = hn::Min(hn::Abs(x), hn::Set(d, 20.0f));
  const V z = hn::Mul(ax, hn::Set(d, 0.70710678f));
  const V t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(z, hn::Set(d, 0.5f), hn::Set(d, 1.0f)));
  V q = hn::Set(d, 0.012284058146178722f);
  q = hn::MulAdd(q, t, hn::Set(d, -0.12325560301542282f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.4289303719997406f));
  q = hn::MulAdd(q, t, hn::Set(d, -0.6700248718261719f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.4212760627269745f));
  q = hn::MulAdd(q, t, hn::Set(d, -0.09831848740577698f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.2255421131849289f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.2386447936296463f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.2828570306301117f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.2820644974708557f));
  V hi, lo;
  ExactSquare(d, ax, hi, lo);
  const V half = hn::Set(d, 0.5f);
  const V e = hn::Exp(d, hn::Neg(hn::Mul(hi, half)));
  const V e_corrected = hn::NegMulAdd(e, hn::Mul(lo, half), e);  // e (1 - lo/2)
  return hn::Mul(hn::Mul(e_corrected, half), hn::Mul(t, q));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluErf(D d, V x) {
  const V tail = HalfErfcScaled(d, x);  // Phi(-|x|)
  const V phi = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), tail,
                               hn::Sub(hn::Set(d, 1.0f), tail));
  // GELU(x) underflows to -0 below -20; this also maps -inf (-inf * 0) to -0.
  return hn::IfThenElse(hn::Lt(x, hn::Set(d, -20.0f)), hn::Set(d, -0.0f),
                        hn::Mul(x, phi));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluTanh(D d, V x) {
  // -2u = -2 sqrt(2/pi) x (1 + 0.044715 x^2)
  const V x2 = hn::Mul(x, x);
  const V poly = hn::MulAdd(x2, hn::Set(d, 0.044715f), hn::Set(d, 1.0f));
  V arg = hn::Mul(hn::Mul(x, poly), hn::Set(d, -1.5957691216057308f));
  // sigmoid(-arg) with e = exp(-|arg|) <= 1, so nothing overflows:
  // arg <= 0: 1 / (1 + e); arg > 0: e / (1 + e). NaN stays NaN through x.
  const V e = hn::Exp(d, hn::Neg(hn::Abs(arg)));
  const V one = hn::Set(d, 1.0f);
  const V num = hn::IfThenElse(hn::Gt(arg, hn::Zero(d)), e, one);
  const V y = hn::Mul(x, hn::Div(num, hn::Add(one, e)));
  return hn::IfThenElse(hn::Lt(x, hn::Set(d, -20.0f)), hn::Set(d, -0.0f), y);
}

// SiLU(x) = x sigmoid(x) with e = exp(-|x|) <= 1 (nothing overflows):
// x >= 0: x / (1 + e); x < 0: x e / (1 + e). Exp of an exact argument
// (2 u), 1 + e, x e and the division: <= 6 u relative, plus (|x| + 4) 2^-149
// where e is denormal. SiLU(-inf) = -0, SiLU(+inf) = +inf, NaN -> NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Silu(D d, V x) {
  const V e = hn::Exp(d, hn::Neg(hn::Abs(x)));
  const V num = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(x, e), x);
  const V y = hn::Div(num, hn::Add(hn::Set(d, 1.0f), e));
  return hn::IfThenElse(hn::Eq(x, hn::Set(d, -INFINITY)), hn::Set(d, -0.0f), y);
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_ACTIVATION_INL_H_ toggle
