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
//   GELU_erf:  20 u relative (27 u without FMA, SSE4), plus (|x| + 4) 2^-149
//              absolute near underflow;
//   GELU_tanh: (8 + 6 |2u|) u relative (the exp argument carries about 3
//              roundings of a value of size |2u|), plus (|x| + 4) 2^-149
//              absolute;
//   SiLU:      6 u relative, plus (|x| + 4) 2^-149 absolute.
// Special values: f(+inf) = +inf, f(-inf) = +0, f(-0) = -0, NaN -> NaN,
// both for huge |x| and denormals.
//
// Cost: these functions are bound by the FP ports (on AVX2 here ~1.7-2.5
// vector operations per ns per core, divisions aside), so every operation
// counts: GELU-erf takes ~26, GELU-tanh ~16 (AVX-512) and SiLU ~15 (on
// AVX-512 the exponential's table takes 2 of them off the FMA pipes,
// kTableExp, and the clamp of |x| is one operation instead of two,
// ClampedAbs). Each is one long chain of dependent operations, so the row
// loops run several vectors at once through the *N forms below.
// The one division each takes is the largest single cost on AVX-512: a zmm
// division occupies the divider ~10 cycles (one Xeon core, family 6 model
// 167: 8 independent FMAs and one division 10.0 cycles a step, 32 and one
// 17.6). There GELU-tanh runs ~12 cycles a vector and 8.8 with its division
// replaced by a multiplication (GELU-erf 16.8 and 13.9), yet nothing that
// kept a correct quotient gained more than 3 % (two library copies
// alternating in one process, 4 Ki and 256 Ki floats, one thread): a
// 14-bit reciprocal with one correction step (vrcp14ps takes ~3 FP-port
// slots itself) +1-3 %, one division shared by two vectors (1 / (b0 b1)
// and three multiplications) +0 % GELU-tanh and +2-3 % SiLU, a two-stage
// loop that ends one step's vectors while it starts the next's +2-3 %
// (-6 % at 256 Ki with the shared division), 8 vectors a step instead of
// 4 -7 % (spills).

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

// ReLU that keeps NaN: x86's max returns its second operand when one is NaN
// (and for +-0, so -0 stays -0, as a compare and blend would give). One
// operation instead of a compare and a blend.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Relu(D d, V x) {
  return hn::Max(hn::Zero(d), x);
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

// The activations come in *N forms over K vectors at once, in place, each
// step applied to all K before the next (as ExpNonPositiveN, and for the same
// reason: one activation is a chain of ~30 dependent operations); the single
// forms are K = 1.
#define TFK_FOR_EACH_K _Pragma("GCC unroll 8") for (size_t k = 0; k < K; ++k)

