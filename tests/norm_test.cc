// tfk_layernorm and tfk_rmsnorm against double references on every ISA.
//
// Bounds (u = 2^-24). Sums run over >= 4 accumulators of >= 4 lanes, chains
// of c = n/16 + 8 additions. LayerNorm keeps the mean as p + m_lo (p = x[0]):
// m_lo has absolute error <= c u S, S = sum|x - p| / n, which moves every
// normalised value by c u S / sd; the variance has relative error
// <= (c + 4) u, the rstd half of it plus 2 u; the affine step 3 u. So
//   |y - r| <= |gamma| (|xhat| (c/2 + 8) + c S / sd + 2) u + |beta| u
// with xhat the exact normalised value. RMSNorm: |y - r| <= |gamma| (|xhat|
// (c/2 + 8) u + 2^-149), the absolute part for an xhat below 2^-126 (a
// subnormal, off by up to 2^-150, then scaled by gamma). Rows overflowing
// float statistics use the double path (4 u).
#include <tfk/tfk.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace tfk_test {
namespace {

struct RefOut {
  std::vector<double> y, tol;
};

RefOut RefLayerNorm(const float* x, size_t n, const float* g, const float* b, float eps) {
  double mean = 0, var = 0, s = 0;
  for (size_t k = 0; k < n; ++k) mean += x[k];
  mean /= n;
  for (size_t k = 0; k < n; ++k) var += (x[k] - mean) * (x[k] - mean);
  var /= n;
  for (size_t k = 0; k < n; ++k) s += std::fabs(static_cast<double>(x[k]) - x[0]);
  s /= n;
  const double sd = std::sqrt(var + eps), c = n / 16.0 + 8;
  RefOut out;
  for (size_t k = 0; k < n; ++k) {
    const double xhat = (x[k] - mean) / sd;
    const double gk = g ? g[k] : 1.0, bk = b ? b[k] : 0.0;
    out.y.push_back(xhat * gk + bk);
    out.tol.push_back((std::fabs(gk) * (std::fabs(xhat) * (c / 2 + 8) + c * s / sd + 2) +
                       std::fabs(bk)) * kEps);
  }
  return out;
}

RefOut RefRmsNorm(const float* x, size_t n, const float* g, float eps) {
  double sq = 0;
  for (size_t k = 0; k < n; ++k) sq += static_cast<double>(x[k]) * x[k];
  const double rs = std::sqrt(sq / n + eps), c = n / 16.0 + 8;
  RefOut out;
  for (size_t k = 0; k < n; ++k) {
    const double xhat = x[k] / rs, gk = g ? g[k] : 1.0;
    out.y.push_back(xhat * gk);
    const double rel = std::fabs(xhat) * (c / 2 + 8) * kEps;
    out.tol.push_back(std::fabs(gk) * (rel + std::ldexp(1.0, -149)) + 1e-44);
  }
  return out;
}

void ExpectRow(const RefOut& ref, const float* y, size_t n, const char* what) {
  for (size_t k = 0; k < n; ++k) {
    ASSERT_NEAR(y[k], ref.y[k], ref.tol[k]) << what << " n=" << n << " k=" << k;
  }
}

class NormTest : public IsaTest {};

TEST_P(NormTest, AwkwardSizesStridedWithAndWithoutAffine) {
  for (size_t cols : AwkwardSizes()) {
    const size_t rows = 3, ldx = cols + 1, ldy = cols + 2;
    Buffer x(rows * ldx, 1), y(rows * ldy, 2), g(cols, 3), b(cols);
    FillUniform(x.data(), rows * ldx, -4.0f, 6.0f, static_cast<uint32_t>(cols));
    FillUniform(g.data(), cols, 0.5f, 1.5f, 1);
    FillUniform(b.data(), cols, -1.0f, 1.0f, 2);
    for (int affine = 0; affine < 2; ++affine) {
      const float* gp = affine ? g.data() : nullptr;
      const float* bp = affine ? b.data() : nullptr;
      ASSERT_EQ(tfk_layernorm(rows, cols, x.data(), ldx, gp, bp, 1e-5f, y.data(), ldy), TFK_SUCCESS);
      for (size_t r = 0; r < rows; ++r) {
        ExpectRow(RefLayerNorm(x.data() + r * ldx, cols, gp, bp, 1e-5f), y.data() + r * ldy, cols,
                  "layernorm");
      }
      ASSERT_EQ(tfk_rmsnorm(rows, cols, x.data(), ldx, gp, 1e-6f, y.data(), ldy), TFK_SUCCESS);
      for (size_t r = 0; r < rows; ++r) {
        ExpectRow(RefRmsNorm(x.data() + r * ldx, cols, gp, 1e-6f), y.data() + r * ldy, cols,
                  "rmsnorm");
      }
      ASSERT_TRUE(y.GuardsIntact(rows, cols, ldy)) << cols;
    }
  }
}

TEST_P(NormTest, LargeOffsetPlusSmallNoise) {
  // 1e4 + noise of amplitude 1e-2: a float sum of the raw values would move
  // the mean by ~1e-3 per add, i.e. 10 % of the noise.
  for (size_t cols : {7, 64, 1000, 4096}) {
    Buffer x(cols), y(cols);
    FillUniform(x.data(), cols, -1e-2f, 1e-2f, 77);
    for (size_t k = 0; k < cols; ++k) x[k] += 1e4f;
    ASSERT_EQ(tfk_layernorm(1, cols, x.data(), cols, nullptr, nullptr, 0.0f, y.data(), cols),
              TFK_SUCCESS);
    ExpectRow(RefLayerNorm(x.data(), cols, nullptr, nullptr, 0.0f), y.data(), cols, "offset");
  }
}

TEST_P(NormTest, InPlaceMatchesOutOfPlace) {
  for (size_t cols : {1, 5, 16, 33, 4096}) {
    Buffer x(2 * cols), y(2 * cols), z(2 * cols);
    FillUniform(x.data(), 2 * cols, -3.0f, 3.0f, 4);
    std::copy(x.data(), x.data() + 2 * cols, z.data());
    tfk::layernorm(2, cols, x.data(), nullptr, nullptr, 1e-5f, y.data());
    tfk::layernorm(2, cols, z.data(), nullptr, nullptr, 1e-5f, z.data());
    EXPECT_TRUE(SameBits(y.data(), z.data(), 2 * cols));
    std::copy(x.data(), x.data() + 2 * cols, z.data());
    tfk::rmsnorm(2, cols, x.data(), nullptr, 1e-5f, y.data());
    tfk::rmsnorm(2, cols, z.data(), nullptr, 1e-5f, z.data());
    EXPECT_TRUE(SameBits(y.data(), z.data(), 2 * cols));
  }
}

TEST_P(NormTest, HugeTinyAndNonFinite) {
  const size_t cols = 37;
  Buffer x(4 * cols), y(4 * cols);
  FillUniform(x.data(), cols, -1e30f, 1e30f, 1);             // squares overflow float
  FillUniform(x.data() + cols, cols, -1e-30f, 1e-30f, 2);    // squares underflow
  FillUniform(x.data() + 2 * cols, 2 * cols, -1.0f, 1.0f, 3);
  x[2 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
  x[3 * cols + 9] = std::numeric_limits<float>::infinity();
  ASSERT_EQ(tfk_layernorm(4, cols, x.data(), cols, nullptr, nullptr, 0.0f, y.data(), cols),
            TFK_SUCCESS);
  ExpectRow(RefLayerNorm(x.data(), cols, nullptr, nullptr, 0.0f), y.data(), cols, "huge");
  ExpectRow(RefLayerNorm(x.data() + cols, cols, nullptr, nullptr, 0.0f), y.data() + cols, cols,
            "tiny");
  for (size_t k = 2 * cols; k < 4 * cols; ++k) EXPECT_TRUE(std::isnan(y[k])) << k;
  ASSERT_EQ(tfk_rmsnorm(4, cols, x.data(), cols, nullptr, 0.0f, y.data(), cols), TFK_SUCCESS);
  ExpectRow(RefRmsNorm(x.data(), cols, nullptr, 0.0f), y.data(), cols, "rms huge");
  ExpectRow(RefRmsNorm(x.data() + cols, cols, nullptr, 0.0f), y.data() + cols, cols, "rms tiny");
  for (size_t k = 2 * cols; k < 3 * cols; ++k) EXPECT_TRUE(std::isnan(y[k])) << k;  // NaN row
  // An inf makes mean(x^2) inf, so rstd = 0: NaN at the inf, 0 elsewhere.
  for (size_t k = 3 * cols; k < 4 * cols; ++k) {
    if (k == 3 * cols + 9) {
      EXPECT_TRUE(std::isnan(y[k]));
    } else {
      EXPECT_EQ(y[k], 0.0f) << k;
    }
  }
  // Rows whose statistic is subnormal in float but not 0 (squares of ~1e-21,
  // squared deviations of ~1e-22): numerics.md redoes a row in double once
  // the statistic + eps < 2^-100, not only once it underflows to 0.
  {
    Buffer r(64), o(64);
    FillUniform(r.data(), 64, -3e-21f, 3e-21f, 26);
    ASSERT_EQ(tfk_rmsnorm(1, 64, r.data(), 64, nullptr, 0.0f, o.data(), 64), TFK_SUCCESS);
    ExpectRow(RefRmsNorm(r.data(), 64, nullptr, 0.0f), o.data(), 64, "rms, squares subnormal");
    FillUniform(r.data(), 64, -3e-22f, 3e-22f, 28);
    ASSERT_EQ(tfk_layernorm(1, 64, r.data(), 64, nullptr, nullptr, 0.0f, o.data(), 64),
              TFK_SUCCESS);
    ExpectRow(RefLayerNorm(r.data(), 64, nullptr, nullptr, 0.0f), o.data(), 64,
              "layernorm, variance subnormal");
  }
  // The huge and tiny rows (redone in double) with gamma and beta.
  Buffer g(cols), b(cols);
  FillUniform(g.data(), cols, 0.5f, 1.5f, 4);
  FillUniform(b.data(), cols, -1.0f, 1.0f, 5);
  ASSERT_EQ(tfk_layernorm(2, cols, x.data(), cols, g.data(), b.data(), 0.0f, y.data(), cols),
            TFK_SUCCESS);
  ExpectRow(RefLayerNorm(x.data(), cols, g.data(), b.data(), 0.0f), y.data(), cols, "huge, affine");
  ExpectRow(RefLayerNorm(x.data() + cols, cols, g.data(), b.data(), 0.0f), y.data() + cols, cols,
            "tiny, affine");
  ASSERT_EQ(tfk_rmsnorm(2, cols, x.data(), cols, g.data(), 0.0f, y.data(), cols), TFK_SUCCESS);
  ExpectRow(RefRmsNorm(x.data(), cols, g.data(), 0.0f), y.data(), cols, "rms huge, gamma");
  ExpectRow(RefRmsNorm(x.data() + cols, cols, g.data(), 0.0f), y.data() + cols, cols,
            "rms tiny, gamma");
}

// eps near FLT_MAX: the statistic + eps passes FLT_MAX in float while the
// statistic itself does not (rstd would be 0, every output 0 or beta), so
// the row is redone in double.
TEST_P(NormTest, EpsNearFloatMax) {
  for (const std::vector<float>& row : {std::vector<float>{1.8e19f},
                                        std::vector<float>{1e19f, -1.2e19f}}) {
    const size_t cols = row.size();
    std::vector<float> y(cols);
    ASSERT_EQ(tfk_rmsnorm(1, cols, row.data(), cols, nullptr, 1e38f, y.data(), cols), TFK_SUCCESS);
    ExpectRow(RefRmsNorm(row.data(), cols, nullptr, 1e38f), y.data(), cols, "rms, eps 1e38");
    ASSERT_EQ(tfk_layernorm(1, cols, row.data(), cols, nullptr, nullptr, 3e38f, y.data(), cols),
              TFK_SUCCESS);
    ExpectRow(RefLayerNorm(row.data(), cols, nullptr, nullptr, 3e38f), y.data(), cols,
              "layernorm, eps 3e38");
  }
}

// gamma far from 1 where rstd is too: their product would leave float's
// normal range (past FLT_MAX, or subnormal) though every output is an
// ordinary float, so gamma multiplies the normalised value, never rstd.
// Rows of 4 and of 37 (vector and single-lane paths), eps = 0.
TEST_P(NormTest, ExtremeGammaWithExtremeRstd) {
  struct Case {
    float scale;  // of x: 1e-10 gives rstd ~1e10, 1e18 gives rstd ~1e-18
    float gamma;  // 1e30 * 1e10 overflows; 1e-25 * 1e-18 is subnormal
  };
  for (const Case& c : {Case{1e-10f, 1e30f}, Case{1e18f, -1e-25f}, Case{1e-12f, 3e28f}}) {
    for (size_t cols : {4, 37}) {
      std::vector<float> x(cols), g(cols), y(cols);
      FillUniform(x.data(), cols, -c.scale, c.scale, 40);
      x[1] = 0.0f;
      FillUniform(g.data(), cols, c.gamma, 2 * c.gamma, 41);
      ASSERT_EQ(tfk_layernorm(1, cols, x.data(), cols, g.data(), nullptr, 0.0f, y.data(), cols),
                TFK_SUCCESS);
      ExpectRow(RefLayerNorm(x.data(), cols, g.data(), nullptr, 0.0f), y.data(), cols,
                "layernorm, extreme gamma");
      ASSERT_EQ(tfk_rmsnorm(1, cols, x.data(), cols, g.data(), 0.0f, y.data(), cols), TFK_SUCCESS);
      ExpectRow(RefRmsNorm(x.data(), cols, g.data(), 0.0f), y.data(), cols,
                "rmsnorm, extreme gamma");
    }
  }
  // An element 2^126 times smaller than the row's spread, with a gamma
  // that brings it back to a normal output: its normalised value is a
  // subnormal (here 0), within the bounds' absolute |gamma| terms.
  for (const std::vector<float>& x : {std::vector<float>{1e19f, 1e-30f},
                                      std::vector<float>{1e19f, -1e19f, 1e-30f, 0.0f}}) {
    const size_t cols = x.size();
    std::vector<float> g(cols, 1.0f), y(cols);
    g[cols / 2] = 1e20f;
    ASSERT_EQ(tfk_rmsnorm(1, cols, x.data(), cols, g.data(), 0.0f, y.data(), cols), TFK_SUCCESS);
    ExpectRow(RefRmsNorm(x.data(), cols, g.data(), 0.0f), y.data(), cols, "rmsnorm, tiny xhat");
    ASSERT_EQ(tfk_layernorm(1, cols, x.data(), cols, g.data(), nullptr, 0.0f, y.data(), cols),
              TFK_SUCCESS);
    ExpectRow(RefLayerNorm(x.data(), cols, g.data(), nullptr, 0.0f), y.data(), cols,
              "layernorm, tiny xhat");
  }
}

TEST_P(NormTest, IdenticalBitsForAnyThreadCount) {
  const size_t rows = 600, cols = 1023;
  Buffer x(rows * cols), y1(rows * cols), y2(rows * cols), y7(rows * cols);
  FillUniform(x.data(), rows * cols, -2.0f, 3.0f, 8);
  WithThreads(1, [&] { tfk::layernorm(rows, cols, x.data(), nullptr, nullptr, 1e-5f, y1.data()); });
  WithThreads(2, [&] { tfk::layernorm(rows, cols, x.data(), nullptr, nullptr, 1e-5f, y2.data()); });
  WithThreads(7, [&] { tfk::layernorm(rows, cols, x.data(), nullptr, nullptr, 1e-5f, y7.data()); });
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), rows * cols));
  EXPECT_TRUE(SameBits(y1.data(), y7.data(), rows * cols));
  WithThreads(1, [&] { tfk::rmsnorm(rows, cols, x.data(), nullptr, 1e-5f, y1.data()); });
  WithThreads(2, [&] { tfk::rmsnorm(rows, cols, x.data(), nullptr, 1e-5f, y2.data()); });
  WithThreads(7, [&] { tfk::rmsnorm(rows, cols, x.data(), nullptr, 1e-5f, y7.data()); });
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), rows * cols));
  EXPECT_TRUE(SameBits(y1.data(), y7.data(), rows * cols));
}

