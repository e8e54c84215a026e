// tfk_softmax against a double-precision reference on every supported ISA.
//
// Error bound, per element (u = 2^-24): with a_i = scale*x_i - max computed by
// one FMA (|error| <= |a_i| u; without FMA, as on SSE4, scale*x_i is rounded
// first: + |scale x_i| u) and the exponential good to 3 u plus 0.05 |a_i| u
// (with FMA it reduces by ln2 rounded to float: lib/exp-inl.h; SSE4's
// two-step reduction is exact, the term slack there), each has
// relative error <= (1.05 |a_i| + |scale x_i| + 3) u. The float sum of n
// positive terms over 2 accumulators of >= 4 lanes has chains of <= n/8 + 3
// additions, so relative error <= (n/8 + 3) u plus the weighted mean w of
// the terms' errors (w = sum e_i (1.05 |a_i| + |scale x_i|) / sum e_i, from
// the reference). Normalising by 1/sum adds 2u. Hence
// |y_i - r_i| <= r_i (1.05 |a_i| + |scale x_i| + w + chain + 7) u, plus 2^-126:
// exponentials below 2^-126 are flushed to 0.
#include <tfk/tfk.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace tfk_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Reference softmax of one row (n_valid leading entries, the rest masked).
// Also returns the per-element bound.
void RefRow(const float* x, size_t cols, size_t n_valid, float scale, std::vector<double>& y,
            std::vector<double>& tol) {
  y.assign(cols, 0.0);
  tol.assign(cols, 0.0);
  double m = -INFINITY;
  bool nan = false;
  for (size_t j = 0; j < n_valid; ++j) {
    const double v = static_cast<double>(scale) * x[j];
    if (std::isnan(v) || v == INFINITY) nan = true;
    m = std::max(m, v);
  }
  if (nan) {
    for (size_t j = 0; j < n_valid; ++j) y[j] = NAN;
    return;
  }
  if (n_valid == 0 || m == -INFINITY) return;
  double sum = 0.0, weighted = 0.0;
  for (size_t j = 0; j < n_valid; ++j) {
    const double a = static_cast<double>(scale) * x[j] - m;
    y[j] = std::exp(a);
    sum += y[j];
    if (y[j] > 0) weighted += y[j] * (1.05 * std::fabs(a) + std::fabs(scale * x[j]));
  }
  const double w = weighted / sum;
  for (size_t j = 0; j < n_valid; ++j) {
    const double a = static_cast<double>(scale) * x[j] - m;
    y[j] /= sum;
    const double sx = std::fabs(static_cast<double>(scale) * x[j]);
    const double chain = std::max(n_valid / 8.0 + 3, std::min<double>(n_valid, 16) / 2);
    const double rel = (std::isinf(a) ? 0.0 : 1.05 * std::fabs(a) + sx) + w + chain + 7.0;
    tol[j] = y[j] * rel * kEps + std::ldexp(1.0, -126);
  }
}

// Checks y against the reference row by row; masked entries must be exactly 0.
void ExpectSoftmax(const float* x, size_t ldx, const float* y, size_t ldy, size_t rows,
                   size_t cols, float scale, tfk_mask mask, size_t q_len) {
  std::vector<double> ref, tol;
  for (size_t r = 0; r < rows; ++r) {
    size_t n_valid = cols;
    if (mask == TFK_MASK_CAUSAL) {
      const size_t i = r % q_len;
      n_valid = cols + i + 1 <= q_len ? 0 : std::min(cols, cols + i + 1 - q_len);
    }
    RefRow(x + r * ldx, cols, n_valid, scale, ref, tol);
    for (size_t j = 0; j < cols; ++j) {
      const float got = y[r * ldy + j];
      if (std::isnan(ref[j])) {
        ASSERT_TRUE(std::isnan(got)) << "row " << r << " col " << j;
      } else {
        ASSERT_NEAR(got, ref[j], tol[j]) << "row " << r << " col " << j << " cols " << cols;
      }
    }
  }
}

class SoftmaxTest : public IsaTest {};

