// tfk_matmul and tfk_linear against a double-precision reference on every
// supported ISA.
//
// Bound (u = 2^-24). Each C element is a sequential chain over k of FMAs
// (one rounding each: |S - S_exact| <= K u (|A||B|)_ij on the AVX targets)
// or, without FMA (SSE4), multiply + add (two: 2 K u). BitsOfOneChain checks
// that chain itself bit for bit. The epilogue's alpha * S, + beta C,
// + bias and + R each round once: + u (|alpha S| + |beta C| + |bias|) per step,
// bounded by 4 u of the sum of their magnitudes. Activations add their own
// bound (tests/activation_test.cc) on the pre-activation value.
// With small-integer inputs every partial sum is an integer below 2^24, so
// the result is exact and compared with ==.
#include <tfk/tfk.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <vector>

#include "test_util.h"

namespace tfk_test {
namespace {

struct Mat {
  size_t rows, cols, ld;
  Buffer buf;
  Mat(size_t r, size_t c, size_t pad = 0, size_t misalign = 0)
      : rows(r), cols(c), ld(c + pad), buf(r * (c + pad), misalign) {}
  float* data() { return buf.data(); }
  float& at(size_t i, size_t j) { return buf[i * ld + j]; }
  float at(size_t i, size_t j) const { return buf[i * ld + j]; }
};

// B element (k, n) for either layout.
float BAt(const Mat& B, tfk_layout layout, size_t k, size_t n) {
  return layout == TFK_LAYOUT_KN ? B.at(k, n) : B.at(n, k);
}

double Act(tfk_activation act, double v) {
  switch (act) {
    case TFK_ACT_RELU: return v < 0 ? 0.0 : v;
    case TFK_ACT_GELU_ERF: return v * 0.5 * std::erfc(-v / std::sqrt(2.0));
    case TFK_ACT_GELU_TANH: {
      const double u2 = 2 * std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
      return v / (1 + std::exp(-u2));
    }
    case TFK_ACT_SILU: return v / (1 + std::exp(-v));
    default: return v;
  }
}

struct Case {
  size_t M, N, K;
};

std::vector<Case> Shapes() {
  std::vector<Case> cases;
  // Around the row tiles: 3 (AVX2), 14 (AVX-512) and their multiples.
  for (size_t M : {1, 2, 3, 4, 7, 12, 13, 14, 15, 25, 28, 29}) {
    for (size_t N : {1, 5, 31, 32, 33, 65}) {
      for (size_t K : {1, 2, 17, 64}) cases.push_back({M, N, K});
    }
  }
  // Every remainder of a 14-row tile (1 .. 2 x 14 + 1 rows), at the k-block
  // size of a 32 KiB L1d (kc = 512, lib/matmul.cc) and one past it.
  for (size_t M = 1; M <= 29; ++M) {
    for (size_t K : {512, 513}) cases.push_back({M, 33, K});
  }
  // k-blocking (K > kc), M chunks (M > mc), many panels, primes.
  cases.push_back({3, 40, 1000});
  cases.push_back({97, 67, 521});
  cases.push_back({509, 35, 13});
  cases.push_back({1, 4096, 64});
  cases.push_back({8, 100, 4096});
  // M = 1 with [K, N] B: whole panels read in place (N = 256), and past the
  // K up to which a partial last panel is packed whole (k-blocked instead).
  cases.push_back({1, 256, 9000});
  cases.push_back({1, 45, 8200});
  return cases;
}

// Checks C against alpha * A op(B) + beta * C0 with the derived bound.
void ExpectGemm(const Mat& A, const Mat& B, tfk_layout layout, const Mat& C0, const Mat& C,
                float alpha, float beta, size_t K) {
  const double roundings = ActiveIsaHasFma() ? 1 : 2;  // per k step
  for (size_t i = 0; i < C.rows; ++i) {
    for (size_t j = 0; j < C.cols; ++j) {
      double s = 0, mag = 0;
      for (size_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(A.at(i, k)) * BAt(B, layout, k, j);
        s += p;
        mag += std::fabs(p);
      }
      const double ref = alpha * s + (beta != 0 ? beta * C0.at(i, j) : 0.0);
      const double tol =
          (roundings * K * std::fabs(alpha) * mag +
           4 * (std::fabs(alpha * s) + std::fabs(beta * C0.at(i, j)))) *
              kEps + 1e-37;
      ASSERT_NEAR(C.at(i, j), ref, tol) << "i=" << i << " j=" << j << " K=" << K;
    }
  }
}

class MatmulTest : public IsaTest {};

TEST_P(MatmulTest, ShapesLayoutsStridesAlphaBeta) {
  uint32_t seed = 1;
  for (const Case& c : Shapes()) {
    for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
      const bool kn = layout == TFK_LAYOUT_KN;
      Mat A(c.M, c.K, 3, 1), B(kn ? c.K : c.N, kn ? c.N : c.K, 1, 2), C(c.M, c.N, 2, 3),
          C0(c.M, c.N, 2, 3);
      FillUniform(A.data(), c.M * A.ld, -1, 1, seed++);
      FillUniform(B.data(), B.rows * B.ld, -1, 1, seed++);
      FillUniform(C0.data(), c.M * C0.ld, -1, 1, seed++);
      // beta = 0 with alpha 1 and with another alpha (a separate store path).
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {-1.5f, 0.0f}, {-1.5f, 0.5f}}) {
        std::copy(C0.data(), C0.data() + c.M * C0.ld, C.data());
        ASSERT_EQ(tfk_matmul(c.M, c.N, c.K, alpha, A.data(), A.ld, B.data(), B.ld, layout, beta,
                             C.data(), C.ld),
                  TFK_SUCCESS)
            << tfk_last_error();
        ExpectGemm(A, B, layout, C0, C, alpha, beta, c.K);
        ASSERT_TRUE(C.buf.GuardsIntact()) << c.M << "x" << c.N << "x" << c.K;
        for (size_t i = 0; i < c.M; ++i) {  // padding columns untouched
          for (size_t j = c.N; j < C.ld; ++j) ASSERT_EQ(C.at(i, j), C0.at(i, j));
        }
      }
    }
  }
}

