// Activation functions shared by the activation kernels and the matmul
// epilogues: ReLU, GELU in its erf and tanh forms, SiLU. Highway 1.0.3 has
// no Erf, so the erf form is built here from an exponential and a fitted
// polynomial.
//
// All are written as x * P(x) with P computed without cancellation, so the
// relative error stays small for negative x, where 1 + erf(.) and 1 + tanh(.)
// would cancel:
//   GELU_erf(x)  = x * Phi(x),  Phi(x) = 0.5 erfc(-x / sqrt 2)
//   GELU_tanh(x) = 0.5 x (1 + tanh u) = x sigmoid(2u),
//                  u = sqrt(2/pi) (x + 0.044715 x^3)
// Error bounds with u = 2^-24 (derived in docs/numerics.md, asserted by
// tests/activation_test.cc):
//   GELU_erf:  16 u relative, plus (|x| + 4) 2^-149 absolute near underflow;
//   GELU_tanh: (8 + 6 |2u|) u relative (the exp argument carries 5 roundings
//              of a value of size |2u|), plus (|x| + 4) 2^-149 absolute;
//   SiLU:      6 u relative, plus (|x| + 4) 2^-149 absolute.
// Special values: f(+inf) = +inf, f(-inf) = +0, NaN -> NaN, both for huge
// |x| and denormals.
//
// Cost: these functions are bound by the FP ports (on AVX2 here ~1.7-2.5
// vector operations per ns per core, divisions aside), so every operation
// counts: GELU-erf takes ~35, GELU-tanh ~24 and SiLU ~21.

#if defined(TFK_LIB_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TFK_LIB_ACTIVATION_INL_H_
#undef TFK_LIB_ACTIVATION_INL_H_
#else
#define TFK_LIB_ACTIVATION_INL_H_
#endif

#include <math.h>

#include "hwy/highway.h"
#include "lib/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ReLU that keeps NaN (x86 max would turn NaN into 0).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Relu(D d, V x) {
  return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x);
}

// hi + lo = a * b exactly (|a b| <= 2^100, no underflow): one FMA, or without
// FMA (SSE4) Veltkamp's split of a and b into 12-bit halves and Dekker's
// product.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void ExactProduct(D d, V a, V b, V& hi, V& lo) {
  hi = hn::Mul(a, b);
#if HWY_NATIVE_FMA
  (void)d;
  lo = hn::MulSub(a, b, hi);
#else
  const V split = hn::Set(d, 4097.0f);  // 2^12 + 1
  const V ca = hn::Mul(a, split);
  const V a_hi = hn::Sub(ca, hn::Sub(ca, a));
  const V a_lo = hn::Sub(a, a_hi);
  const V cb = hn::Mul(b, split);
  const V b_hi = hn::Sub(cb, hn::Sub(cb, b));
  const V b_lo = hn::Sub(b, b_hi);
  // Dekker's order: every partial sum is exact.
  lo = hn::Add(hn::Sub(hn::Mul(a_hi, b_hi), hi), hn::Mul(a_hi, b_lo));
  lo = hn::Add(hn::Add(lo, hn::Mul(a_lo, b_hi)), hn::Mul(a_lo, b_lo));
#endif
}