TEST_P(SoftmaxTest, AwkwardSizesMisalignedStrided) {
  for (size_t cols : AwkwardSizes()) {
    for (size_t misalign : {0, 1, 3}) {
      const size_t rows = 3, ldx = cols + misalign, ldy = cols + 2;
      Buffer x(rows * ldx, misalign), y(rows * ldy, (misalign + 1) % 4);
      FillUniform(x.data(), rows * ldx, -10.0f, 10.0f, static_cast<uint32_t>(cols));
      for (float scale : {1.0f, 0.125f, -3.0f}) {
        ASSERT_EQ(tfk_softmax(rows, cols, x.data(), ldx, y.data(), ldy, scale, TFK_MASK_NONE, 0),
                  TFK_SUCCESS);
        ExpectSoftmax(x.data(), ldx, y.data(), ldy, rows, cols, scale, TFK_MASK_NONE, 0);
        ASSERT_TRUE(y.GuardsIntact(rows, cols, ldy)) << cols;
      }
    }
  }
}

TEST_P(SoftmaxTest, InPlace) {
  for (size_t cols : AwkwardSizes()) {
    const size_t rows = 2;
    Buffer x(rows * cols), y(rows * cols);
    FillUniform(x.data(), rows * cols, -5.0f, 5.0f, 7);
    std::copy(x.data(), x.data() + rows * cols, y.data());
    ASSERT_EQ(tfk_softmax(rows, cols, y.data(), cols, y.data(), cols, 0.5f, TFK_MASK_NONE, 0),
              TFK_SUCCESS);
    ExpectSoftmax(x.data(), cols, y.data(), cols, rows, cols, 0.5f, TFK_MASK_NONE, 0);
  }
}

TEST_P(SoftmaxTest, HugeMagnitudesAndDenormals) {
  for (size_t cols : {1, 5, 16, 33, 1000}) {
    Buffer x(2 * cols), y(2 * cols);
    FillUniform(x.data(), cols, -1e30f, 1e30f, 3);
    FillUniform(x.data() + cols, cols, -1e-38f, 1e-38f, 4);  // includes denormals
    ASSERT_EQ(tfk_softmax(2, cols, x.data(), cols, y.data(), cols, 1.0f, TFK_MASK_NONE, 0),
              TFK_SUCCESS);
    ExpectSoftmax(x.data(), cols, y.data(), cols, 2, cols, 1.0f, TFK_MASK_NONE, 0);
    // Row 0's values lie ~1e27 or more apart, so it is one-hot in float: the
    // bound above, |scale x| u at the maximum, allows far more than that.
    const size_t top = static_cast<size_t>(std::max_element(x.data(), x.data() + cols) - x.data());
    for (size_t j = 0; j < cols; ++j) ASSERT_EQ(y[j], j == top ? 1.0f : 0.0f) << cols << " " << j;
    double sum = 0;  // row 1: the denormals' row, near uniform
    for (size_t j = 0; j < cols; ++j) sum += y[cols + j];
    ASSERT_NEAR(sum, 1.0, (cols + 8) * kEps) << cols;
  }
}

// scale * max(x) of 2^24 and more in magnitude: the FMA argument
// scale x - fl(scale x_max) had been up to ulp/2 above 0 at the extreme, past
// the exponential's range from 2^31 (1.1 * 1e10: NaN). Short rows (paired),
// long ones (streamed in the streaming run), several rows (the next row's
// extreme found by the row before), scales of both signs.
TEST_P(SoftmaxTest, LargeScaledValues) {
  for (size_t cols : {1, 2, 5, 16, 33, 100, 1000, 5000}) {
    const size_t rows = 4;
    Buffer x(rows * cols), y(rows * cols);
    FillUniform(x.data(), rows * cols, -20.0f, 20.0f, static_cast<uint32_t>(cols));
    for (float scale : {1e10f, -3e9f, 3e6f, 7e4f}) {
      ASSERT_EQ(tfk_softmax(rows, cols, x.data(), cols, y.data(), cols, scale, TFK_MASK_NONE, 0),
                TFK_SUCCESS);
      ExpectSoftmax(x.data(), cols, y.data(), cols, rows, cols, scale, TFK_MASK_NONE, 0);
      for (size_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (size_t j = 0; j < cols; ++j) sum += y.data()[r * cols + j];
        ASSERT_NEAR(sum, 1.0, (cols + 8) * kEps) << "cols " << cols << " scale " << scale;
      }
    }
  }
  const float pair[2] = {1.1f, 1.0f};
  float out[2];
  ASSERT_EQ(tfk_softmax(1, 2, pair, 2, out, 2, 1e10f, TFK_MASK_NONE, 0), TFK_SUCCESS);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
}