// tfk.h's "one sequential FMA chain over k" bit for bit: a scalar chain in k
// order (fmaf on the FMA targets; elsewhere the product rounded, then the
// add), then the epilogue of docs/matmul.md (alpha S rounded, then beta C_old
// added by the same kind of step). Shapes across the k-blocks (kc = 512), M
// chunks, partial tiles and the M = 1 paths, where a reordered or
// re-associated sum, or a partial sum parked at lower precision between
// k-blocks, changes bits that the error bound above would let pass.
float ChainRef(const Mat& A, const Mat& B, tfk_layout layout, size_t i, size_t j, size_t K,
               float alpha, float beta, float c_old, bool fma) {
  float s = 0.0f;
  for (size_t k = 0; k < K; ++k) {
    const float a = A.at(i, k), b = BAt(B, layout, k, j);
    if (fma) {
      s = std::fma(a, b, s);
    } else {
      const volatile float p = a * b;  // rounded on its own, never contracted
      s = s + p;
    }
  }
  const volatile float v = alpha * s;
  if (beta == 0.0f) return v;
  if (fma) return std::fma(beta, c_old, v);
  const volatile float bc = beta * c_old;
  return bc + v;
}

TEST_P(MatmulTest, BitsOfOneChain) {
  const std::string isa = tfk::active_isa();
  const bool fma = ActiveIsaHasFma();
  if (!fma && isa != "SSE4" && isa != "SSSE3") GTEST_SKIP() << "no chain model for " << isa;
  uint32_t seed = 50;
  for (const Case& c : {Case{1, 45, 8200}, Case{1, 256, 9000}, Case{3, 40, 1000}, Case{8, 100, 4096},
                        Case{29, 33, 513}, Case{97, 67, 521}, Case{13, 70, 64}, Case{300, 50, 1100}}) {
    for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
      const bool kn = layout == TFK_LAYOUT_KN;
      Mat A(c.M, c.K, 1), B(kn ? c.K : c.N, kn ? c.N : c.K, 3), C(c.M, c.N, 2), C0(c.M, c.N, 2);
      FillUniform(A.data(), c.M * A.ld, -1, 1, seed++);
      FillUniform(B.data(), B.rows * B.ld, -1, 1, seed++);
      FillUniform(C0.data(), c.M * C0.ld, -1, 1, seed++);
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {-1.3f, 0.0f}, {-1.3f, 0.75f}}) {
        std::copy(C0.data(), C0.data() + c.M * C0.ld, C.data());
        ASSERT_EQ(tfk_matmul(c.M, c.N, c.K, alpha, A.data(), A.ld, B.data(), B.ld, layout, beta,
                             C.data(), C.ld),
                  TFK_SUCCESS)
            << tfk_last_error();
        for (size_t i = 0; i < c.M; ++i) {
          for (size_t j = 0; j < c.N; ++j) {
            const float ref = ChainRef(A, B, layout, i, j, c.K, alpha, beta, C0.at(i, j), fma);
            ASSERT_TRUE(SameBits(&C.at(i, j), &ref, 1))
                << C.at(i, j) << " vs " << ref << " at i=" << i << " j=" << j << " M=" << c.M
                << " N=" << c.N << " K=" << c.K << " layout " << layout << " alpha " << alpha
                << " beta " << beta;
          }
        }
      }
    }
  }
}

