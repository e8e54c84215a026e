#!/usr/bin/env python3
"""Derives the rational function of tfk's GELU-erf (lib/activation-inl.h,
HalfErfcScaledN).

0.5 erfc(a / sqrt 2) = exp(-a^2 / 2) * P(a) / Q(a) for a = |x| in [0, 14.4],
where GELU-erf clamps |x|. f(a) = 0.5 erfcx(a / sqrt 2) is smooth, equals 0.5
at 0 and decays like 1 / (a sqrt(2 pi)), so P has degree 3 and Q, monic,
degree 4 (degrees 4 and 5 fitted to 0.1 u, for two FMAs more). The fit is
linearised (P - f Q, divided by f and the previous Q) and iteratively
reweighted towards the largest relative errors, in the
variable s = a / 14.4 for conditioning, at 3000 Chebyshev nodes with f in
40-digit mpmath; the coefficients are then rescaled to a and rounded to
float32, and the quotient is checked with float32 Horner (each FMA rounded
once) and a rounded division, as the library evaluates it. Last, the bound:
at each a, the fit's error with the float32 coefficients plus the
first-order share of every rounding of the evaluation (each Horner step's
value times a^j over P or Q, one rounding a step with FMA, two without, and
the division's one), the largest over the range.
Needs numpy and mpmath (pip). Prints the coefficients and the errors.
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40
AMAX, DEG_P, DEG_Q, N = 14.4, 3, 4, 3000


# The exponential reduces -a^2/2 by n ln2 in one step, with ln2 rounded to
# float (LN2F): its e^r comes out e^(|n| (LN2F - ln2)) too large, |n| =
# a^2 / (2 ln2) to within 1/32 (AVX-512's sixteenths; 1/2 elsewhere), a
# smooth factor (at most 1 + 2.9e-7) that P / Q takes out.
LN2F = mp.mpf(float(np.float32(0.6931471805599453)))


def f(a):
    z = mp.mpf(a) / mp.sqrt(2)
    drift = z * z / mp.log(2) * (LN2F - mp.log(2))
    return 0.5 * mp.erfc(z) * mp.exp(z * z - drift)


def fit():
    k = np.arange(N)
    s = 0.5 + 0.5 * np.cos(np.pi * (k + 0.5) / N)
    fv = np.array([float(f(x)) for x in s * AMAX])
    q_prev, w = np.ones_like(s), np.ones_like(s)
    vp = np.vander(s, DEG_P + 1, increasing=True)
    vq = np.vander(s, DEG_Q, increasing=True)
    a = np.hstack([vp, -fv[:, None] * vq])
    for it in range(40):
        scale = w / (fv * np.abs(q_prev))
        c, *_ = np.linalg.lstsq(a * scale[:, None], fv * s**DEG_Q * scale, rcond=None)
        p, q = c[:DEG_P + 1], np.append(c[DEG_P + 1:], 1.0)
        q_prev = np.polyval(q[::-1], s)
        r = np.polyval(p[::-1], s) / q_prev / fv - 1
        if it > 8:
            w = w * (1 + 3 * np.abs(r) / np.abs(r).max())
    # P(s) / Q(s) with s = a / AMAX, numerator and denominator times
    # AMAX^DEG_Q: Q becomes monic in a.
    pa = np.array([p[i] * AMAX ** (DEG_Q - i) for i in range(DEG_P + 1)])
    qa = np.array([q[i] * AMAX ** (DEG_Q - i) for i in range(DEG_Q + 1)])
    return pa.astype(np.float32), qa.astype(np.float32), np.abs(r).max()


def float_error(p32, q32):
    a = np.concatenate([np.linspace(0, AMAX, 30001),
                        np.random.RandomState(1).uniform(0, AMAX, 30000)]).astype(np.float32)
    p = np.full_like(a, p32[-1])
    for c in p32[-2::-1]:
        p = (p.astype(np.float64) * a + c).astype(np.float32)
    q = (a + q32[-2]).astype(np.float32)
    for c in q32[-3::-1]:
        q = (q.astype(np.float64) * a + c).astype(np.float32)
    quotient = (p.astype(np.float64) / q).astype(np.float32)
    ref = np.array([float(f(float(x))) for x in a])
    return np.abs(quotient / ref - 1).max()


def rounding_share(coefs, a, fma):
    """First-order relative error of Horner's sum of coefs (highest degree
    first) at a >= 0, in units of u: each step's rounded value times a^j
    (and without FMA its rounded product too) over the sum's value."""
    s, share = coefs[0], 0.0
    for j, c in enumerate(coefs[1:]):
        power = a ** (len(coefs) - 2 - j)
        if not fma:
            share += abs(s * a) * power
        s = s * a + c
        share += abs(s) * power
    return share / abs(s)


def bound(p32, q32):
    """Largest over [0, AMAX] of the fit's error (float32 coefficients) plus
    the rounding shares of P, Q and the division, with and without FMA."""
    p = [float(x) for x in p32[::-1]]
    q = [1.0] + [float(x) for x in q32[-2::-1]]
    worst = [0.0, 0.0]
    for a in np.linspace(0, AMAX, 3001):
        am = mp.mpf(float(a))
        fit_err = float(abs(mp.polyval(p, am) / mp.polyval(q, am) / f(am) - 1)) / 2.0**-24
        for i, fma in enumerate((True, False)):
            # Q is monic: its first step is an addition, a + q[1].
            share = rounding_share(p, a, fma) + rounding_share(q, a, True) + 1
            if not fma:
                share += sum(abs(np.polyval(q[:j + 1], a) * a) * a ** (len(q) - 2 - j)
                             for j in range(1, len(q) - 1)) / abs(np.polyval(q, a))
            worst[i] = max(worst[i], fit_err + share)
    return worst


if __name__ == "__main__":
    p32, q32, err = fit()
    u = 2.0**-24
    print(f"max relative error (exact arithmetic): {err:.3g} = {err / u:.2f} u")
    e32 = float_error(p32, q32)
    print(f"max relative error (float32 Horner):   {e32:.3g} = {e32 / u:.2f} u")
    with_fma, without_fma = bound(p32, q32)
    print(f"bound on P / Q (fit + roundings): {with_fma:.2f} u with FMA, "
          f"{without_fma:.2f} u without")
    print(f"P, degree {DEG_P} down to 0:", ", ".join(f"{float(x)!r}f" for x in p32[::-1]))
    print(f"Q, degree {DEG_Q - 1} down to 0:", ", ".join(f"{float(x)!r}f" for x in q32[-2::-1]))