// 0.5 * erfc(a / sqrt 2) for a = |x| clamped to [0, kGeluErfMaxAbs],
// relative error <= 19 u (25 u without FMA): exp(-a^2/2) P(a) / Q(a), where
// P / Q (degrees 3 and 4, Q monic) fits 0.5 erfcx(a / sqrt 2) on [0, 14.4]
// times the smooth factor that takes out the drift of the exponential's
// one-step reduction (ExpReducedN, kNegHalf); tools/fit_erfcx.py: 6.6 u in
// exact arithmetic (6.9 u with the coefficients rounded to float), 10.5 u
// seen with float Horner and the division. Every coefficient is positive
// and a >= 0, so neither Horner sum cancels: at most 3 u for P, 4 u for Q
// and 1 u for the quotient (7.8 u first-order over the range; 13.3 u
// without FMA, two roundings a step); with the fit's error at the same a,
// 14.4 u (19.9 u) at most; then the exponential's 3 u (4 u) and the
// product's 1 u. Degrees 4 and 5 fitted to 0.1 u and came to 14 u (22 u)
// in all, for two FMAs more of the ~26 operations on the FMA pipes that
// bound GELU-erf: degrees 3 and 4 are 9-11 % faster (two library copies
// alternating in one process, one Xeon core, family 6 model 207, medians
// of per-round ratios: 256 Ki floats AVX-512 +10.5 %, AVX2 +9 %, two
// threads +9 %; 16 Mi floats +8.5 %, two threads +10 %). The rational form
// had replaced t q(t), t = 1 / (1 + a / (2 sqrt 2)), q of degree 8, which
// spent the same division on t alone.
// -a^2/2 is formed exactly as -(hi + lo)/2 with an FMA and both parts go
// into the exponential, so its argument carries no rounding. At a =
// kGeluErfMaxAbs, exp(-a^2/2) P / Q < 2^-150 and the result is 0; -a^2/2 >=
// -103.7 there, so the exponential needs no clamp.
// a[k] is replaced by the result.
template <size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void HalfErfcScaledN(D d, V* a) {
  // P carries the 2^-64 that ExpNonPositiveTimes2Pow64N leaves on its
  // exponential (an exact scaling); with vscalefps it is not needed.
  // Coefficients from degree 3 down to 0 (Q's degree 4 is 1).
  constexpr float kScale = kHasScalef ? 1.0f : 0x1p-64f;
  static constexpr float kP[4] = {kScale * 0.3988972008228302f, kScale * 2.7914133071899414f,
                                  kScale * 8.44247817993164f, kScale * 11.64237117767334f};
  static constexpr float kQ[4] = {6.992429733276367f, 22.239442825317383f, 35.46304702758789f,
                                  23.284751892089844f};
  V p[K], q[K], lo[K];
  TFK_FOR_EACH_K p[k] = hn::Set(d, kP[0]);
  TFK_FOR_EACH_K q[k] = hn::Add(a[k], hn::Set(d, kQ[0]));  // Q is monic
#pragma GCC unroll 3
  for (size_t c = 1; c < 4; ++c) {
    TFK_FOR_EACH_K p[k] = hn::MulAdd(p[k], a[k], hn::Set(d, kP[c]));
    TFK_FOR_EACH_K q[k] = hn::MulAdd(q[k], a[k], hn::Set(d, kQ[c]));
  }
  TFK_FOR_EACH_K p[k] = hn::Div(p[k], q[k]);
  // a^2 = hi + lo exactly; a becomes hi. -a^2/2 = -(hi + lo)/2: the
  // exponential takes the halving into its constants (kNegHalf), one
  // multiplication fewer than forming a (-a/2), with the same bits.
  TFK_FOR_EACH_K ExactProduct(d, a[k], a[k], a[k], lo[k]);
  if constexpr (kHasScalef) {
    // e^r (P / Q) 2^n by vscalefps: the product is rounded once where the
    // result is normal, as the other path rounds it, and a subnormal result
    // a second time (within the 2^-149 absolute term of the bound); a
    // shift and a multiplication become one vscalefps (one Zen 4 core,
    // 256 Ki floats: +9-10 %).
    V bits[K], n[K];
    ExpReducedPolynomialN</*kLow=*/true, /*kNegHalf=*/true, K>(d, a, lo, /*bias=*/0.0f, bits, n);
    TFK_FOR_EACH_K a[k] = Scalef(hn::Mul(a[k], p[k]), n[k]);
  } else {
    ExpNonPositiveTimes2Pow64N<true, K, /*kNegHalf=*/true>(d, a, lo);
    TFK_FOR_EACH_K a[k] = hn::Mul(a[k], p[k]);
  }
}