TEST_P(MatmulTest, ExactWithSmallIntegers) {
  for (const Case& c : {Case{13, 70, 4096}, Case{40, 33, 1000}, Case{1, 64, 3000}}) {
    for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
      const bool kn = layout == TFK_LAYOUT_KN;
      Mat A(c.M, c.K), B(kn ? c.K : c.N, kn ? c.N : c.K), C(c.M, c.N);
      std::mt19937 rng(5);
      std::uniform_int_distribution<int> dist(-3, 3);
      for (size_t i = 0; i < c.M * c.K; ++i) A.data()[i] = static_cast<float>(dist(rng));
      for (size_t i = 0; i < c.K * c.N; ++i) B.data()[i] = static_cast<float>(dist(rng));
      tfk::check(tfk_matmul(c.M, c.N, c.K, 1, A.data(), c.K, B.data(), B.ld, layout, 0,
                            C.data(), c.N));
      for (size_t i = 0; i < c.M; ++i) {
        for (size_t j = 0; j < c.N; ++j) {
          double s = 0;
          for (size_t k = 0; k < c.K; ++k) s += A.at(i, k) * BAt(B, layout, k, j);
          ASSERT_EQ(C.at(i, j), s) << i << "," << j << " layout " << layout;
        }
      }
    }
  }
}

// Packed weights equal the unpacked matmul bit for bit for every row count
// of one and two 14-row tiles (the decoding tiles up to 14 rows with packed
// weights), across k-blocks (K = 1100 > kc) and with the call split into
// tasks (two threads: on AVX-512 the decoding shapes share one packed A,
// the others pack it per task).
TEST_P(MatmulTest, PackedEqualsUnpackedForEveryRowCount) {
  const size_t K = 1100, N = 70;
  for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
    const bool kn = layout == TFK_LAYOUT_KN;
    Mat X(29, K, 3), W(kn ? K : N, kn ? N : K, 1), Y(29, N), Y2(29, N);
    FillUniform(X.data(), 29 * X.ld, -1, 1, 21);
    FillUniform(W.data(), W.rows * W.ld, -1, 1, 22);
    tfk::linear layer(K, N, W.data(), layout, nullptr, TFK_ACT_NONE, W.ld);
    for (int threads : {1, 2}) {
      for (size_t M = 1; M <= 29; ++M) {
        WithThreads(threads, [&] {
          layer.forward(M, X.data(), Y.data(), nullptr, X.ld, N);
          tfk::check(tfk_matmul(M, N, K, 1, X.data(), X.ld, W.data(), W.ld, layout, 0, Y2.data(), N));
        });
        ASSERT_TRUE(SameBits(Y.data(), Y2.data(), M * N)) << "M=" << M << " threads " << threads;
        if (threads == 1 && (M == 1 || M == 14 || M == 29)) {
          Mat C0(M, N), Ym(M, N);
          std::copy(Y.data(), Y.data() + M * N, Ym.data());
          ExpectGemm(X, W, layout, C0, Ym, 1, 0, K);
        }
      }
    }
  }
}

// Weights larger than one core's L2 take the split decoding tiles (M = 7-12
// on AVX-512) in shorter k-blocks (lib/matmul.cc, split_kc): here at least
// twice L2 (as the library reads it; 4 MiB where it reports none) with K
// odd, so the last block is partial. 200 columns are 7 panels, the last
// partial: two tasks get 3-4 each, so both run a split tile. M = 2-6 take
// the decoding tiles over long panels (K > 2048 whatever the L2), of which
// M = 2-4 prefetch the next panel only where detail::DecodeNextLongPanel
// says so (ctest also runs this with TFK_DECODE_NEXT_PANEL=1). Packed still
// equals unpacked bit for bit, on one and two threads, and the reference.
TEST_P(MatmulTest, PackedEqualsUnpackedBeyondL2) {
  long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  if (l2 <= 0 || l2 > (32l << 20)) l2 = 2l << 20;
  const size_t N = 200,
               K = std::max<size_t>(static_cast<size_t>(l2) * 2 / (N * sizeof(float)), 4097) | 1;
  Mat X(12, K), W(K, N), Y(12, N), Y2(12, N);
  FillUniform(X.data(), 12 * X.ld, -1, 1, 31);
  FillUniform(W.data(), K * W.ld, -1, 1, 32);
  tfk::linear layer(K, N, W.data(), TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE, W.ld);
  for (int threads : {1, 2}) {
    for (size_t M = 2; M <= 12; ++M) {
      WithThreads(threads, [&] {
        layer.forward(M, X.data(), Y.data(), nullptr, X.ld, N);
        tfk::check(tfk_matmul(M, N, K, 1, X.data(), X.ld, W.data(), W.ld, TFK_LAYOUT_KN, 0,
                              Y2.data(), N));
      });
      ASSERT_TRUE(SameBits(Y.data(), Y2.data(), M * N)) << "M=" << M << " threads " << threads;
    }
  }
  Mat C0(12, N);
  ExpectGemm(X, W, TFK_LAYOUT_KN, C0, Y, 1, 0, K);
}