TEST_P(SoftmaxTest, InfinityAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // 1100: rows of 4 KiB or more, whose pass 1 a streamed call fuses into
  // the row before (lib/softmax.cc, NextRow); 16411: read as several
  // streams (kNextStreams).
  for (size_t cols : {1, 2, 7, 16, 17, 100, 1100, 16411}) {
    const size_t rows = 7;
    Buffer x(rows * cols), y(rows * cols);
    FillUniform(x.data(), rows * cols, -3.0f, 3.0f, 11);
    for (size_t j = 0; j < cols; j += 3) x[0 * cols + j] = -kInf;  // some -inf
    for (size_t j = 0; j < cols; ++j) x[1 * cols + j] = -kInf;     // all -inf
    x[2 * cols + cols / 2] = nan;
    x[3 * cols + cols - 1] = kInf;
    // NaN among -inf only, first and last: x86 max drops a NaN operand, so
    // the row's max is -inf, yet the row must still come out NaN.
    for (size_t j = 0; j < cols; ++j) x[5 * cols + j] = x[6 * cols + j] = -kInf;
    x[5 * cols] = nan;
    x[6 * cols + cols - 1] = nan;
    // A NaN with its sign set: it would reach the output through the sum.
    x[4 * cols + cols / 2] = std::copysign(nan, -1.0f);
    ASSERT_EQ(tfk_softmax(rows, cols, x.data(), cols, y.data(), cols, 1.0f, TFK_MASK_NONE, 0),
              TFK_SUCCESS);
    ExpectSoftmax(x.data(), cols, y.data(), cols, rows, cols, 1.0f, TFK_MASK_NONE, 0);
    for (size_t j = 0; j < cols; ++j) {
      EXPECT_EQ(y[cols + j], 0.0f);               // all masked: zeros
      EXPECT_TRUE(std::isnan(y[2 * cols + j]));   // NaN row
      EXPECT_TRUE(std::isnan(y[3 * cols + j]));   // +inf row
      EXPECT_TRUE(std::isnan(y[5 * cols + j]));   // NaN among -inf
      EXPECT_TRUE(std::isnan(y[6 * cols + j]));
      if (j % 3 == 0) EXPECT_EQ(y[j], 0.0f);      // -inf entries
      // Whichever NaN came in, and whatever order max met it in (it
      // differs with the rows' split over tasks): NAN, the positive quiet NaN.
      for (size_t r : {2, 3, 4, 5, 6}) {
        EXPECT_TRUE(SameBits(&y[r * cols + j], &nan, 1)) << "row " << r << " col " << j;
      }
    }
  }
}

TEST_P(SoftmaxTest, CausalMask) {
  // q_len <= kv_len, q_len == kv_len and q_len > kv_len (leading rows see
  // nothing and are zero); {8, 1030}: rows of 1023-1030 valid columns, so a
  // streamed call fuses pass 1 into the row before for some rows and not
  // for others (lib/softmax.cc, NextRow); {8, 16390}: rows of 16383-16390,
  // the next row read as one stream or several (kNextStreamsMinCols).
  const size_t shapes[][2] = {{1, 1},  {5, 9},     {8, 8},   {17, 33},
                              {12, 7}, {64, 100}, {8, 1030}, {8, 16390}};
  for (const auto& s : shapes) {
    const size_t q_len = s[0], cols = s[1], rows = 3 * q_len;
    Buffer x(rows * cols), y(rows * cols);
    FillUniform(x.data(), rows * cols, -8.0f, 8.0f, 5);
    ASSERT_EQ(tfk_softmax(rows, cols, x.data(), cols, y.data(), cols, 0.7f, TFK_MASK_CAUSAL,
                          q_len),
              TFK_SUCCESS);
    ExpectSoftmax(x.data(), cols, y.data(), cols, rows, cols, 0.7f, TFK_MASK_CAUSAL, q_len);
  }
}

