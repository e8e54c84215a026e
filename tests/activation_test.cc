// tfk_activate (ReLU, GELU erf and tanh forms) and tfk_add against double
// references on every supported ISA.
//
// Bounds (u = 2^-24; derivations in docs/numerics.md):
//   ReLU, add: exact (add: the double sum rounded once).
//   GELU erf:  |y - r| <= 20 u |r| + (|x| + 4) 2^-149 with FMA (AVX2, AVX3),
//              27 u |r| + ... without (SSE4). 0.5 erfc(|x| / sqrt 2) =
//              exp(-x^2/2) P / Q: P / Q fitted to 6.9 u, with its Horner
//              sums (positive terms) and the division 14.4 u first-order with
//              FMA, 19.9 u with two roundings a step; exp 3 u (4 u without FMA)
//              with an exact argument (x^2 = hi + lo); the product 1 u; the
//              final FMA 1 u (a product and a difference without FMA, 2 u).
//   GELU tanh: |y - r| <= (8 + 6 |2u_arg|) u |r| + (|x| + 4) 2^-149, where
//              2u_arg = 2 sqrt(2/pi) (x + 0.044715 x^3): the exp argument
//              carries about 3 roundings, i.e. 3 |2u_arg| u absolute.
//   SiLU:      |y - r| <= 6 u |r| + (|x| + 4) 2^-149: exp(-|x|) of an exact
//              argument (2 u), then 1 + e, x e and one division.
//   The 2^-149 term: where exp(.) is denormal its absolute error is 2^-149,
//   scaled by up to |x| in the final product, plus 4 roundings there.
#include <tfk/tfk.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace tfk_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Where exp(.) lands in the denormals it has an absolute error of 2^-149,
// which the final product scales by up to |x|; 4 more roundings there.
double Denormal(float x) { return (std::fabs(x) + 4) * std::ldexp(1.0, -149); }

double RefGeluErf(double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double TanhArg(double x) { return 2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x); }
double RefGeluTanh(double x) { return x / (1 + std::exp(-TanhArg(x))); }
double RefSilu(double x) { return x / (1 + std::exp(-x)); }

double Ref(tfk_activation act, float x) {
  if (act != TFK_ACT_RELU && x == -kInf) return -0.0;  // the limit
  switch (act) {
    case TFK_ACT_RELU: return std::isnan(x) ? x : (x < 0 ? 0.0 : x);
    case TFK_ACT_GELU_ERF: return RefGeluErf(x);
    case TFK_ACT_GELU_TANH: return RefGeluTanh(x);
    case TFK_ACT_SILU: return RefSilu(x);
    case TFK_ACT_NONE: return x;
  }
  return NAN;
}

// SSE4 has no FMA: a Horner step and GELU's final x - |x| T round twice.
double Tol(tfk_activation act, float x, double ref, bool fma) {
  switch (act) {
    case TFK_ACT_RELU: return 0.0;
    case TFK_ACT_GELU_ERF: return (fma ? 20 : 27) * kEps * std::fabs(ref) + Denormal(x);
    case TFK_ACT_GELU_TANH:
      return (8 + 6 * std::fabs(TanhArg(x))) * kEps * std::fabs(ref) + Denormal(x);
    case TFK_ACT_SILU: return 6 * kEps * std::fabs(ref) + Denormal(x);
    case TFK_ACT_NONE: return 0.0;
  }
  return 0.0;
}

void ExpectAct(tfk_activation act, const float* x, const float* y, size_t n) {
  const bool fma = ActiveIsaHasFma();
  for (size_t i = 0; i < n; ++i) {
    const double r = Ref(act, x[i]);
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(y[i])) << "x=" << x[i];
    } else if (std::isinf(r) || std::isinf(x[i])) {
      ASSERT_EQ(y[i], r) << "x=" << x[i];
    } else {
      ASSERT_NEAR(y[i], r, Tol(act, x[i], r, fma)) << "act " << act << " x=" << x[i];
    }
  }
}

