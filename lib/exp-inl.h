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
// r = a - n ln 2 (one FMA with ln 2 rounded to float, or without FMA two
// Cody-Waite steps: ExpReducedN), and a degree-6 polynomial for e^r on |r|
// <= ln2/2 (fitted on relative error: 1.9e-9, 1.7 u in float Horner).
// AVX-512 rounds to sixteenths instead and takes 2^(j/16) from a table
// (kTableExp, below).
//
// The *N forms work on K vectors at once, each step applied to all K before
// the next. One exponential is a chain of ~12 dependent operations (~60
// cycles at 5 cycles a step), and a core's scheduler holds only a few such
// chains: in program order one after another, they left the FP ports idle.
// Interleaved, K independent chains sit side by side (AVX2 here, softmax's
// exponential pass over a row in L1: 9.3 -> 8.0 ns per vector with K = 4).
//
// The reduction. With FMA r = a - n LN2F is one FMA, LN2F = ln 2 rounded to
// float (1.9e-9 above ln 2; the product is exact inside the FMA, r rounded
// once): e^r then comes out e^(|n| (LN2F - ln2)) too large for a <= 0, |n|
// <= |a| / ln2 + 1/2 (1/32 with the table): a relative error <= 2.75e-9 |a|
// + 1e-9, (0.046 |a| + 0.016) u, which the softmax and attention bounds
// carry as 0.05 |a| u (the constant within the exponential's 3 u). Against
// two Cody-Waite steps, one Xeon core (family 6 model 167), softmax [64,
// 2048], medians of per-round ratios in both orders: AVX-512 +5 %, AVX2
// +6-7 %, on one and two threads; [2048, 32000] +1 %; causal attention
// prefill the same. Without FMA (SSE4) n LN2F would round: two Cody-Waite
// steps, ln 2 = C1 + C2 with C1 of 9 bits, so n C1 is exact.
// kNegHalf: the argument is -a/2 for a >= 0 (GELU-erf's -x^2/2, whose x^2
// then needs no halving of its own), and r comes out as -2 r. Both scalings
// are exact powers of two, folded into the constants (here and in
// ExpPolynomialN's coefficients). Its reduction is by LN2F on every target
// (without FMA in two steps whose constants sum to LN2F exactly): the
// factor e^(|n| (LN2F - ln2)), at most 1 + 2.9e-7 (4.8 u) at GELU-erf's
// |n| <= 150, |n| = a / (2 ln2) to within 1/2, is a smooth function of a
// that GELU-erf's fit takes out (tools/fit_erfcx.py), to within 1e-9
// (AVX-512: n in sixteenths, 6e-11). The FMA rounds -2 r (|-2 r| <= ln2 + 2
// ulp(a)) once: <= 0.1 u of e^r.
template <size_t K, bool kNegHalf = false, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpReducedN(D d, const V* a, V magic, V* t, V* r, V* n) {
  constexpr float s = kNegHalf ? -0.5f : 1.0f;  // the argument is s a
  // ln 2 = C1 + C2, C1 with 9 bits (n C1 exact); LN2F: ln 2 rounded to float.
  constexpr float kC1 = 0.693359375f, kC2 = -2.12194440e-4f, kLn2F = 0.6931471805599453f;
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) t[k] = hn::MulAdd(a[k], hn::Set(d, s * 1.44269504f), magic);
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) n[k] = hn::Sub(t[k], magic);
  if (kNegHalf) {  // -2 r = a + 2 n LN2F (see above)
#if HWY_NATIVE_FMA
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::MulAdd(n[k], hn::Set(d, 2 * kLn2F), a[k]);
#else
    // No FMA (SSE4): n LN2F would round; LN2F = C1 + (LN2F - C1) exactly,
    // both parts short, so the two steps reduce by the same LN2F.
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::MulAdd(n[k], hn::Set(d, 2 * kC1), a[k]);
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::MulAdd(n[k], hn::Set(d, 2 * (kLn2F - kC1)), r[k]);
#endif
  } else {
#if HWY_NATIVE_FMA
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::NegMulAdd(n[k], hn::Set(d, kLn2F), a[k]);
#else
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::NegMulAdd(n[k], hn::Set(d, kC1), a[k]);
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::NegMulAdd(n[k], hn::Set(d, kC2), r[k]);
#endif
  }
}