// What the causal mask hides is never read into a result: masked entries of
// +inf, NaN or 1e30 give the bits of finite ones, on one thread (where a
// streamed call finds the next row's maximum while it writes this row) and
// on two.
TEST_P(SoftmaxTest, CausalMaskIgnoresWhatItMasks) {
  const size_t shapes[][2] = {{5, 9}, {4, 1100}, {8, 1030}, {3, 16390}};
  for (const auto& s : shapes) {
    const size_t q_len = s[0], cols = s[1], rows = 2 * q_len;
    Buffer x(rows * cols), x2(rows * cols), y(rows * cols), y2(rows * cols);
    FillUniform(x.data(), rows * cols, -5.0f, 5.0f, 27);
    std::copy(x.data(), x.data() + rows * cols, x2.data());
    const float hidden[3] = {INFINITY, NAN, 1e30f};
    for (size_t i = 0; i < rows; ++i) {
      const size_t valid = cols - q_len + 1 + i % q_len;  // row i sees j < valid
      for (size_t j = valid; j < cols; ++j) x2[i * cols + j] = hidden[(i + j) % 3];
    }
    for (int threads : {1, 2}) {
      WithThreads(threads, [&] {
        tfk::softmax(rows, cols, x.data(), y.data(), 0.7f, TFK_MASK_CAUSAL, q_len);
        tfk::softmax(rows, cols, x2.data(), y2.data(), 0.7f, TFK_MASK_CAUSAL, q_len);
      });
      EXPECT_TRUE(SameBits(y.data(), y2.data(), rows * cols))
          << "q_len " << q_len << " cols " << cols << " threads " << threads;
    }
  }
}

TEST_P(SoftmaxTest, RowsSumToOneAndIgnoreAddedConstant) {
  const size_t rows = 4;
  for (size_t cols : {3, 64, 1021, 4096}) {
    Buffer x(rows * cols), x2(rows * cols), y(rows * cols), y2(rows * cols);
    FillUniform(x.data(), rows * cols, -20.0f, 20.0f, 9);
    // Multiples of 2^-10 in [-20, 20]: x + 37 is exact, so softmax(x + 37)
    // must meet the bound of the exact softmax(x).
    for (size_t i = 0; i < rows * cols; ++i) {
      x[i] = std::round(x[i] * 1024.0f) / 1024.0f;
      x2[i] = x[i] + 37.0f;
    }
    tfk::softmax(rows, cols, x.data(), y.data());
    tfk::softmax(rows, cols, x2.data(), y2.data());
    ExpectSoftmax(x.data(), cols, y2.data(), cols, rows, cols, 1.0f, TFK_MASK_NONE, 0);
    for (size_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (size_t j = 0; j < cols; ++j) sum += y[r * cols + j];
      // Each y_i is within r_i (|a_i| + |x_i| + w + n/8 + 9) u with |a_i| <= 40,
      // |x_i| <= 20, w <= 60 here, and the r_i sum to 1.
      EXPECT_NEAR(sum, 1.0, (129 + cols / 8.0) * kEps) << cols;
    }
  }
}

// A streamed call reads each half of a long next row as several streams,
// in another order (lib/softmax.cc, kNextStreams): the row's maximum,
// planted at the first or last vector of a segment, in the whole vectors
// after the segments, on either side of the halfway point or in the last,
// partial vector, must be found there, which gives the bits of the row
// computed alone (finding its own maximum). Positions for the active ISA's
// N lanes. Two rows on one thread: the first is piped where that applies.
TEST_P(SoftmaxTest, NextRowMaximumFoundAnywhere) {
  const size_t N = ActiveLanes();
  for (size_t cols : {2053, 4099, 16384, 16411, 16447}) {
    const size_t half = cols / 2 / N * N;
    const size_t seg0 = half / N / 4 * N, seg1 = (cols - half) / N / 4 * N;  // floats a segment
    std::vector<size_t> at = {4 * seg0, half - 1, half, half + 4 * seg1, cols - N - 1, cols - 1};
    for (size_t k = 0; k < 4; ++k) {
      for (size_t p : {k * seg0, (k + 1) * seg0 - 1, half + k * seg1, half + (k + 1) * seg1 - 1}) {
        at.push_back(p);
      }
    }
    // Piped (SoftmaxPiped, unmasked): the whole row's whole vectors as four
    // segments.
    const size_t seg = cols / N / 4 * N;
    for (size_t k = 0; k <= 4; ++k) at.push_back(k * seg);
    for (size_t k = 1; k <= 4; ++k) at.push_back(k * seg - 1);
    at.push_back(cols / N * N - 1);
    Buffer x(2 * cols), y(2 * cols), alone(cols);
    FillUniform(x.data(), 2 * cols, -3.0f, 3.0f, 17);
    for (size_t p : at) {
      const float kept = x[cols + p];
      x[cols + p] = 10.0f;
      WithThreads(1, [&] {
        tfk::softmax(2, cols, x.data(), y.data());
        tfk::softmax(1, cols, x.data() + cols, alone.data());
      });
      ASSERT_TRUE(SameBits(y.data() + cols, alone.data(), cols)) << cols << " at " << p;
      x[cols + p] = kept;
    }
  }
}