// A taller than the packed-A budget (8 Mi floats, lib/matmul.cc) goes
// through in slabs of rows where a call's tasks share one packed A (ctest
// runs this with TFK_PACK_A_PER_TASK=0; by default these tasks pack A each
// for themselves): 518 + 512 rows at K = 8192, with a bias and a residual of
// its own leading dimension, which each slab must offset.
TEST_P(MatmulTest, ExactAcrossRowSlabs) {
  const size_t M = 1030, K = 8192, N = 33;
  Mat X(M, K), W(K, N), R(M, N, 3), Y(M, N, 1);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> dist(-1, 1);
  for (size_t i = 0; i < M * K; ++i) X.data()[i] = static_cast<float>(dist(rng));
  for (size_t i = 0; i < K * N; ++i) W.data()[i] = static_cast<float>(dist(rng));
  for (size_t i = 0; i < M * R.ld; ++i) R.data()[i] = static_cast<float>(dist(rng));
  std::vector<float> bias(N);
  for (size_t j = 0; j < N; ++j) bias[j] = static_cast<float>(j % 5);
  tfk::linear layer(K, N, W.data(), TFK_LAYOUT_KN, bias.data());
  // Sixteen tasks (one task packs into its own scratch).
  WithThreads(16, [&] { layer.forward(M, X.data(), Y.data(), R.data(), K, Y.ld, R.ld); });
  std::vector<double> row(N);
  for (size_t i = 0; i < M; ++i) {
    for (size_t j = 0; j < N; ++j) row[j] = bias[j] + R.at(i, j);
    for (size_t k = 0; k < K; ++k) {
      const double a = X.at(i, k);
      if (a == 0) continue;
      for (size_t j = 0; j < N; ++j) row[j] += a * W.at(k, j);
    }
    for (size_t j = 0; j < N; ++j) ASSERT_EQ(Y.at(i, j), row[j]) << i << "," << j;
  }
}

TEST_P(MatmulTest, LinearEpiloguesAndPackedEqualsUnpacked) {
  // M <= 14 take the decoding tiles; M = 1 runs 4 panels at once, and on
  // AVX-512 M = 2 4 panels, M = 3-4 3 and M = 5-6 2 (lib/matmul-inl.h,
  // DecodePanelsForRows), M = 7-12 3 in sub-tiles (TileRowsSplit), then
  // the rest one by one: 100 columns are 4 panels, the last partial; 161
  // are 6, the last partial.
  const size_t shapes[][2] = {{29, 45}, {1, 45},  {1, 100}, {1, 161}, {2, 161}, {3, 161},
                              {4, 100}, {5, 161}, {6, 100}, {7, 100}, {12, 161}, {14, 100}};
  for (const auto& shape : shapes) {
    for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
      const size_t M = shape[0], K = 77, N = shape[1];
      const bool kn = layout == TFK_LAYOUT_KN;
      Mat X(M, K, 1), W(kn ? K : N, kn ? N : K, 2), Y(M, N), R(M, N), Y2(M, N), Z(M, N, 5, 1);
      FillUniform(X.data(), M * X.ld, -1, 1, 1);
      FillUniform(W.data(), W.rows * W.ld, -0.3f, 0.3f, 2);
      FillUniform(R.data(), M * N, -1, 1, 3);
      std::vector<float> bias(N);
      FillUniform(bias.data(), N, -0.5f, 0.5f, 4);

      // No epilogue: packed forward == unpacked matmul, bit for bit.
      tfk_linear* plain = nullptr;
      tfk::check(tfk_linear_create(&plain, K, N, W.data(), W.ld, layout, nullptr, TFK_ACT_NONE));
      std::unique_ptr<tfk_linear, decltype(&tfk_linear_destroy)> guard(plain, tfk_linear_destroy);
      tfk::check(tfk_linear_forward(plain, M, X.data(), X.ld, Y.data(), N, nullptr, 0));
      tfk::check(tfk_matmul(M, N, K, 1, X.data(), X.ld, W.data(), W.ld, layout, 0, Y2.data(), N));
      EXPECT_TRUE(SameBits(Y.data(), Y2.data(), M * N));
      size_t k = 0, n = 0, bytes = 0;
      tfk::check(tfk_linear_info(plain, &k, &n, &bytes));
      EXPECT_EQ(k, K);
      EXPECT_EQ(n, N);
      EXPECT_GE(bytes, (N + 31) / 32 * 32 * K * sizeof(float));  // whole panels

      for (tfk_activation act :
           {TFK_ACT_NONE, TFK_ACT_RELU, TFK_ACT_GELU_ERF, TFK_ACT_GELU_TANH, TFK_ACT_SILU}) {
        // 0: no residual; 1: in place, Z = Z + act(XW + b); 2: Z = R +
        // act(XW + b) with R apart, its own leading dimension.
        for (int residual : {0, 1, 2}) {
          tfk_linear* layer = nullptr;
          tfk::check(tfk_linear_create(&layer, K, N, W.data(), W.ld, layout, bias.data(), act));
          std::unique_ptr<tfk_linear, decltype(&tfk_linear_destroy)> g2(layer, tfk_linear_destroy);
          size_t with_bias = 0;  // the bytes the handle holds count its bias
          tfk::check(tfk_linear_info(layer, nullptr, nullptr, &with_bias));
          EXPECT_GE(with_bias, bytes + N * sizeof(float));
          for (size_t i = 0; i < M; ++i) {
            for (size_t j = 0; j < N; ++j) Z.at(i, j) = residual == 1 ? R.at(i, j) : 9.0f;
          }
          const float* r = residual == 0 ? nullptr : residual == 1 ? Z.data() : R.data();
          tfk::check(tfk_linear_forward(layer, M, X.data(), X.ld, Z.data(), Z.ld, r,
                                        residual == 1 ? Z.ld : R.ld));
          for (size_t i = 0; i < M; ++i) {
            for (size_t j = 0; j < N; ++j) {
              double s = 0, mag = 0;
              for (size_t kk = 0; kk < K; ++kk) {
                const double p = static_cast<double>(X.at(i, kk)) * BAt(W, layout, kk, j);
                s += p;
                mag += std::fabs(p);
              }
              const double pre = s + bias[j];
              const double ref = Act(act, pre) + (residual != 0 ? R.at(i, j) : 0.0);
              // Pre-activation error (2K u |X||W| + 4u(|s| + |b|)) times the
              // activation's slope (<= 1.13 for GELU, 1.1 for SiLU), plus the activation's own
              // 20 u (GELU-tanh: its bound at these |x| <= 3 is < 40 u) and the
              // residual add.
              const double pre_err = (2 * K * mag + 4 * (std::fabs(s) + std::fabs(bias[j]))) * kEps;
              const double tol = 1.13 * pre_err + 40 * kEps * std::fabs(Act(act, pre)) +
                                 2 * kEps * std::fabs(ref) + 1e-37;
              ASSERT_NEAR(Z.at(i, j), ref, tol) << "act " << act << " residual " << residual;
            }
          }
        }
      }
    }
  }
}