// e^r on |r| <= ln2/2: the coefficients of degree 6 down to 0.
constexpr float kExpPoly[7] = {0.001383684342727065f, 0.008374815806746483f,
                               0.04166822507977486f,  0.16666419804096222f,
                               0.49999991059303284f,  1.0f, 1.0f};
// e^r - 1 = r (1 + r (c2 + r c3)) on |r| <= ln2/32 (the table form, below).
constexpr float kExpTableC2 = 0.50001615f, kExpTableC3 = 0.16666807f;
// 1.5 2^23: adding it rounds to an integer, left in the low mantissa bits.
constexpr float kRoundMagic = 12582912.0f;
constexpr double kLn2 = 0.6931471805599453, kLog2E = 1.4426950408889634;

// c ln2^j in float: a coefficient of degree j of a polynomial in r, for the
// same polynomial in r' = r / ln2 (the exponential of an argument in log2
// units, Exp2OfProductForSigmoidN).
constexpr float TimesLn2Pow(float c, int j) {
  double v = c;
  for (int i = 0; i < j; ++i) v *= kLn2;
  return static_cast<float>(v);
}

// p[k] = e^r[k]; kNegHalf: e^(-r[k]/2) (see ExpReducedN), the coefficient of
// degree j times (-1/2)^j, so each Horner step is the other's times a power
// of two.
template <size_t K, bool kNegHalf = false, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpPolynomialN(D d, const V* r, V* p) {
  constexpr const float* kC = kExpPoly;
  // (-1/2)^(6 - c) for kC[c], the coefficient of degree 6 - c.
  static constexpr float kScale[7] = {1.0f / 64, -1.0f / 32, 1.0f / 16, -1.0f / 8,
                                      1.0f / 4,  -1.0f / 2,  1.0f};
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) p[k] = hn::Set(d, kNegHalf ? kC[0] * kScale[0] : kC[0]);
#pragma GCC unroll 6
  for (size_t c = 1; c < 7; ++c) {
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      p[k] = hn::MulAdd(p[k], r[k], hn::Set(d, kNegHalf ? kC[c] * kScale[c] : kC[c]));
    }
  }
}

// AVX-512 multiplies by a power of two in one instruction, vscalefps (p 2^n
// for integral n, rounded once, to a subnormal where the product is one;
// for fractional n it takes floor(n)), where the other targets shift n's
// bits into an exponent and multiply. Highway 1.0.3 has no op for it, hence
// the intrinsics on the vector's raw register (full, half or quarter width;
// AVX-512VL for the narrower ones).
constexpr bool kHasScalef = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3;

template <class V>
HWY_INLINE V Scalef(V p, V n) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (sizeof(V) == 64) {
    return V{_mm512_scalef_ps(p.raw, n.raw)};
  } else if constexpr (sizeof(V) == 32) {
    return V{_mm256_scalef_ps(p.raw, n.raw)};
  } else {
    return V{_mm_scalef_ps(p.raw, n.raw)};
  }
#else
  (void)n;
  return p;  // not reached: callers check kHasScalef
#endif
}

// AVX-512 (kTableExp) reduces further, with a table of 16 floats that one
// register holds and vpermps looks up in one instruction (a shuffle pipe,
// not an FMA one): t = a / ln2 + 1.5 2^19 rounds a / ln2 to sixteenths (t
// lies in [2^19, 2^20), whose ulp is 1/16), n = t - 1.5 2^19 = m/16 and
// e^a = 2^floor(n) 2^((m mod 16)/16) e^r with r = a - n ln2, |r| <= ln2/32.
// The low 4 mantissa bits of t are m mod 16, the index vpermps reads; e^r - 1
// = r (1 + r (c2 + r c3)) (fitted on relative error: 1.6e-9), joined to the
// table value T by one FMA, T (e^r - 1) + T; vscalefps takes floor(n). Two
// FMAs fewer than the degree-6 polynomial, for the lookup (one Zen 4 core,
// medians of per-round ratios: softmax [64, 2048] +11-12 %, [2048, 32000]
// +2-3 %; GELU-tanh / SiLU 256 Ki floats +12 %, GELU-erf +4 %; causal
// attention prefill +5 %). Relative error <= 2.1 u: T's rounding 1 u, the
// FMA's 1 u, the polynomial and r's rounding < 0.1 u (1.80 u seen over 60 Mi
// random arguments in [-103, 0] against double, with the two-step
// reduction), plus the one-step reduction's 0.046 |a| u (ExpReducedN).
constexpr bool kTableExp = kHasScalef;
constexpr float kTableExpMagic = 786432.0f;  // 1.5 * 2^19