const tfk_activation kActs[] = {TFK_ACT_RELU, TFK_ACT_GELU_ERF, TFK_ACT_GELU_TANH, TFK_ACT_SILU};

class ActivationTest : public IsaTest {};

TEST_P(ActivationTest, AwkwardSizesMisalignedStrided) {
  for (tfk_activation act : kActs) {
    for (size_t cols : AwkwardSizes()) {
      for (size_t misalign : {0, 1, 2}) {
        // x dense and y strided, x strided and y dense, both strided (the
        // kernel takes its flat path only when both are dense).
        const size_t rows = 3, ldx = cols + misalign, ldy = cols + (misalign == 1 ? 0 : 1);
        Buffer x(rows * ldx, misalign), y(rows * ldy, 3 - misalign);
        FillUniform(x.data(), rows * ldx, -8.0f, 8.0f, static_cast<uint32_t>(cols + misalign));
        ASSERT_EQ(tfk_activate(act, rows, cols, x.data(), ldx, y.data(), ldy), TFK_SUCCESS);
        for (size_t r = 0; r < rows; ++r) ExpectAct(act, x.data() + r * ldx, y.data() + r * ldy, cols);
        ASSERT_TRUE(y.GuardsIntact(rows, cols, ldy)) << cols;
      }
    }
  }
}

TEST_P(ActivationTest, DenseAndInPlace) {
  for (tfk_activation act : kActs) {
    for (size_t n : {1, 15, 17, 4096, 100003}) {
      Buffer x(n), y(n), z(n);
      FillUniform(x.data(), n, -30.0f, 30.0f, static_cast<uint32_t>(n));
      std::copy(x.data(), x.data() + n, z.data());
      ASSERT_EQ(tfk_activate(act, 1, n, x.data(), n, y.data(), n), TFK_SUCCESS);
      ExpectAct(act, x.data(), y.data(), n);
      ASSERT_EQ(tfk_activate(act, 1, n, z.data(), n, z.data(), n), TFK_SUCCESS);
      EXPECT_TRUE(SameBits(y.data(), z.data(), n));
      EXPECT_TRUE(y.GuardsIntact() && z.GuardsIntact()) << n;
    }
  }
}