// Tasks at most two to an M chunk pack A each for themselves, taking whole
// groups of panels as their units of work (lib/matmul.cc, Gemm; ctest also
// runs this with the shared packed A, TFK_PACK_A_PER_TASK=0): two threads
// at N = 70 (3 panels, 2 a task), N = 250 (8 panels, the last partial),
// N = 1030 (33 panels) and N = 2200 (69 panels, 35 a task: groups longer
// than 32) on one M chunk; at M = 600 (several M chunks of one group each,
// two for one task) and M = 300, N = 1100 (several groups an M chunk);
// seven at M = 2000, N = 130 (5 or more M chunks of 5 panels, the last
// partial, one group each, several a task). Seven tasks on one M chunk (M = 70, N = 3600,
// 113 panels) share one packing instead. All with K across k-blocks. The
// same bits as one thread, packed or not, and the reference; with a bias,
// GELU and a residual of its own stride, the same bits as one thread.
TEST_P(MatmulTest, PrivatePackedAForManyPanels) {
  const size_t K = 1100;
  struct Shape {
    size_t M, N;
    int threads;
  };
  for (const Shape shape : {Shape{40, 70, 2}, Shape{40, 250, 2}, Shape{40, 1030, 2},
                            Shape{40, 2200, 2}, Shape{600, 300, 2}, Shape{300, 1100, 2},
                            Shape{2000, 130, 7}, Shape{70, 3600, 7}}) {
    // Plain variables: lambdas cannot capture structured bindings in C++17.
    const size_t M = shape.M, N = shape.N;
    const int threads = shape.threads;
    Mat A(M, K, 5), B(K, N), C1(M, N), C2(M, N), Y(M, N), R(M, N, 3), Z1(M, N), Z2(M, N);
    FillUniform(A.data(), M * A.ld, -1, 1, 41);
    FillUniform(B.data(), K * B.ld, -1, 1, 42);
    FillUniform(R.data(), M * R.ld, -1, 1, 43);
    std::vector<float> bias(N);
    FillUniform(bias.data(), N, -1, 1, 44);
    const auto run = [&](Mat& C) {
      tfk::check(tfk_matmul(M, N, K, 1, A.data(), A.ld, B.data(), B.ld, TFK_LAYOUT_KN, 0,
                            C.data(), N));
    };
    WithThreads(1, [&] { run(C1); });
    WithThreads(threads, [&] { run(C2); });
    tfk::linear layer(K, N, B.data(), TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE, B.ld);
    WithThreads(threads, [&] { layer.forward(M, A.data(), Y.data(), nullptr, A.ld, N); });
    ASSERT_TRUE(SameBits(C1.data(), C2.data(), M * N)) << "M=" << M << " threads " << threads;
    ASSERT_TRUE(SameBits(C1.data(), Y.data(), M * N)) << "M=" << M << " threads " << threads;
    Mat C0(M, N);
    ExpectGemm(A, B, TFK_LAYOUT_KN, C0, C2, 1, 0, K);
    tfk::linear fused(K, N, B.data(), TFK_LAYOUT_KN, bias.data(), TFK_ACT_GELU_ERF, B.ld);
    WithThreads(1, [&] { fused.forward(M, A.data(), Z1.data(), R.data(), A.ld, N, R.ld); });
    WithThreads(threads, [&] { fused.forward(M, A.data(), Z2.data(), R.data(), A.ld, N, R.ld); });
    ASSERT_TRUE(SameBits(Z1.data(), Z2.data(), M * N)) << "M=" << M << " threads " << threads;
  }
}

