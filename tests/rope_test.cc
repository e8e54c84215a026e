// tfk_rope against a double-precision reference on every supported ISA.
//
// Bound (u = 2^-24): the angle is reduced in double (error ~1e-16 * p) and
// rounded to float in [-pi, pi] (<= 2^-22 absolute); Highway's float Sin/Cos
// add <= 3 ulp (<= 6 u absolute for values <= 1); the rotation is 2 roundings
// per output. Each output of a pair (x0, x1) is therefore within
// (|x0| + |x1|) * 16 u of the exact rotation, for any position |p| <= 2^31
// (tfk.h's range for the bound; further out the double reduction's error
// grows with p).
#include <tfk/tfk.hpp>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace tfk_test {
namespace {

struct Shape {
  size_t tokens, heads, head_dim, rotary_dim, ldx;
};

// Exact rotation of a copy `in` into `out` (double), same layout.
void RefRope(const Shape& s, tfk_rope_pairing pairing, double base, const float* in,
             const std::vector<int64_t>& pos, std::vector<double>& out, std::vector<double>& tol) {
  out.assign(s.tokens * s.ldx, 0.0);
  tol.assign(s.tokens * s.ldx, 0.0);
  for (size_t i = 0; i < s.tokens * s.ldx; ++i) out[i] = in[i];
  const size_t half = s.rotary_dim / 2;
  for (size_t t = 0; t < s.tokens; ++t) {
    for (size_t h = 0; h < s.heads; ++h) {
      const size_t o = t * s.ldx + h * s.head_dim;
      for (size_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos[t]) *
                             std::pow(base, -2.0 * static_cast<double>(i) / s.rotary_dim);
        const size_t i0 = pairing == TFK_ROPE_HALF ? o + i : o + 2 * i;
        const size_t i1 = pairing == TFK_ROPE_HALF ? o + i + half : o + 2 * i + 1;
        const double x0 = in[i0], x1 = in[i1];
        out[i0] = x0 * std::cos(theta) - x1 * std::sin(theta);
        out[i1] = x0 * std::sin(theta) + x1 * std::cos(theta);
        tol[i0] = tol[i1] = (std::fabs(x0) + std::fabs(x1)) * 16 * kEps;
      }
    }
  }
}

void RunAndCheck(const Shape& s, tfk_rope_pairing pairing, double base, int64_t start,
                 const std::vector<int64_t>* explicit_pos) {
  Buffer x(s.tokens * s.ldx, 1);
  FillUniform(x.data(), s.tokens * s.ldx, -2.0f, 2.0f, static_cast<uint32_t>(s.head_dim));
  std::vector<float> in(x.data(), x.data() + s.tokens * s.ldx);
  std::vector<int64_t> pos(s.tokens);
  for (size_t t = 0; t < s.tokens; ++t) pos[t] = explicit_pos ? (*explicit_pos)[t] : start + t;
  ASSERT_EQ(tfk_rope(s.tokens, s.heads, s.head_dim, s.rotary_dim, pairing, base, x.data(), s.ldx,
                     start, explicit_pos ? explicit_pos->data() : nullptr),
            TFK_SUCCESS)
      << tfk_last_error();
  std::vector<double> ref, tol;
  RefRope(s, pairing, base, in.data(), pos, ref, tol);
  for (size_t i = 0; i < s.tokens * s.ldx; ++i) {
    if (tol[i] == 0.0) {
      ASSERT_EQ(x[i], in[i]) << "untouched element " << i << " changed";
    } else {
      ASSERT_NEAR(x[i], ref[i], tol[i]) << "element " << i << " head_dim " << s.head_dim;
    }
  }
  ASSERT_TRUE(x.GuardsIntact());
}

class RopeTest : public IsaTest {};

TEST_P(RopeTest, ShapesPairingsAndPartialRotation) {
  for (tfk_rope_pairing pairing : {TFK_ROPE_INTERLEAVED, TFK_ROPE_HALF}) {
    for (size_t head_dim : {2, 6, 8, 34, 64, 80, 128, 130}) {
      for (size_t rotary_dim : {size_t{2}, head_dim,
                                (head_dim / 4) * 2}) {
        if (rotary_dim == 0) continue;
        const size_t heads = 3;
        RunAndCheck({5, heads, head_dim, rotary_dim, heads * head_dim}, pairing, 10000.0, 0,
                    nullptr);
        // Q inside a fused QKV row: ldx > heads * head_dim.
        RunAndCheck({4, heads, head_dim, rotary_dim, 3 * heads * head_dim + 1}, pairing, 500000.0,
                    17, nullptr);
      }
    }
  }
}