// T = 2^((m mod 16)/16) from the t of ExpReducedN with kTableExpMagic.
template <class V>
HWY_INLINE V Exp2Sixteenths(V t) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // 2^(j/16) for j = 0..15, rounded to float.
  alignas(64) static constexpr float kT[16] = {
      1.0f,          1.0442737341f, 1.0905077457f, 1.1387885809f,
      1.1892070770f, 1.2418577671f, 1.2968395948f, 1.3542555571f,
      1.4142135382f, 1.4768261909f, 1.5422108173f, 1.6104903221f,
      1.6817928553f, 1.7562521696f, 1.8340080976f, 1.9152065516f};
  const __m512 table = _mm512_load_ps(kT);
  // Narrower vectors (a row's head or tail, short rows) look up in the
  // lower lanes of a full one, so every width gives the same bits.
  if constexpr (sizeof(V) == 64) {
    return V{_mm512_permutexvar_ps(_mm512_castps_si512(t.raw), table)};
  } else if constexpr (sizeof(V) == 32) {
    const __m512i idx = _mm512_castsi256_si512(_mm256_castps_si256(t.raw));
    return V{_mm512_castps512_ps256(_mm512_permutexvar_ps(idx, table))};
  } else {
    const __m512i idx = _mm512_castsi128_si512(_mm_castps_si128(t.raw));
    return V{_mm512_castps512_ps128(_mm512_permutexvar_ps(idx, table))};
  }
#else
  return t;  // not reached: callers check kTableExp
#endif
}

// The reduction and the polynomial, which every exponential here shares:
// a[k] becomes p = e^r for the argument a[k] (+ a_lo[k] if kLow, added to
// the reduced argument; the argument is -(a + a_lo)/2 if kNegHalf); t[k] and
// n[k] are left as ExpReducedN leaves them, for the scaling by 2^n, with
// the exponent bias the caller's scaling wants in t's low bits. With
// kTableExp (no bias: vscalefps scales): p = T e^r and n = m/16.
template <bool kLow, bool kNegHalf, size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpReducedPolynomialN(D d, V* a, const V* a_lo, float bias, V* t, V* n) {
  V r[K];
  const float magic = kTableExp ? kTableExpMagic : kRoundMagic + bias;
  ExpReducedN<K, kNegHalf>(d, a, hn::Set(d, magic), t, r, n);
  if (kLow) {
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::Add(r[k], a_lo[k]);
  }
  if constexpr (kTableExp) {
    // kNegHalf: r is -2 r (ExpReducedN), the coefficient of degree j times
    // (-1/2)^j.
    constexpr float c1 = kNegHalf ? -0.5f : 1.0f;
    constexpr float c2 = (kNegHalf ? 0.25f : 1.0f) * kExpTableC2;
    constexpr float c3 = (kNegHalf ? -0.125f : 1.0f) * kExpTableC3;
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      const V e_r_minus_1 =
          hn::Mul(hn::MulAdd(hn::MulAdd(hn::Set(d, c3), r[k], hn::Set(d, c2)), r[k],
                             hn::Set(d, c1)),
                  r[k]);
      const V table = Exp2Sixteenths(t[k]);
      a[k] = hn::MulAdd(table, e_r_minus_1, table);
    }
  } else {
    ExpPolynomialN<K, kNegHalf>(d, r, a);
  }
}

// p[k] *= 2^(n[k] + bias - 127) with t[k] from ExpReducedN: the shift puts
// n + bias into an exponent field (n + bias >= 1 for a normal power).
template <size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void TimesPow2FromBitsN(D d, const V* t, V* p) {
  const hn::RebindToSigned<D> di;
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) {
    p[k] = hn::Mul(p[k], hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t[k]))));
  }
}