TEST_P(MatmulTest, IdenticalBitsForAnyThreadCount) {
  const size_t M = 130, N = 300, K = 700;
  Mat A(M, K), B(K, N), C1(M, N), C2(M, N), C7(M, N);
  FillUniform(A.data(), M * K, -1, 1, 8);
  FillUniform(B.data(), K * N, -1, 1, 9);
  auto run = [&](Mat& C) {
    tfk::check(tfk_matmul(M, N, K, 1, A.data(), K, B.data(), N, TFK_LAYOUT_KN, 0, C.data(), N));
  };
  WithThreads(1, [&] { run(C1); });
  WithThreads(2, [&] { run(C2); });
  WithThreads(7, [&] { run(C7); });
  EXPECT_TRUE(SameBits(C1.data(), C2.data(), M * N));
  EXPECT_TRUE(SameBits(C1.data(), C7.data(), M * N));
  // Decode shape: one row, weights split over threads by panels.
  tfk_linear* layer = nullptr;
  tfk::check(tfk_linear_create(&layer, K, N, B.data(), N, TFK_LAYOUT_KN, nullptr, TFK_ACT_GELU_ERF));
  std::vector<float> y1(N), y2(N), y7(N);
  WithThreads(1, [&] { tfk::check(tfk_linear_forward(layer, 1, A.data(), K, y1.data(), N, nullptr, 0)); });
  WithThreads(2, [&] { tfk::check(tfk_linear_forward(layer, 1, A.data(), K, y2.data(), N, nullptr, 0)); });
  WithThreads(7, [&] { tfk::check(tfk_linear_forward(layer, 1, A.data(), K, y7.data(), N, nullptr, 0)); });
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), N));
  EXPECT_TRUE(SameBits(y1.data(), y7.data(), N));
  tfk_linear_destroy(layer);
}

// N = 4: a partial panel only; 33: a whole panel and a partial one; 64: whole
// panels (their own store path). M = 1 and 20: the decoding and the
// blocked paths.
TEST_P(MatmulTest, BetaZeroIgnoresNaNInC) {
  for (size_t M : {1, 3, 20}) {
    for (size_t N : {4, 33, 64}) {
      for (float alpha : {1.0f, -2.0f}) {
        Mat A(M, 5), B(5, N), C(M, N);
        FillUniform(A.data(), M * 5, -1, 1, 1);
        FillUniform(B.data(), 5 * N, -1, 1, 2);
        for (size_t i = 0; i < M * N; ++i) C.data()[i] = std::numeric_limits<float>::quiet_NaN();
        tfk::check(tfk_matmul(M, N, 5, alpha, A.data(), 5, B.data(), N, TFK_LAYOUT_KN, 0, C.data(), N));
        ExpectGemm(A, B, TFK_LAYOUT_KN, C, C, alpha, 0.0f, 5);  // C0 is not used at beta = 0
        if (HasFailure()) return;
      }
    }
  }
}

// alpha = 0 reads neither A nor B (BLAS's rule): C = beta C, +0 where beta
// = 0, though A op(B) here is inf, NaN or overflows.
TEST_P(MatmulTest, AlphaZeroReadsNeitherAnorB) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t M : {1, 20}) {
    const size_t N = 33, K = 5;
    Mat A(M, K), B(K, N), C(M, N, 2);
    for (size_t i = 0; i < M * K; ++i) A.data()[i] = i % 3 == 0 ? inf : i % 3 == 1 ? nan : 1e30f;
    for (size_t i = 0; i < K * N; ++i) B.data()[i] = i % 2 == 0 ? 1e30f : -inf;
    for (float beta : {1.0f, -2.5f, 0.0f}) {
      FillUniform(C.data(), M * C.ld, -1, 1, 3);
      C.at(0, 1) = -0.0f;
      C.at(M - 1, N - 1) = nan;  // kept (times beta) unless beta = 0
      std::vector<float> before(C.data(), C.data() + M * C.ld);
      tfk::check(tfk_matmul(M, N, K, 0.0f, A.data(), K, B.data(), N, TFK_LAYOUT_KN, beta,
                            C.data(), C.ld));
      for (size_t i = 0; i < M; ++i) {
        for (size_t j = 0; j < C.ld; ++j) {
          const float was = before[i * C.ld + j], now = C.at(i, j);
          const float want = j >= N ? was : beta == 0.0f ? 0.0f : beta * was;
          ASSERT_TRUE(std::memcmp(&now, &want, 4) == 0 || (std::isnan(now) && std::isnan(want)))
              << "M " << M << " beta " << beta << " (" << i << ", " << j << "): " << now
              << " want " << want;
        }
      }
    }
  }
}