// The three smooth activations are x P(x) with 0 <= P <= 1 and P(x) ->
// 1 - P(-x), written as max(0, x) - |x| P(-|x|): one FMA rounding for either
// sign (x < 0: -|x| P(-|x|); x >= 0: x (1 - P(-|x|))), no compare or blend
// on the FP ports that bound these functions, and no cancellation. |x| is
// clamped where P(-|x|) is exactly 0 in float, so +-inf give +inf and +0
// without a special case. NaN propagates through max(0, x), and -0 stays
// -0: x86's max returns its second operand when one is NaN or both are
// zero (Highway leaves that order to the target; tfk's targets are x86
// only).
//
// AVX-512 clamps |x| in one operation instead of two (and, min):
// vrangeps (AVX-512DQ) with imm 0b1010 returns the operand of smaller
// magnitude with its sign cleared. For a quiet NaN it returns the other
// operand, the limit (an SNaN comes back quieted), which is why NaN is
// carried by the max above and not by |x|. Of the ~22-26 operations of
// these functions this is one (two library copies alternating in one
// process, one Xeon core (family 6 model 207), AVX-512, medians of
// per-round ratios in two runs: 32 Ki floats GELU-erf / GELU-tanh / SiLU
// +2.0-4.5 / +4.7-5.3 / +3.8-4.8 %, 256 Ki floats +2.4-2.5 / +4.6-5.2 /
// +3.2-3.4 %). On Zen 4 vrangeps issues to the two pipes vminps uses
// (FP0/FP1, those of the FMAs), while the and it saves could go to any of
// four: no more work on the FMA pipes there (not measured).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ClampedAbs(D d, V x, float limit) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const V c = hn::Set(d, limit);
  if constexpr (sizeof(V) == 64) {
    return V{_mm512_range_ps(x.raw, c.raw, 0xA)};
  } else if constexpr (sizeof(V) == 32) {
    return V{_mm256_range_ps(x.raw, c.raw, 0xA)};
  } else {
    return V{_mm_range_ps(x.raw, c.raw, 0xA)};
  }
#else
  return hn::Min(hn::Set(d, limit), hn::Abs(x));
#endif
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V FromLowerTail(D d, V x, V ax, V tail) {
  return hn::NegMulAdd(ax, tail, hn::Max(hn::Zero(d), x));
}

// sigmoid(-s) = e / (1 + e) for s >= 0 and e = exp(-s) <= 1 (no overflow),
// from es = e * kSigmoidScale (ExpForSigmoidN) as es / (kSigmoidScale + es):
// the same bits, the scaling by a power of two being exact both ways.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V SigmoidOfNegative(D d, V es) {
  return hn::Div(es, hn::Add(hn::Set(d, kSigmoidScale), es));
}

// |x| past which GELU-erf's tail term rounds to 0 (0.5 erfc(14.4 / sqrt 2)
// ~ 2.6e-47 < 2^-150) and -x^2/2 >= -103.7 stays within the exponential's
// range, so it needs no clamp of its own (one operation of ~26).
constexpr float kGeluErfMaxAbs = 14.4f;

template <size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void GeluErfN(D d, V* x) {
  V ax[K], tail[K];
  TFK_FOR_EACH_K ax[k] = tail[k] = ClampedAbs(d, x[k], kGeluErfMaxAbs);
  HalfErfcScaledN<K>(d, tail);
  TFK_FOR_EACH_K x[k] = FromLowerTail(d, x[k], ax[k], tail[k]);
}

// P(-|x|) = sigmoid(-2u(|x|)), 2u = 2 sqrt(2/pi) |x| (1 + 0.044715 x^2),
// formed in log2 units as -2u / ln2 = |x| s, s = c1 + c2 x^2 with c1 = -2
// sqrt(2/pi) log2 e and c2 = 0.044715 c1: x^2 and the MulAdd round, and the
// two constants carry their own, about 3 roundings of a value of size |2u|
// in all; the product |x| s is never rounded (with FMA), as the exponential
// takes its two factors (Exp2OfProductForSigmoidN). Against forming -2u and
// reducing it by ln2 in two Cody-Waite steps: 2 operations fewer on AVX-512
// (of ~18), 3 on AVX2 (its exponential's clamp too); two library copies
// alternating in one process, one Xeon core (family 6 model 167), medians
// of per-round ratios in both orders, 256 Ki floats: AVX-512 +10-13 % (two
// threads +10 %), AVX2 +23-26 %, SSE4 +24 %.
// |x| is clamped at 10.9, where e = exp(-2u) rounds to 0 (2u = 109.8, -2u /
// ln2 = -158.4, e < 2^-158), within the exponential's range (>= -190).
constexpr float kGeluTanhMaxAbs = 10.9f;