// Unmasked rows too long to pipe (six of them would not fit in this CPU's
// L2: lib/softmax.cc, kPipeRowsInL2) still fuse the next row's pass 1;
// 131072 floats pass any L2 of up to 3 MiB. Against the reference and
// one-row calls.
TEST_P(SoftmaxTest, LongRowsNotPiped) {
  const size_t rows = 3, cols = 131072 + 5;
  Buffer x(rows * cols), y(rows * cols, 1), one(cols);
  FillUniform(x.data(), rows * cols, -10.0f, 10.0f, 23);
  WithThreads(1, [&] { tfk::softmax(rows, cols, x.data(), y.data(), 0.8f); });
  ExpectSoftmax(x.data(), cols, y.data(), cols, rows, cols, 0.8f, TFK_MASK_NONE, 0);
  for (size_t r = 0; r < rows; ++r) {
    tfk::softmax(1, cols, x.data() + r * cols, one.data(), 0.8f);
    ASSERT_TRUE(SameBits(y.data() + r * cols, one.data(), cols)) << "row " << r;
  }
}

// Long unmasked rows of a streamed call are piped (lib/softmax.cc,
// SoftmaxPiped): each row's normalisation is done during the next row's
// exponentials, a line of y at a time, and the last row of a task's range
// alone. Against the reference with y misaligned (elements before its
// first whole line and after its last) and strided, x strided, in place,
// and rows of -inf, NaN and +inf between piped rows. One thread: a task's
// range is cut into chunks of work, which on two threads would be a row
// each here.
void PipedStreamedRowsBody() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // One stream of the next row, or (4099 and up) several.
  for (size_t cols : {1031, 4099, 16411, 20003}) {
    for (size_t misalign : {0, 1, 3}) {
      const size_t rows = 6, ldx = cols + misalign, ldy = cols + 2;
      Buffer x(rows * ldx, misalign), y(rows * ldy, (misalign + 1) % 4);
      FillUniform(x.data(), rows * ldx, -10.0f, 10.0f, static_cast<uint32_t>(cols + misalign));
      if (misalign == 1) {
        for (size_t j = 0; j < cols; ++j) x[1 * ldx + j] = -kInf;
        x[2 * ldx + 5] = nan;
        x[4 * ldx + cols - 1] = kInf;
      }
      for (float scale : {1.0f, -3.0f}) {
        ASSERT_EQ(tfk_softmax(rows, cols, x.data(), ldx, y.data(), ldy, scale, TFK_MASK_NONE, 0),
                  TFK_SUCCESS);
        ExpectSoftmax(x.data(), ldx, y.data(), ldy, rows, cols, scale, TFK_MASK_NONE, 0);
        ASSERT_TRUE(y.GuardsIntact(rows, cols, ldy)) << cols;
        // The bits of each row computed alone (a one-row call, never piped).
        Buffer one(cols, (misalign + 2) % 4);
        for (size_t r = 0; r < rows; ++r) {
          ASSERT_EQ(tfk_softmax(1, cols, x.data() + r * ldx, ldx, one.data(), cols, scale,
                                TFK_MASK_NONE, 0),
                    TFK_SUCCESS);
          ASSERT_TRUE(SameBits(y.data() + r * ldy, one.data(), cols)) << cols << " row " << r;
        }
      }
    }
    const size_t rows = 5;
    Buffer x(rows * cols), y(rows * cols, 1);
    FillUniform(x.data(), rows * cols, -10.0f, 10.0f, 3);
    std::copy(x.data(), x.data() + rows * cols, y.data());
    ASSERT_EQ(tfk_softmax(rows, cols, y.data(), cols, y.data(), cols, 0.5f, TFK_MASK_NONE, 0),
              TFK_SUCCESS);
    ExpectSoftmax(x.data(), cols, y.data(), cols, rows, cols, 0.5f, TFK_MASK_NONE, 0);
    // Causal (not piped: rows of cols - 3 .. cols valid columns, the rest
    // zero), from the same call path.
    Buffer xc(2 * 4 * cols), yc(2 * 4 * cols, 2);
    FillUniform(xc.data(), 2 * 4 * cols, -10.0f, 10.0f, 4);
    ASSERT_EQ(tfk_softmax(2 * 4, cols, xc.data(), cols, yc.data(), cols, 0.7f, TFK_MASK_CAUSAL, 4),
              TFK_SUCCESS);
    ExpectSoftmax(xc.data(), cols, yc.data(), cols, 2 * 4, cols, 0.7f, TFK_MASK_CAUSAL, 4);
    ASSERT_TRUE(yc.GuardsIntact()) << cols;
  }
}