TEST_P(ActivationTest, HostileValues) {
  std::vector<float> x = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          1e-40f, -1e-40f, 1e-45f, -1e-45f, 1e-30f, -1e-30f, 1e13f, -1e13f,
                          5.0f, -5.0f, 9.0f, -9.0f, 13.0f, -13.0f, 14.1f, -14.1f, 19.9f,
                          -19.9f, -20.5f, 88.0f, -88.0f, 0.5f, -0.5f, 1e-7f, -1e-7f,
                          // the |x| clamps: GELU-tanh's, GELU-erf's
                          10.9f, -10.9f, 11.0f, -11.0f, 14.4f, -14.4f, 14.5f, -14.5f};
  // A sweep across the whole range of the erf fit and the tanh exp.
  for (float v = -25.0f; v <= 25.0f; v += 0.0173f) x.push_back(v);
  for (float v = -110.0f; v <= -80.0f; v += 0.37f) x.push_back(v);  // SiLU's denormals
  for (tfk_activation act : kActs) {
    std::vector<float> y(x.size());
    ASSERT_EQ(tfk_activate(act, 1, x.size(), x.data(), x.size(), y.data(), y.size()), TFK_SUCCESS);
    ExpectAct(act, x.data(), y.data(), x.size());
  }
  // ReLU keeps the sign of a zero and keeps NaN (one max(0, x): the operand
  // order matters on x86).
  for (size_t n : {3, 48}) {  // the one-lane path and whole vectors
    std::vector<float> in(n), out(n);
    for (size_t i = 0; i < n; ++i) {
      in[i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    }
    ASSERT_EQ(tfk_activate(TFK_ACT_RELU, 1, n, in.data(), n, out.data(), n), TFK_SUCCESS);
    for (size_t i = 0; i < n; ++i) {
      if (i % 3 == 2) {
        EXPECT_TRUE(std::isnan(out[i])) << i;
      } else {
        EXPECT_EQ(std::signbit(out[i]), i % 3 == 0) << i;
      }
    }
  }
  // GELU of -inf is +0 (the limit), of +inf is +inf, of -0 is -0 (x P(x)),
  // of NaN is NaN: quiet or signalling, of either sign (AVX-512's clamp of
  // |x| returns the limit for a quiet NaN, so the max(0, x) must carry it).
  // 6 values alone (the narrow path), then repeated over whole vectors.
  const float nans[3] = {std::numeric_limits<float>::quiet_NaN(),
                         -std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::signaling_NaN()};
  for (tfk_activation act : {TFK_ACT_GELU_ERF, TFK_ACT_GELU_TANH, TFK_ACT_SILU}) {
    for (size_t n : {6, 48}) {
      std::vector<float> in(n), out(n);
      for (size_t i = 0; i < n; ++i) {
        const size_t j = i % 6;
        in[i] = j == 0 ? -kInf : j == 1 ? kInf : j == 2 ? -0.0f : nans[j - 3];
      }
      ASSERT_EQ(tfk_activate(act, 1, n, in.data(), n, out.data(), n), TFK_SUCCESS);
      for (size_t i = 0; i < n; ++i) {
        const size_t j = i % 6;
        if (j == 0) {
          EXPECT_EQ(out[i], 0.0f) << i;
          EXPECT_FALSE(std::signbit(out[i])) << i;
        } else if (j == 1) {
          EXPECT_EQ(out[i], kInf) << i;
        } else if (j == 2) {
          EXPECT_EQ(out[i], 0.0f) << i;
          EXPECT_TRUE(std::signbit(out[i])) << i;
        } else {
          EXPECT_TRUE(std::isnan(out[i])) << i << " act " << act;
        }
      }
    }
  }
}

TEST_P(ActivationTest, IdenticalBitsForAnyThreadCount) {
  const size_t rows = 300, cols = 3001;
  Buffer x(rows * cols), y1(rows * cols), y2(rows * cols), y7(rows * cols);
  FillUniform(x.data(), rows * cols, -10.0f, 10.0f, 5);
  for (tfk_activation act : kActs) {
    WithThreads(1, [&] { tfk::activate(act, rows, cols, x.data(), y1.data()); });
    WithThreads(2, [&] { tfk::activate(act, rows, cols, x.data(), y2.data()); });
    std::fill(y1.data(), y1.data() + rows * cols, 0.0f);
    std::fill(y7.data(), y7.data() + rows * cols, 0.0f);
    WithThreads(7, [&] { tfk::activate(act, rows, cols - 1, x.data(), y7.data(), cols, cols); });
    WithThreads(1, [&] { tfk::activate(act, rows, cols - 1, x.data(), y1.data(), cols, cols); });
    EXPECT_TRUE(SameBits(y1.data(), y7.data(), rows * cols));
    WithThreads(1, [&] { tfk::activate(act, rows, cols, x.data(), y1.data()); });
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), rows * cols));
  }
  // tfk_add, same rows and partitions.
  Buffer b(rows * cols);
  FillUniform(b.data(), rows * cols, -10.0f, 10.0f, 6);
  float* outs[3] = {y1.data(), y2.data(), y7.data()};
  const int threads[3] = {1, 2, 7};
  for (int i = 0; i < 3; ++i) {
    WithThreads(threads[i], [&] {
      ASSERT_EQ(tfk_add(rows, cols, x.data(), cols, b.data(), cols, outs[i], cols), TFK_SUCCESS);
    });
  }
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), rows * cols));
  EXPECT_TRUE(SameBits(y1.data(), y7.data(), rows * cols));
}