TEST_P(RopeTest, LargePositionsStayAccurate) {
  const std::vector<int64_t> pos = {0, 1, 38999, 39001, 123457, 999999, 1000000, 2147483647};
  for (tfk_rope_pairing pairing : {TFK_ROPE_INTERLEAVED, TFK_ROPE_HALF}) {
    for (double base : {10000.0, 500000.0}) {
      RunAndCheck({pos.size(), 2, 128, 128, 256}, pairing, base, 0, &pos);
    }
  }
}

TEST_P(RopeTest, ExplicitPositionsEqualStartOffset) {
  const size_t tokens = 9, heads = 4, d = 64;
  Buffer a(tokens * heads * d), b(tokens * heads * d);
  FillUniform(a.data(), tokens * heads * d, -1.0f, 1.0f, 3);
  std::copy(a.data(), a.data() + tokens * heads * d, b.data());
  std::vector<int64_t> pos(tokens);
  for (size_t t = 0; t < tokens; ++t) pos[t] = 1000 + t;
  tfk::rope_config c{d, d, TFK_ROPE_HALF, 10000.0};
  tfk::rope(c, tokens, heads, a.data(), 1000);
  tfk::rope(c, tokens, heads, b.data(), 0, pos.data());
  EXPECT_TRUE(SameBits(a.data(), b.data(), tokens * heads * d));
  // With positions given, pos_start is not used (any value, even one whose
  // pos_start + t would overflow).
  for (int64_t start : {int64_t{100}, int64_t{-7}, INT64_MAX}) {
    std::copy(b.data(), b.data() + tokens * heads * d, a.data());
    tfk::rope(c, tokens, heads, a.data(), 0, pos.data());
    tfk::rope(c, tokens, heads, b.data(), start, pos.data());
    EXPECT_TRUE(SameBits(a.data(), b.data(), tokens * heads * d)) << start;
  }
}

TEST_P(RopeTest, KeepsPairNormsAndDotDependsOnlyOnDistance) {
  const size_t d = 128;
  for (tfk_rope_pairing pairing : {TFK_ROPE_INTERLEAVED, TFK_ROPE_HALF}) {
    std::vector<float> q(d), k(d);
    FillUniform(q.data(), d, -1.0f, 1.0f, 1);
    FillUniform(k.data(), d, -1.0f, 1.0f, 2);
    tfk::rope_config c{d, d, pairing, 10000.0};
    // q at m, k at n, for several (m, n) with m - n = 5.
    double first = 0;
    for (int64_t n : {0, 100, 5000, 700000}) {
      std::vector<float> qr = q, kr = k;
      tfk::rope(c, 1, 1, qr.data(), n + 5);
      tfk::rope(c, 1, 1, kr.data(), n);
      double dot = 0, scale = 0, nq = 0, nq_r = 0;
      for (size_t i = 0; i < d; ++i) {
        dot += static_cast<double>(qr[i]) * kr[i];
        scale += std::fabs(q[i]) * std::fabs(k[i]);
        nq += static_cast<double>(q[i]) * q[i];
        nq_r += static_cast<double>(qr[i]) * qr[i];
      }
      // Norm: each output within (|x0|+|x1|) 16u, so |q'|^2 within 64 u sum(..).
      EXPECT_NEAR(nq_r, nq, 64 * kEps * nq);
      if (n == 0) first = dot;
      // Both dots carry rotation errors of <= 16 u (|q| |k|) per factor.
      EXPECT_NEAR(dot, first, 4 * 32 * kEps * scale) << "n=" << n;
    }
  }
}

TEST_P(RopeTest, IdenticalBitsForAnyThreadCount) {
  const size_t tokens = 256, heads = 8, d = 128;
  const size_t n = tokens * heads * d;
  Buffer x(n), a(n), b(n), e(n);
  FillUniform(x.data(), n, -1.0f, 1.0f, 6);
  tfk::rope_config c{d, d, TFK_ROPE_INTERLEAVED, 10000.0};
  std::copy(x.data(), x.data() + n, a.data());
  std::copy(x.data(), x.data() + n, b.data());
  std::copy(x.data(), x.data() + n, e.data());
  WithThreads(1, [&] { tfk::rope(c, tokens, heads, a.data(), 3); });
  WithThreads(2, [&] { tfk::rope(c, tokens, heads, e.data(), 3); });
  WithThreads(7, [&] { tfk::rope(c, tokens, heads, b.data(), 3); });
  EXPECT_TRUE(SameBits(a.data(), e.data(), n));
  EXPECT_TRUE(SameBits(a.data(), b.data(), n));
}

TFK_INSTANTIATE_FOR_EACH_ISA(RopeTest);

}  // namespace
}  // namespace tfk_test