// Rows whose output lies 1-127 bytes after the input (or gamma, beta)
// modulo 4 KiB take ordinary stores where others stream (StreamStalls in
// lib/elementwise-inl.h; norm_test.streaming streams every output): the
// bits must not depend on it. Rows 1003 floats apart move the offset.
TEST_P(NormTest, SameBitsWhateverTheOutputOffsetModulo4KiB) {
  const size_t rows = 5, cols = 1003, n = rows * cols;
  Buffer mem(n + 1024 * (n / 1024 + 1) + n + 64), ref(n), g(cols), b(cols);
  float* x = mem.data();
  FillUniform(x, n, -2.0f, 3.0f, 9);
  FillUniform(g.data(), cols, 0.5f, 1.5f, 10);
  FillUniform(b.data(), cols, -1.0f, 1.0f, 11);
  tfk::layernorm(rows, cols, x, g.data(), b.data(), 1e-5f, ref.data());
  for (size_t delta : {0, 1, 4, 12, 16, 31, 32, 64, 1000}) {  // floats past a 4 KiB multiple
    float* y = x + 1024 * (n / 1024 + 1) + delta;
    tfk::layernorm(rows, cols, x, g.data(), b.data(), 1e-5f, y);
    EXPECT_TRUE(SameBits(y, ref.data(), n)) << "delta " << delta;
  }
  tfk::rmsnorm(rows, cols, x, g.data(), 1e-5f, ref.data());
  for (size_t delta : {0, 4, 16, 31}) {
    float* y = x + 1024 * (n / 1024 + 1) + delta;
    tfk::rmsnorm(rows, cols, x, g.data(), 1e-5f, y);
    EXPECT_TRUE(SameBits(y, ref.data(), n)) << "rms delta " << delta;
  }
  EXPECT_TRUE(mem.GuardsIntact());
}

TFK_INSTANTIATE_FOR_EACH_ISA(NormTest);

}  // namespace
}  // namespace tfk_test