// 0.5 * erfc(a / sqrt 2) for a = |x| clamped to [0, 20], relative error
// <= 12 u. erfc(z) = exp(-z^2) * t * q(t), t = 1 / (1 + z/2); q is a degree-9
// fit of erfcx(z)/t on z in [0, 10] (tools/fit_erfcx.py: 2e-8 relative,
// 2.6e-7 with float Horner). -z^2 = -a^2/2 is formed exactly as hi + lo with
// an FMA and both parts go into the exponential, so its argument carries no
// rounding, and the final product is rounded once.
// Past a = 14.6 (z = 10.3) exp(-z^2) < 2^-150 and the result is 0 (the fit's
// range ends at z = 10, where the result is already below 2^-143).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V HalfErfcScaled(D d, V a) {
  // 1 + z/2 = 1 + a / (2 sqrt 2)
  const V t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(a, hn::Set(d, 0.35355339f), hn::Set(d, 1.0f)));
  // q 2^-65: the fit's coefficients times 0.5 and the 2^-64 that
  // MulExpNonPositiveSubnormal takes off its exponential (exact scalings).
  constexpr float kScale = 0x1p-65f;
  V q = hn::Set(d, kScale * 0.012284058146178722f);
  q = hn::MulAdd(q, t, hn::Set(d, kScale * -0.12325560301542282f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * 0.4289303719997406f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * -0.6700248718261719f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * 0.4212760627269745f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * -0.09831848740577698f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * 0.2255421131849289f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * 0.2386447936296463f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * 0.2828570306301117f));
  q = hn::MulAdd(q, t, hn::Set(d, kScale * 0.2820644974708557f));
  // -z^2 = a * (-a/2) = hi + lo exactly (-a/2 is exact).
  V hi, lo;
  ExactProduct(d, a, hn::Mul(a, hn::Set(d, -0.5f)), hi, lo);
  return MulExpNonPositiveSubnormal(d, hn::Mul(t, q), hi, lo);
}

// The three smooth activations are x P(x) with 0 <= P <= 1 and P(x) ->
// 1 - P(-x), written as max(x, 0) - |x| P(-|x|): one FMA rounding for either
// sign (x < 0: -|x| P(-|x|); x >= 0: x (1 - P(-|x|))), no compare or blend
// on the FP ports that bound these functions, and no cancellation. |x| is
// clamped where P(-|x|) is exactly 0 in float, so +-inf give +inf and +0
// without a special case. NaN propagates through |x|: x86's min returns its
// second operand when one is NaN (Highway leaves that order to the target;
// tfk's targets are x86 only).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ClampedAbs(D d, V x, float limit) {
  return hn::Min(hn::Set(d, limit), hn::Abs(x));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V FromLowerTail(D d, V x, V ax, V tail) {
  return hn::NegMulAdd(ax, tail, hn::Max(x, hn::Zero(d)));
}

// sigmoid(-s) = e / (1 + e) for s >= 0 and e = exp(-s) <= 1 (no overflow).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V SigmoidOfNegative(D d, V e) {
  return hn::Div(e, hn::Add(hn::Set(d, 1.0f), e));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluErf(D d, V x) {
  const V ax = ClampedAbs(d, x, 20.0f);
  return FromLowerTail(d, x, ax, HalfErfcScaled(d, ax));
}

// P(-|x|) = sigmoid(-2u(|x|)), 2u = 2 sqrt(2/pi) |x| (1 + 0.044715 x^2);
// past |x| = 20 (2u = 603) e is 0.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluTanh(D d, V x) {
  const V ax = ClampedAbs(d, x, 20.0f);
  const V poly = hn::MulAdd(hn::Mul(ax, ax), hn::Set(d, 0.044715f), hn::Set(d, 1.0f));
  const V neg_2u = hn::Mul(hn::Mul(ax, poly), hn::Set(d, -1.5957691216057308f));
  const V e = ExpNonPositiveSubnormal(d, neg_2u);
  return FromLowerTail(d, x, ax, SigmoidOfNegative(d, e));
}

// SiLU(x) = x sigmoid(x); P(-|x|) = e / (1 + e) with e = exp(-|x|), exact
// argument. Exp (3 u), 1 + e, the division and the FMA: <= 6 u relative,
// plus (|x| + 4) 2^-149 where e is subnormal. Past |x| = 104 e is 0.
// SiLU(-inf) = 0, SiLU(+inf) = +inf, NaN -> NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Silu(D d, V x) {
  const V ax = ClampedAbs(d, x, 104.0f);
  const V e = ExpNonPositiveSubnormal(d, hn::Neg(ax));
  return FromLowerTail(d, x, ax, SigmoidOfNegative(d, e));
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_ACTIVATION_INL_H_ toggle