// n floats whose last one ends a page, with an inaccessible page after it:
// a read past the end faults.
class PageEnd {
 public:
  explicit PageEnd(size_t n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    bytes_ = (n * sizeof(float) + page - 1) / page * page + page;
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    base_ = static_cast<char*>(m);
    if (mprotect(base_ + bytes_ - page, page, PROT_NONE) != 0) return;
    p_ = reinterpret_cast<float*>(base_ + bytes_ - page) - n;
  }
  ~PageEnd() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  PageEnd(const PageEnd&) = delete;
  PageEnd& operator=(const PageEnd&) = delete;
  float* data() { return p_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  float* p_ = nullptr;
};

// Vector loads that cover a partial panel or a row tail must stay inside A
// and B: each ends a page here (the decoding tiles read several panels of B
// at once, the unpacked path reads B's rows in place).
TEST_P(MatmulTest, ReadsNothingPastAOrB) {
  for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
    for (size_t M : {1, 2, 3, 9}) {
      for (size_t N : {1, 33, 100, 161}) {
        for (size_t K : {17, 64}) {
          PageEnd A(M * K), B(K * N);
          ASSERT_TRUE(A.data() != nullptr && B.data() != nullptr);
          FillUniform(A.data(), M * K, -1, 1, static_cast<uint32_t>(M + N));
          FillUniform(B.data(), K * N, -1, 1, static_cast<uint32_t>(K + N));
          std::vector<float> C(M * N);
          const size_t ldb = layout == TFK_LAYOUT_KN ? N : K;
          ASSERT_EQ(tfk_matmul(M, N, K, 1, A.data(), K, B.data(), ldb, layout, 0, C.data(), N),
                    TFK_SUCCESS);
          for (size_t i = 0; i < M; ++i) {
            for (size_t j = 0; j < N; ++j) {
              double s = 0, mag = 0;
              for (size_t k = 0; k < K; ++k) {
                const double p = static_cast<double>(A.data()[i * K + k]) *
                                 B.data()[layout == TFK_LAYOUT_KN ? k * N + j : j * K + k];
                s += p, mag += std::fabs(p);
              }
              // tfk.h's bound, 2 K u on targets without FMA.
              ASSERT_LE(std::fabs(C[i * N + j] - s), 2.0 * K * kEps * mag)
                  << "M " << M << " N " << N << " K " << K << " layout " << layout;
            }
          }
          // The packed layer reads X (here A) alone: the same bits.
          tfk_linear* h = nullptr;
          tfk::check(tfk_linear_create(&h, K, N, B.data(), ldb, layout, nullptr, TFK_ACT_NONE));
          std::unique_ptr<tfk_linear, decltype(&tfk_linear_destroy)> guard(h, tfk_linear_destroy);
          std::vector<float> Y(M * N);
          tfk::check(tfk_linear_forward(h, M, A.data(), K, Y.data(), N, nullptr, 0));
          ASSERT_TRUE(SameBits(C.data(), Y.data(), M * N)) << "M " << M << " N " << N;
        }
      }
    }
  }
}

TEST_P(MatmulTest, CppLayer) {
  const size_t M = 5, K = 9, N = 40;
  std::vector<float> x(M * K), w(N * K), y1(M * N), y2(M * N);
  FillUniform(x.data(), x.size(), -1, 1, 1);
  FillUniform(w.data(), w.size(), -1, 1, 2);
  tfk::linear layer(K, N, w.data(), TFK_LAYOUT_NK);
  EXPECT_EQ(layer.K(), K);
  EXPECT_EQ(layer.N(), N);
  layer.forward(M, x.data(), y1.data());
  tfk::matmul(M, N, K, x.data(), w.data(), y2.data(), TFK_LAYOUT_NK);
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), M * N));
  // Strided: X rows of K + 1, Y rows of N + 3, R (= y1) dense: Y = y1 + XW.
  std::vector<float> xs(M * (K + 1)), ys(M * (N + 3));
  for (size_t i = 0; i < M; ++i) std::copy(&x[i * K], &x[i * K] + K, &xs[i * (K + 1)]);
  layer.forward(M, xs.data(), ys.data(), y1.data(), K + 1, N + 3, N);
  for (size_t i = 0; i < M; ++i) {
    for (size_t j = 0; j < N; ++j) EXPECT_EQ(ys[i * (N + 3) + j], y1[i * N + j] + y2[i * N + j]);
  }
  // In place with strided Y and ldr left 0: R takes Y's leading dimension
  // (with N it was refused as an overlap), the same as passing it.
  std::vector<float> ys2 = ys;
  layer.forward(M, xs.data(), ys.data(), ys.data(), K + 1, N + 3);
  layer.forward(M, xs.data(), ys2.data(), ys2.data(), K + 1, N + 3, N + 3);
  EXPECT_TRUE(SameBits(ys.data(), ys2.data(), ys.size()));
  tfk::linear moved = std::move(layer);
  EXPECT_EQ(moved.N(), N);
  EXPECT_THROW(tfk::linear(0, N, w.data()), tfk::error);
}

TFK_INSTANTIATE_FOR_EACH_ISA(MatmulTest);