// exp(a[k]) for K vectors a = x - max <= 0 (softmax, attention), in place,
// bias 127. Relative error <= 3 u (AVX-512's table form 2.1 u), plus 0.046
// |a| u with FMA (ExpReducedN's one-step reduction). The clamp
// keeps NaN (x86's max returns its second operand when one is NaN; tfk's
// targets are x86 only) and sends -inf to 0:
//  - shifted bits: a is clamped at -88, where n = -127 and the bits give +0:
//    results below 2^-126.5 (a < -87.68) are 0, and those between it and
//    2^-126 come out subnormal, within 2^-150; against a sum >= 1 both are
//    below float resolution;
//  - vscalefps (AVX-512): a is clamped at -110, where floor(n) = -159 and
//    p 2^n rounds to 0; subnormal results are rounded once (within 2^-150).
// 12 operations with the shift; on AVX-512 10, 7 of them on the FMA pipes
// (vscalefps against the shift: softmax [64, 2048] +4-5 %; the table
// against the degree-6 polynomial, above), against ~20 for Highway's
// general Exp, which also handles a > 0.
// kClamp = false: the caller guarantees a >= the clamp (-110 with
// vscalefps, else -88) or NaN, and saves the operation.
template <size_t K, bool kClamp = true, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpNonPositiveN(D d, V* a) {
  V t[K], n[K];
  const V lowest = hn::Set(d, kHasScalef ? -110.0f : -88.0f);
  if (kClamp) {
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) a[k] = hn::Max(lowest, a[k]);
  }
  ExpReducedPolynomialN<false, false, K>(d, a, static_cast<const V*>(nullptr), 127.0f, t, n);
  if constexpr (kHasScalef) {
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) a[k] = Scalef(a[k], n[k]);
  } else {
    TimesPow2FromBitsN<K>(d, t, a);
  }
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V a) {
  ExpNonPositiveN<1>(d, &a);
  return a;
}

// exp(a + a_lo) for a <= 0 and |a_lo| <= ulp(a), subnormal results included:
// the activations (GELU, SiLU) multiply e^a by x, so a flushed e^a would cost
// them an absolute error up to |x| 2^-126. Two changes to ExpNonPositive:
//  - the bias is 127 + 64, so the shifted bits give 2^(n+64), a normal number
//    for every n >= -151 (a >= -104); p 2^(n+64) is exact, and the caller's
//    one rounding of a product or quotient with it (below) brings it, once,
//    to a subnormal where it is one (absolute error <= 2^-150);
//  - a_lo, the low part of an argument formed exactly as a + a_lo (GELU-erf's
//    -x^2/2), is added to the reduced argument, where |r| <= ln2/2 absorbs it.
// The caller keeps a >= -104 (or NaN), so that 2^(n+64) stays normal; below
// it e^a < 2^-150 would round to 0 anyway (GELU-erf and SiLU clamp |x| so
// that it holds: no clamp here, one operation saved).
// Relative error <= 3 u above 2^-126, plus 2^-150 absolute. 14 operations
// (13 without a_lo), one of them a shift: on AVX2 here (with the 2^-64
// multiplication, since folded) 8.5 ns a vector against 15.1 for Highway's
// Exp, whose conversions and shifts share one port.
//
// ExpNonPositiveTimes2Pow64N leaves e^(a + a_lo) 2^64 = p 2^(n+64), exact, in
// a[k] (kLow: whether a_lo is used): a caller that multiplies the result by a
// factor f can pass f 2^-64 (an exact power-of-two prescaling, e.g. folded
// into constants, as GELU-erf does), which saves the separate 2^-64
// multiplication and rounds the product once; ExpForSigmoidN's callers divide
// by 2^64 + e 2^64 instead.
// kNegHalf: the argument is -(a + a_lo)/2 for a >= 0 (see ExpReducedN).
template <bool kLow, size_t K, bool kNegHalf = false, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpNonPositiveTimes2Pow64N(D d, V* a, const V* a_lo) {
  static_assert(!kTableExp || sizeof(V) == 0, "AVX-512 scales with vscalefps instead");
  V t[K], n[K];
  ExpReducedPolynomialN<kLow, kNegHalf, K>(d, a, a_lo, 191.0f, t, n);
  TimesPow2FromBitsN<K>(d, t, a);
}

// The sigmoids of GELU-tanh and SiLU take e^a kSigmoidScale, subnormal
// values of e^a included, and divide by kSigmoidScale + e^a kSigmoidScale:
// the scaling saves a multiplication. With vscalefps (AVX-512), which rounds
// a subnormal result once by itself, the scale is 1; elsewhere 2^64, whose
// shifted bits stay normal (ExpNonPositiveTimes2Pow64N). Both give the bits
// of e^a rounded once, scaled exactly (against e^a 2^64 multiplied by 2^-64,
// then e / (1 + e)): GELU-tanh / SiLU, 256 Ki floats, one core, medians of
// per-round ratios: AVX-512 +10 / +11 % (two threads +9 %), AVX2 +5 / +5 %,
// SSE4 +2 %.
constexpr float kSigmoidScale = kHasScalef ? 1.0f : 0x1p64f;