TEST_P(SoftmaxTest, PipedStreamedRows) {
  WithThreads(1, [] { PipedStreamedRowsBody(); });
}

TEST_P(SoftmaxTest, IdenticalBitsForAnyThreadCount) {
  // [64, 1100]: rows of 4 KiB or more, whose pass 1 a streamed call fuses
  // into the row before (lib/softmax.cc, NextRow), which rows begin a task
  // depending on the thread count; [32, 16411] too, the next row read as
  // several streams; unmasked (q_len 0), both piped (SoftmaxPiped); with
  // NaN, +inf and -inf rows.
  // rows, cols, q_len
  const size_t shapes[][3] = {{512, 517, 64}, {64, 1100, 16}, {64, 1100, 0},
                              {32, 16411, 8}, {32, 16411, 0}};
  for (const auto& shape : shapes) {
    const size_t rows = shape[0], cols = shape[1], q_len = shape[2];
    Buffer x(rows * cols), y1(rows * cols), y2(rows * cols), y7(rows * cols);
    FillUniform(x.data(), rows * cols, -6.0f, 6.0f, 21);
    x[5 * cols + 3] = std::numeric_limits<float>::quiet_NaN();
    x[9 * cols + 1] = -std::numeric_limits<float>::quiet_NaN();
    x[11 * cols + 2] = kInf;
    for (size_t j = 0; j < cols; ++j) x[20 * cols + j] = -kInf;
    const auto run = [&](int threads, float* y) {
      WithThreads(threads, [&] {
        tfk::softmax(rows, cols, x.data(), y, 0.3f,
                     q_len != 0 ? TFK_MASK_CAUSAL : TFK_MASK_NONE, q_len);
      });
    };
    run(1, y1.data());
    run(2, y2.data());
    run(7, y7.data());
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), rows * cols)) << cols;
    EXPECT_TRUE(SameBits(y1.data(), y7.data(), rows * cols)) << cols;
  }
}

// Rows of equal length are computed two at a time (SoftmaxPair); each must
// get the bits it gets alone (a one-row call), whichever row it is paired
// with, including next to a row that falls back (all -inf, +inf, NaN).
TEST_P(SoftmaxTest, PairedRowsGetTheBitsOfSingleRows) {
  for (size_t cols : {8, 16, 31, 32, 33, 47, 64, 100, 517, 2048}) {
    for (size_t rows : {2, 3, 7}) {
      Buffer x(rows * cols), y(rows * cols), one(cols);
      FillUniform(x.data(), rows * cols, -30.0f, 30.0f, 5 + cols);
      if (rows == 7) {
        for (size_t j = 0; j < cols; ++j) x[1 * cols + j] = -INFINITY;
        x[3 * cols + cols / 2] = INFINITY;
        // Negative NaNs, whose bits differ from NAN's: each row of the pair
        // (4, 5) must give the NaN row that it gives alone.
        x[4 * cols + cols - 1] = -NAN;
        x[5 * cols] = -NAN;
      }
      for (float scale : {0.7f, -1.3f}) {
        tfk::softmax(rows, cols, x.data(), y.data(), scale);
        for (size_t r = 0; r < rows; ++r) {
          tfk::softmax(1, cols, x.data() + r * cols, one.data(), scale);
          EXPECT_TRUE(SameBits(y.data() + r * cols, one.data(), cols))
              << "cols " << cols << " rows " << rows << " row " << r << " scale " << scale;
        }
      }
    }
  }
}

TFK_INSTANTIATE_FOR_EACH_ISA(SoftmaxTest);

}  // namespace
}  // namespace tfk_test