template <size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void GeluTanhN(D d, V* x) {
  V ax[K], e[K];
  // -2u / ln2 = |x| (c1 + c2 x^2) log2 e; the product with |x| is left to
  // the exponential's FMAs (Exp2OfProductForSigmoidN).
  constexpr double kC1 = -1.5957691216057308 * kLog2E, kC2 = 0.044715 * kC1;
  TFK_FOR_EACH_K ax[k] = ClampedAbs(d, x[k], kGeluTanhMaxAbs);
  TFK_FOR_EACH_K e[k] = hn::MulAdd(hn::Mul(ax[k], ax[k]), hn::Set(d, static_cast<float>(kC2)),
                                   hn::Set(d, static_cast<float>(kC1)));
  Exp2OfProductForSigmoidN<K>(d, ax, e, static_cast<const V*>(nullptr), e);
  TFK_FOR_EACH_K x[k] = FromLowerTail(d, x[k], ax[k], SigmoidOfNegative(d, e[k]));
}

// SiLU(x) = x sigmoid(x); P(-|x|) = e / (1 + e) with e = exp(-|x|), exact
// argument. Exp (3 u), 1 + e, the division and the FMA: <= 6 u relative,
// plus (|x| + 4) 2^-149 where e is subnormal. Past |x| = 104 e is 0; the
// clamp there keeps the exponential's argument within its own clamps, which
// are left out. SiLU(-inf) = 0, SiLU(+inf) = +inf, NaN -> NaN.
template <size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void SiluN(D d, V* x) {
  V ax[K], e[K];
  TFK_FOR_EACH_K ax[k] = ClampedAbs(d, x[k], 104.0f);
  if constexpr (HWY_NATIVE_FMA) {
    // -|x| / ln2 = |x| (s + s_lo), s + s_lo = -log2 e to 48 bits; the
    // exponential reduces the products exactly (Exp2OfProductForSigmoidN):
    // one operation fewer than negating |x| and reducing by ln2 in two
    // Cody-Waite steps (AVX-512 / AVX2 +2-3 % at 256 Ki floats, one core).
    // ExpNonPositiveN (its one-step reduction) would take as many but add
    // up to 0.046 |x| u (4.8 u at 104), past SiLU's 6 u. Without FMA the
    // product |x| s would round: SSE4 negates |x| and reduces in two steps.
    constexpr float kHi = static_cast<float>(kLog2E);
    constexpr float kLo = static_cast<float>(kLog2E - kHi);
    V s[K], lo[K];
    TFK_FOR_EACH_K s[k] = hn::Set(d, -kHi);
    TFK_FOR_EACH_K lo[k] = hn::Set(d, -kLo);
    Exp2OfProductForSigmoidN<K, /*kLow=*/true>(d, ax, s, lo, e);
  } else {
    TFK_FOR_EACH_K e[k] = hn::Neg(ax[k]);
    ExpForSigmoidN<K>(d, e);
  }
  TFK_FOR_EACH_K x[k] = FromLowerTail(d, x[k], ax[k], SigmoidOfNegative(d, e[k]));
}

#undef TFK_FOR_EACH_K

template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluErf(D d, V x) {
  GeluErfN<1>(d, &x);
  return x;
}
template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluTanh(D d, V x) {
  GeluTanhN<1>(d, &x);
  return x;
}
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Silu(D d, V x) {
  SiluN<1>(d, &x);
  return x;
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_ACTIVATION_INL_H_ toggle
