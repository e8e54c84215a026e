#!/usr/bin/env python3
"""Derives the polynomial of tfk's GELU-erf (lib/activation-inl.h, HalfErfcScaled).

erfc(z) = exp(-z^2) * t * q(t) with t = 1 / (1 + z/2), z in [0, 10.2]
(|x| <= 14.4, where GELU-erf clamps it). q(t) = erfcx(z) / t is smooth on
t in [1/6.1, 1]; it is fitted by a degree-8
polynomial with iteratively reweighted least squares on relative error, in
high precision (mpmath), then checked with float32 Horner evaluation.
Needs numpy and mpmath (pip). Prints the coefficients c0..c8 and the errors.
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40
P, DEG, ZMAX, N = 0.5, 8, 10.2, 4000


def erfcx_over_t(z, t):
    return float(mp.erfc(mp.mpf(z)) * mp.exp(mp.mpf(z) ** 2) / mp.mpf(t))


def fit():
    t0, t1 = 1 / (1 + P * ZMAX), 1.0
    k = np.arange(N)
    t = (t0 + t1) / 2 + (t1 - t0) / 2 * np.cos(np.pi * (k + 0.5) / N)
    z = (1 / t - 1) / P
    q = np.array([erfcx_over_t(zz, tt) for zz, tt in zip(z, t)])
    v = np.vander(t, DEG + 1, increasing=True)
    w = 1 / np.abs(q)
    for _ in range(30):
        c, *_ = np.linalg.lstsq(v * w[:, None], q * w, rcond=None)
        r = (v @ c - q) / q
        w = w * (1 + 5 * np.abs(r) / np.abs(r).max())
    return c, np.abs(r).max()


def float_error(c32):
    zs = np.linspace(0, ZMAX, 20001).astype(np.float32)
    t = (np.float32(1) / (np.float32(1) + np.float32(P) * zs)).astype(np.float32)
    acc = np.full_like(t, c32[-1])
    for cc in c32[-2::-1]:
        acc = (acc * t + cc).astype(np.float32)
    ref = np.array([float(mp.erfc(mp.mpf(float(z))) * mp.exp(mp.mpf(float(z)) ** 2))
                    for z in zs])
    return np.abs(acc.astype(np.float64) * t / ref - 1).max()


if __name__ == "__main__":
    c, err = fit()
    c32 = c.astype(np.float32)
    print("max relative error (exact arithmetic):", err)
    print("max relative error (float32 Horner):  ", float_error(c32))
    for i, x in enumerate(c32):
        print(f"c{i} = {float(x)!r}f")