TEST(MatmulErrors, StatusAndNothingWritten) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 42.0f);
  auto expect = [&](tfk_status want, const char* needle, tfk_status got) {
    EXPECT_EQ(got, want);
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos) << tfk_last_error();
    for (float v : c) ASSERT_EQ(v, 42.0f);
  };
  expect(TFK_INVALID_ARGUMENT, "M is 0",
         tfk_matmul(0, 4, 4, 1, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "N is 0",
         tfk_matmul(2, 0, 4, 1, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "K is 0",
         tfk_matmul(2, 4, 0, 1, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "A is NULL",
         tfk_matmul(2, 4, 4, 1, nullptr, 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "C is NULL",
         tfk_matmul(2, 4, 4, 1, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, 0, nullptr, 4));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of B (3) < cols (4)",
         tfk_matmul(2, 4, 4, 1, a.data(), 4, b.data(), 3, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "beta",
         tfk_matmul(2, 4, 4, 1, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, INFINITY, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of A (3) < cols (4)",
         tfk_matmul(2, 4, 4, 1, a.data(), 3, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of B (4) < cols (5)",
         tfk_matmul(2, 4, 5, 1, a.data(), 5, b.data(), 4, TFK_LAYOUT_NK, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of C",
         tfk_matmul(2, 4, 4, 1, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 3));
  expect(TFK_INVALID_ARGUMENT, "B is NULL",
         tfk_matmul(2, 4, 4, 1, a.data(), 4, nullptr, 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "alpha",
         tfk_matmul(2, 4, 4, NAN, a.data(), 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "C overlaps A",
         tfk_matmul(2, 4, 4, 1, c.data() + 2, 4, b.data(), 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  expect(TFK_INVALID_ARGUMENT, "C overlaps B",
         tfk_matmul(2, 4, 4, 1, a.data(), 4, c.data() + 3, 4, TFK_LAYOUT_KN, 0, c.data(), 4));
  tfk_linear* h = nullptr;
  expect(TFK_INVALID_ARGUMENT, "out is NULL",
         tfk_linear_create(nullptr, 4, 4, b.data(), 4, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE));
  EXPECT_EQ(h, nullptr);
  expect(TFK_INVALID_ARGUMENT, "leading dimension of W",
         tfk_linear_create(&h, 4, 4, b.data(), 2, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE));
  ASSERT_EQ(tfk_linear_create(&h, 4, 4, b.data(), 4, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE),
            TFK_SUCCESS);
  expect(TFK_INVALID_ARGUMENT, "layer is NULL",
         tfk_linear_forward(nullptr, 1, a.data(), 4, c.data(), 4, nullptr, 0));
  tfk_linear* h2 = nullptr;
  expect(TFK_INVALID_ARGUMENT, "W is NULL",
         tfk_linear_create(&h2, 4, 4, nullptr, 4, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE));
  expect(TFK_INVALID_ARGUMENT, "K is 0",
         tfk_linear_create(&h2, 0, 4, b.data(), 4, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE));
  // The bias is read as floats, as W is.
  const float* odd_bias =
      reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.data()) + 2);
  expect(TFK_INVALID_ARGUMENT, "bias is not 4-byte aligned",
         tfk_linear_create(&h2, 4, 4, b.data(), 4, TFK_LAYOUT_KN, odd_bias, TFK_ACT_NONE));
  // W [2^58, 1] passes its own extent check, but the packed panel (K x 32
  // floats) does not fit size_t: refused before W (a made-up address) is read.
  expect(TFK_INVALID_ARGUMENT, "too large",
         tfk_linear_create(&h2, size_t{1} << 58, 1, reinterpret_cast<const float*>(uintptr_t{1} << 20),
                           1, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE));
  EXPECT_EQ(h2, nullptr);
  expect(TFK_INVALID_ARGUMENT, "M is 0",
         tfk_linear_forward(h, 0, a.data(), 4, c.data(), 4, nullptr, 0));
  expect(TFK_INVALID_ARGUMENT, "X is NULL",
         tfk_linear_forward(h, 2, nullptr, 4, c.data(), 4, nullptr, 0));
  expect(TFK_INVALID_ARGUMENT, "Y is NULL",
         tfk_linear_forward(h, 2, a.data(), 4, nullptr, 4, nullptr, 0));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of Y (3) < cols (4)",
         tfk_linear_forward(h, 2, a.data(), 4, c.data(), 3, nullptr, 0));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of R (2) < cols (4)",
         tfk_linear_forward(h, 2, a.data(), 4, c.data(), 4, b.data(), 2));
  expect(TFK_INVALID_ARGUMENT, "leading dimension of X",
         tfk_linear_forward(h, 2, a.data(), 3, c.data(), 4, nullptr, 0));
  expect(TFK_INVALID_ARGUMENT, "Y overlaps X",
         tfk_linear_forward(h, 2, c.data() + 1, 4, c.data(), 4, nullptr, 0));
  expect(TFK_INVALID_ARGUMENT, "Y overlaps R",
         tfk_linear_forward(h, 2, a.data(), 4, c.data(), 4, c.data() + 1, 4));
  size_t k = 7, n = 7, bytes = 7;
  expect(TFK_INVALID_ARGUMENT, "layer is NULL", tfk_linear_info(nullptr, &k, &n, &bytes));
  EXPECT_TRUE(k == 7 && n == 7 && bytes == 7);
  tfk_linear_destroy(h);
  tfk_linear_destroy(nullptr);  // ignored
}

}  // namespace
}  // namespace tfk_test