TEST_P(ActivationTest, AddExactStridedAndInPlace) {
  for (size_t cols : AwkwardSizes()) {
    const size_t rows = 3, lda = cols + 1, ldb = cols + 3, ldy = cols;
    Buffer a(rows * lda, 1), b(rows * ldb, 2), y(rows * ldy, 3);
    FillUniform(a.data(), rows * lda, -1e3f, 1e3f, 1);
    FillUniform(b.data(), rows * ldb, -1e3f, 1e3f, 2);
    ASSERT_EQ(tfk_add(rows, cols, a.data(), lda, b.data(), ldb, y.data(), ldy), TFK_SUCCESS);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < cols; ++j) {
        ASSERT_EQ(y[r * ldy + j], a[r * lda + j] + b[r * ldb + j]);
      }
    }
    ASSERT_TRUE(y.GuardsIntact());
    // dense operands (one flat loop; streamed when large)
    std::vector<float> ad(rows * cols), bd(rows * cols), yd(rows * cols);
    FillUniform(ad.data(), ad.size(), -1e3f, 1e3f, 3);
    FillUniform(bd.data(), bd.size(), -1e3f, 1e3f, 4);
    ASSERT_EQ(tfk_add(rows, cols, ad.data(), cols, bd.data(), cols, yd.data(), cols), TFK_SUCCESS);
    for (size_t i = 0; i < yd.size(); ++i) ASSERT_EQ(yd[i], ad[i] + bd[i]);
    // dense, a twice (a + a), then in place into a (a += b): each counts
    // its buffers once against the streaming threshold
    ASSERT_EQ(tfk_add(rows, cols, ad.data(), cols, ad.data(), cols, yd.data(), cols), TFK_SUCCESS);
    for (size_t i = 0; i < yd.size(); ++i) ASSERT_EQ(yd[i], ad[i] + ad[i]);
    std::vector<float> sum(ad.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = ad[i] + bd[i];
    ASSERT_EQ(tfk_add(rows, cols, ad.data(), cols, bd.data(), cols, ad.data(), cols), TFK_SUCCESS);
    for (size_t i = 0; i < ad.size(); ++i) ASSERT_EQ(ad[i], sum[i]);
    // in place into a
    ASSERT_EQ(tfk_add(rows, cols, a.data(), lda, b.data(), ldb, a.data(), lda), TFK_SUCCESS);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < cols; ++j) ASSERT_EQ(a[r * lda + j], y[r * ldy + j]);
    }
  }
}

// Outputs 1-127 bytes after an input modulo 4 KiB take ordinary stores where
// others stream (StreamStalls in lib/elementwise-inl.h; the .streaming ctest
// entry streams every output): the bits must not depend on it.
TEST_P(ActivationTest, SameBitsWhateverTheOutputOffsetModulo4KiB) {
  const size_t n = 5000, gap = 1024 * (n / 1024 + 1);  // gap: a 4 KiB multiple
  Buffer mem(3 * gap + 64), ref(n), sum(n);
  float* x = mem.data();
  float* b = x + gap;
  FillUniform(x, n, -10.0f, 10.0f, 6);
  FillUniform(b, n, -10.0f, 10.0f, 7);
  ASSERT_EQ(tfk_add(1, n, x, n, b, n, sum.data(), n), TFK_SUCCESS);
  for (tfk_activation act : kActs) {
    tfk::activate(act, 1, n, x, ref.data());
    for (size_t delta : {0, 1, 4, 12, 16, 31, 32, 100}) {  // floats
      float* y = x + 2 * gap + delta;
      tfk::activate(act, 1, n, x, y);
      EXPECT_TRUE(SameBits(y, ref.data(), n)) << "act " << act << " delta " << delta;
      ASSERT_EQ(tfk_add(1, n, x, n, b, n, y, n), TFK_SUCCESS);
      EXPECT_TRUE(SameBits(y, sum.data(), n)) << "add, delta " << delta;
    }
  }
  EXPECT_TRUE(mem.GuardsIntact());
}

TFK_INSTANTIATE_FOR_EACH_ISA(ActivationTest);

}  // namespace
}  // namespace tfk_test