// e^a 2^64 for K vectors a <= 0 in place, for SiLU without FMA (SSE4; the
// other targets take Exp2OfProductForSigmoidN). The caller keeps a >= -104
// or NaN (ExpNonPositiveTimes2Pow64N).
template <size_t K, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpForSigmoidN(D d, V* a) {
  static_assert(!kHasScalef || sizeof(V) == 0, "AVX-512 takes Exp2OfProductForSigmoidN");
  ExpNonPositiveTimes2Pow64N<false, K>(d, a, static_cast<const V*>(nullptr));
}

// 2^(x[k] s[k]) kSigmoidScale for K vectors whose products satisfy -190 <=
// x s <= 0, into e[k] (which may be s), for a sigmoid (see kSigmoidScale):
// an exponential whose argument, in log2 units, is the product of two
// floats the caller has not multiplied (GELU-tanh: |x| times its
// polynomial in x^2, whose constants carry log2 e). With FMA the product is
// never rounded: t = x s + magic rounds it (to sixteenths with the table,
// else to integers, as ExpReducedN does) and r = x s - n leaves the rest,
// rounded once (|r| <= 1/32 or 1/2). The reduction so takes 3 operations
// where ExpReducedN takes 4-5 with the product (its multiplication, the
// rounding, the subtraction, one FMA with ln2 or two Cody-Waite steps), and
// the argument carries one rounding fewer. Without FMA (SSE4) the product
// rounds once, as it did before the reduction; x s - n is then exact. The
// polynomials are ExpReducedPolynomialN's in r ln2 (the coefficient of
// degree j times ln2^j, rounded to float: < 0.3 u more), so the result is
// within its 2.1 u (table) or 3 u, plus 2^-150 absolute once scaled down.
// n >= -190 keeps the shifted bits (bias 191) a normal 2^(n + 64), and t
// well within [2^19, 2^20) with the table; vscalefps rounds a subnormal
// result once, and the other targets' sigmoid quotient does: 0 for x s <
// -150.
// kLow: the argument is x (s + s_lo), s_lo a low part of the factor (SiLU's
// log2 e as two floats), added to r as x s_lo by one more FMA.
template <size_t K, bool kLow = false, class D, class V = hn::Vec<D>>
HWY_INLINE void Exp2OfProductForSigmoidN(D d, const V* x, const V* s, const V* s_lo, V* e) {
  V t[K], n[K], r[K];
  const V magic = hn::Set(d, kTableExp ? kTableExpMagic : kRoundMagic + 191.0f);
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) t[k] = hn::MulAdd(x[k], s[k], magic);
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) n[k] = hn::Sub(t[k], magic);
#pragma GCC unroll 8
  for (size_t k = 0; k < K; ++k) r[k] = hn::MulSub(x[k], s[k], n[k]);
  if (kLow) {
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) r[k] = hn::MulAdd(x[k], s_lo[k], r[k]);
  }
  if constexpr (kTableExp) {
    constexpr float k1 = TimesLn2Pow(1.0f, 1), k2 = TimesLn2Pow(kExpTableC2, 2);
    constexpr float k3 = TimesLn2Pow(kExpTableC3, 3);
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) {
      const V p_minus_1 = hn::Mul(
          hn::MulAdd(hn::MulAdd(hn::Set(d, k3), r[k], hn::Set(d, k2)), r[k], hn::Set(d, k1)), r[k]);
      const V table = Exp2Sixteenths(t[k]);
      e[k] = Scalef(hn::MulAdd(table, p_minus_1, table), n[k]);
    }
  } else {
    // kExpPoly (degree 6 - c at c) times ln2^(6 - c).
#pragma GCC unroll 8
    for (size_t k = 0; k < K; ++k) e[k] = hn::Set(d, TimesLn2Pow(kExpPoly[0], 6));
#pragma GCC unroll 6
    for (size_t c = 1; c < 7; ++c) {
      const V coefficient = hn::Set(d, TimesLn2Pow(kExpPoly[c], 6 - static_cast<int>(c)));
#pragma GCC unroll 8
      for (size_t k = 0; k < K; ++k) e[k] = hn::MulAdd(e[k], r[k], coefficient);
    }
    TimesPow2FromBitsN<K>(d, t, e);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#endif  // TFK_LIB_EXP_INL_H_ toggle
