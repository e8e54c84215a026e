// Double-precision reference of scaled dot-product attention for one query
// row, with the error bound that tests hold tfk to.
//
// Bound for one output element O[t, h, c] (u = 2^-24), derived in
// docs/numerics.md:
//  - each score s_j = sum_k (scale q_k) K_jk is a chain of d FMAs (or, on
//    SSE4, multiplies and adds) after one rounding of scale*q_k, so
//    |ds_j| <= E = (d + 2) u max_j A_j, A_j = sum_k |scale q_k K_jk|;
//    softmax is shift-invariant, so each weight moves by a relative factor
//    of at most e^{2E} - 1;
//  - exp(s_j - m) adds (4 + 1.05 |s_j - m|) u relative (3 u for the
//    exponential plus 0.05 |s_j - m| u with FMA, u for the subtraction);
//    block rescales and split merges multiply the
//    numerator and the denominator by the same computed factors, which
//    cancel;
//  - numerator and denominator are chains of at most n + B additions each
//    (n keys, B blocks or splits), and the final multiply by 1/l adds 2 u.
// A weight error e_j moves O by sum_j p_j e_j (v_j - O), so
//   |O - O_ref| <= sum_j p_j e_j (|v_jc| + |O_c|)
//                  + (2 n + 2 B + 8) u sum_j p_j |v_jc|
//                  + 2^-125 (sum_j |v_jc| + n |O_c|) + 2^-120,
//   e_j = e^{2E} - 1 + (4 + 1.05 |s_j - m|) u.
// The 2^-125 term: an unnormalised weight exp(s_j - m) <= 1, or a rescale
// or merge factor, below float's normal range (2^-126) is flushed to 0 or
// kept with a subnormal's absolute error, up to 2^-126 each of the
// numerator's and the denominator's terms; the denominator is >= 1 (the
// largest score's weight is 1).
#ifndef TFK_TESTS_ATTENTION_REF_H_
#define TFK_TESTS_ATTENTION_REF_H_

#include <algorithm>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace tfk_test {

// Reference output ref[0:d] and bound tol[0:d] of one query (q(k), k in
// [0, d)) attending to n keys kk(j, k) with values vv(j, c). n = 0 (every
// key masked) gives zeros with bound 0.
template <class QF, class KF, class VF>
void AttentionRowRef(size_t n, size_t d, float scale, const QF& q, const KF& kk, const VF& vv,
                     std::vector<double>& ref, std::vector<double>& tol) {
  ref.assign(d, 0.0);
  tol.assign(d, 0.0);
  if (n == 0) return;
  std::vector<double> sc(n), p(n);
  double m = -INFINITY, amax = 0;
  for (size_t j = 0; j < n; ++j) {
    double acc = 0, mag = 0;
    for (size_t k = 0; k < d; ++k) {
      const double prod = static_cast<double>(scale) * q(k) * kk(j, k);
      acc += prod;
      mag += std::fabs(prod);
    }
    sc[j] = acc;
    amax = std::max(amax, mag);
    m = std::max(m, acc);
  }
  double l = 0;
  for (size_t j = 0; j < n; ++j) l += (p[j] = std::exp(sc[j] - m));
  for (size_t j = 0; j < n; ++j) p[j] /= l;
  const double E = (d + 2) * kEps * amax;
  const size_t blocks = (n + 63) / 64 + (n + 255) / 256;
  for (size_t c = 0; c < d; ++c) {
    double r = 0, mag = 0;
    for (size_t j = 0; j < n; ++j) {
      r += p[j] * vv(j, c);
      mag += p[j] * std::fabs(vv(j, c));
    }
    double weight_err = 0;
    for (size_t j = 0; j < n; ++j) {
      const double e = std::expm1(2 * E) + (4 + 1.05 * std::fabs(sc[j] - m)) * kEps;
      weight_err += p[j] * e * (std::fabs(vv(j, c)) + std::fabs(r));
    }
    ref[c] = r;
    double abs_v = 0;
    for (size_t j = 0; j < n; ++j) abs_v += std::fabs(vv(j, c));
    tol[c] = weight_err + (2.0 * n + 2.0 * blocks + 8) * kEps * mag +
             std::ldexp(abs_v + n * std::fabs(r), -125) + std::ldexp(1.0, -120);
  }
}

}  // namespace tfk_test

#endif  // TFK_TESTS_ATTENTION_REF_H_
