// tfk_attention and the KV cache against a double-precision reference on
// every supported ISA.
//
// Error bound: tests/attention_ref.h.
// For a bf16 cache the reference uses the rounded K and V (what is stored).
#include <tfk/tfk.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_ref.h"
#include "test_util.h"

namespace tfk_test {
namespace {

struct Shape {
  size_t q_len, kv_len, n_heads, n_kv_heads, d;
  bool causal;
};

// Q, K, V, O in [tokens, heads, d] layout with padded rows.
struct Problem {
  Shape s;
  size_t ldq, ldk, ldv, ldo;
  Buffer q, k, v, o;
  Problem(const Shape& shape, size_t pad, size_t misalign, uint32_t seed)
      : s(shape),
        ldq(shape.n_heads * shape.d + pad),
        ldk(shape.n_kv_heads * shape.d + 2 * pad),
        ldv(shape.n_kv_heads * shape.d + pad),
        ldo(shape.n_heads * shape.d + 3 * pad),
        q(shape.q_len * ldq, misalign),
        k(shape.kv_len * ldk, misalign),
        v(shape.kv_len * ldv),
        o(shape.q_len * ldo, misalign) {
    FillUniform(q.data(), q.size(), -1.0f, 1.0f, seed);
    FillUniform(k.data(), k.size(), -1.0f, 1.0f, seed + 1);
    FillUniform(v.data(), v.size(), -1.0f, 1.0f, seed + 2);
    FillUniform(o.data(), o.size(), 7.0f, 8.0f, seed + 3);
    o0.assign(o.data(), o.data() + o.size());
  }
  std::vector<float> o0;  // O as filled, before any run
  // Puts O back as filled, so that a run that writes nothing is seen.
  void ResetO() { std::copy(o0.begin(), o0.end(), o.data()); }
  // O's padding columns (past n_heads x d) as filled.
  bool OPaddingIntact() const {
    return PaddingIntact(o.data(), o0.data(), s.q_len, s.n_heads * s.d, ldo);
  }
  float* Q(size_t t, size_t h) { return q.data() + t * ldq + h * s.d; }
  float* K(size_t j, size_t g) { return k.data() + j * ldk + g * s.d; }
  float* V(size_t j, size_t g) { return v.data() + j * ldv + g * s.d; }
  float* O(size_t t, size_t h) { return o.data() + t * ldo + h * s.d; }
  tfk_status Run(float scale = 0.0f) {
    return tfk_attention(s.q_len, s.kv_len, s.n_heads, s.n_kv_heads, s.d, q.data(), ldq,
                         k.data(), ldk, v.data(), ldv, o.data(), ldo, scale,
                         s.causal ? TFK_MASK_CAUSAL : TFK_MASK_NONE);
  }
};

float RoundBf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return x;
  b += 0x7fffu + ((b >> 16) & 1u);
  b &= 0xffff0000u;
  std::memcpy(&x, &b, 4);
  return x;
}

size_t Visible(const Shape& s, size_t t) {
  if (!s.causal) return s.kv_len;
  if (s.kv_len + t + 1 <= s.q_len) return 0;
  return std::min(s.kv_len, s.kv_len + t + 1 - s.q_len);
}

// Checks o[0:d] (query t, head h) against the reference; q(k), kk(j, k) and
// vv(j, c) give the inputs as the kernel sees them.
template <class QF, class KF, class VF>
void ExpectRow(const Shape& s, size_t t, const float* o, float scale, const QF& q, const KF& kk,
               const VF& vv, const char* what) {
  const size_t n = Visible(s, t);
  std::vector<double> ref, tol;
  AttentionRowRef(n, s.d, scale, q, kk, vv, ref, tol);
  for (size_t c = 0; c < s.d; ++c) {
    if (n == 0) {
      ASSERT_EQ(o[c], 0.0f) << what << " t=" << t;
    } else {
      ASSERT_NEAR(o[c], ref[c], tol[c]) << what << " t=" << t << " c=" << c << " n=" << n;
    }
  }
}

// Checks every output row of pb against the reference; bf16: K and V as a
// bf16 cache stores them.
void ExpectAttention(Problem& pb, float scale, const char* what, bool bf16 = false) {
  const Shape& s = pb.s;
  const size_t rep = s.n_heads / s.n_kv_heads;
  const auto stored = [bf16](float x) { return bf16 ? RoundBf16(x) : x; };
  for (size_t t = 0; t < s.q_len; ++t) {
    for (size_t h = 0; h < s.n_heads; ++h) {
      const size_t g = h / rep;
      const float* q = pb.Q(t, h);
      ExpectRow(
          s, t, pb.O(t, h), scale, [&](size_t k) { return q[k]; },
          [&](size_t j, size_t k) { return stored(pb.K(j, g)[k]); },
          [&](size_t j, size_t c) { return stored(pb.V(j, g)[c]); }, what);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Shapes: the decoding path (<= 16 queries per KV head, splits of 256 keys,
// 512 for a lone query, tiles of 1-4 queries that see the same keys), the
// prefill path (blocks of 32 queries x 64 keys), and between them groups of
// 17-256 queries against more keys than a split holds (the prefill kernel
// on splits of 512 keys per block of 32 queries), GQA and MQA, causal with
// q_len < kv_len and q_len > kv_len (queries that see nothing), queries that
// see none of a split's keys, odd head_dim.
std::vector<Shape> Shapes() {
  return {
      {1, 1, 1, 1, 1, false},      {1, 7, 2, 2, 7, false},     {7, 7, 2, 1, 7, true},
      {97, 97, 4, 2, 64, true},    {97, 97, 3, 3, 33, false},  {1, 1000, 4, 4, 128, false},
      {1, 1000, 8, 1, 96, true},   {2, 1000, 8, 2, 80, true},  {3, 97, 8, 2, 17, true},
      {5, 1000, 4, 4, 16, true},   {40, 20, 2, 1, 8, true},    {33, 130, 2, 2, 256, true},
      {64, 64, 1, 1, 255, false},  {1000, 1000, 1, 1, 16, true}, {8, 513, 1, 1, 5, false},
      {1, 300, 6, 2, 40, true},    {1, 257, 6, 1, 36, false},  {1, 70, 12, 4, 131, true},
      {1, 1000, 2, 1, 256, false}, {2, 600, 4, 2, 200, true},
      {4, 600, 8, 2, 64, true},    {3, 600, 12, 2, 32, true},  // 16 and 18 queries per KV head
      {3, 2, 1, 1, 4, true},       {2, 257, 2, 2, 8, true},    // no key; none of the last split
      {1, 1000, 32, 1, 64, true},  {8, 700, 32, 8, 48, true},  // MQA 32/1, GQA 32/8 x 8 tokens
      {40, 3000, 8, 2, 24, true},  {20, 520, 1, 1, 8, true},   // 160 and 20 queries, 2 splits
      {7, 513, 5, 1, 19, false},
  };
}

class AttentionTest : public IsaTest {};

TEST_P(AttentionTest, MatchesReference) {
  uint32_t seed = 1;
  for (const Shape& s : Shapes()) {
    Problem pb(s, 3, seed % 3, seed);
    ASSERT_EQ(pb.Run(), TFK_SUCCESS) << tfk_last_error();
    ExpectAttention(pb, 1.0f / std::sqrt(static_cast<float>(s.d)), "default scale");
    if (HasFatalFailure()) return;
    EXPECT_TRUE(pb.o.GuardsIntact() && pb.q.GuardsIntact());
    EXPECT_TRUE(pb.OPaddingIntact()) << s.q_len << "x" << s.kv_len << " d=" << s.d;
    ++seed;
  }
}

TEST_P(AttentionTest, ScaleAndLargeScores) {
  // Scores of size ~1e3 differences: the softmax is nearly one-hot and must
  // neither overflow nor lose the stable shift.
  for (const Shape& s : {Shape{33, 100, 2, 1, 24, false}, Shape{2, 600, 2, 1, 24, true}}) {
    Problem pb(s, 0, 0, 11);
    ASSERT_EQ(pb.Run(40.0f), TFK_SUCCESS);
    ExpectAttention(pb, 40.0f, "scale 40");
    if (HasFatalFailure()) return;
  }
}

TEST_P(AttentionTest, HugeValuesStayFiniteWhileKvLenTimesMaxIsBelowFltMax) {
  // tfk.h: the value sums (up to l max |v|, l <= kv_len) stay finite while
  // kv_len max |V| < FLT_MAX. All values positive and near that limit, so
  // the sums come close to it; the result is within the usual bound.
  for (const Shape& s : {Shape{3, 8, 2, 1, 16, false}, Shape{2, 600, 2, 1, 16, true}}) {
    Problem pb(s, 0, 0, 7);
    const float big = FLT_MAX / (1.01f * static_cast<float>(s.kv_len));
    for (size_t i = 0; i < pb.v.size(); ++i) pb.v[i] = big * (0.75f + 0.25f * pb.v[i]);
    ASSERT_EQ(pb.Run(), TFK_SUCCESS);
    ExpectAttention(pb, 1.0f / std::sqrt(static_cast<float>(s.d)), "values near FLT_MAX / kv_len");
    if (HasFatalFailure()) return;
  }
}

// Weights below float's normal range next to huge values: two keys whose
// scores differ by 90 or 100 (a weight of e^-90 ~ 2^-130, e^-100 ~
// 2^-144), the far one with a value of 1e6 or 1e30. AVX2 and SSE4 flush the
// weight to 0, AVX-512 keeps a subnormal: within the bound's 2^-125 term
// (tests/attention_ref.h), which grows with the values.
TEST_P(AttentionTest, WeightsBelowTheNormalRangeOfHugeValues) {
  for (const auto& [gap, big] : {std::pair{90.0f, 1e6f}, {100.0f, 1e30f}, {88.0f, 3e30f}}) {
    for (size_t kv_len : {2, 700}) {  // one block; the far key in another split
      const size_t d = 1;
      std::vector<float> K(kv_len, 0.0f), V(kv_len, 0.0f);
      K[kv_len - 1] = -gap, V[kv_len - 1] = big;
      const float q = 1.0f;
      float o = -1.0f;
      ASSERT_EQ(tfk_attention(1, kv_len, 1, 1, d, &q, d, K.data(), d, V.data(), d, &o, d, 1.0f,
                              TFK_MASK_NONE),
                TFK_SUCCESS);
      std::vector<double> ref, tol;
      AttentionRowRef(
          kv_len, d, 1.0f, [&](size_t) { return q; }, [&](size_t j, size_t) { return K[j]; },
          [&](size_t j, size_t) { return V[j]; }, ref, tol);
      EXPECT_NEAR(o, ref[0], tol[0]) << "gap " << gap << " value " << big << " keys " << kv_len;
    }
  }
}

TEST_P(AttentionTest, InPlaceOutputOverQuery) {
  for (const Shape& s : {Shape{70, 90, 4, 2, 32, true}, Shape{1, 600, 4, 2, 32, false}}) {
    Problem pb(s, 0, 0, 5);
    Problem ref(s, 0, 0, 5);
    ASSERT_EQ(ref.Run(), TFK_SUCCESS);
    ASSERT_EQ(tfk_attention(s.q_len, s.kv_len, s.n_heads, s.n_kv_heads, s.d, pb.q.data(), pb.ldq,
                            pb.k.data(), pb.ldk, pb.v.data(), pb.ldv, pb.q.data(), pb.ldq, 0.0f,
                            s.causal ? TFK_MASK_CAUSAL : TFK_MASK_NONE),
              TFK_SUCCESS);
    for (size_t t = 0; t < s.q_len; ++t) {
      ASSERT_TRUE(SameBits(pb.Q(t, 0), ref.O(t, 0), s.n_heads * s.d)) << t;
    }
  }
}

TEST_P(AttentionTest, NonFiniteValues) {
  // NaN in a query: only that query's row is NaN. NaN in key j: every query
  // that sees j is NaN, causal queries before j are not.
  for (const Shape& s : {Shape{50, 50, 2, 1, 16, true}, Shape{4, 700, 2, 1, 16, true},
                         Shape{2, 1500, 32, 1, 16, true}}) {
    Problem pb(s, 0, 0, 3);
    pb.Q(1, 1)[3] = NAN;
    const size_t j_nan = s.kv_len - 3;  // seen by the last 3 queries only
    pb.K(j_nan, 0)[2] = NAN;
    ASSERT_EQ(pb.Run(), TFK_SUCCESS);
    for (size_t t = 0; t < s.q_len; ++t) {
      for (size_t h = 0; h < s.n_heads; ++h) {
        const bool sees = Visible(s, t) > j_nan;
        const bool nan = (t == 1 && h == 1) || sees;
        for (size_t c = 0; c < s.d; ++c) {
          ASSERT_EQ(std::isnan(pb.O(t, h)[c]), nan) << "t=" << t << " h=" << h;
        }
      }
    }
  }
}

TEST_P(AttentionTest, QueriesThatSeeNoKeyGiveZerosBesideInfiniteValues) {
  // q_len > kv_len, causal: the first 10 queries see no key and must give
  // zeros, although they share a 32-query tile with queries that see an
  // infinite value (weight 0 times inf would be NaN).
  const Shape s{40, 30, 2, 1, 16, true};
  Problem pb(s, 0, 0, 4);
  pb.V(0, 0)[5] = INFINITY;
  ASSERT_EQ(pb.Run(), TFK_SUCCESS);
  for (size_t t = 0; t < s.q_len; ++t) {
    for (size_t h = 0; h < s.n_heads; ++h) {
      for (size_t c = 0; c < s.d; ++c) {
        if (Visible(s, t) == 0) {
          ASSERT_EQ(pb.O(t, h)[c], 0.0f) << "t=" << t << " h=" << h << " c=" << c;
        } else if (c == 5) {
          ASSERT_FALSE(std::isfinite(pb.O(t, h)[c])) << "t=" << t << " h=" << h;
        }
      }
    }
  }
}

TEST_P(AttentionTest, QueriesWhoseScoresAreAllMinusInfGiveZerosOnEveryPath) {
  // Head 3's scores are all -inf (-1e30 x 1e30 overflows), and a value is
  // infinite: its rows are zeros, as for a query that sees no key, on the
  // decoding path (4 queries a KV head), the decoding path split over keys
  // (1500 keys) and the prefill path (20 queries a KV head). The decoding
  // path had given 0 x inf = NaN.
  for (const Shape& s : {Shape{1, 1, 4, 1, 3, true}, Shape{1, 1500, 4, 1, 16, true},
                         Shape{5, 1, 4, 1, 3, true}}) {
    Problem pb(s, 0, 0, 5);
    for (size_t j = 0; j < s.kv_len; ++j) pb.K(j, 0)[0] = 1e30f;
    for (size_t t = 0; t < s.q_len; ++t) pb.Q(t, 3)[0] = -1e30f;
    pb.V(0, 0)[1] = INFINITY;
    ASSERT_EQ(pb.Run(), TFK_SUCCESS);
    for (size_t t = 0; t < s.q_len; ++t) {
      for (size_t c = 0; c < s.d; ++c) {
        ASSERT_EQ(pb.O(t, 3)[c], 0.0f) << "kv_len=" << s.kv_len << " t=" << t << " c=" << c;
      }
    }
  }
}

TEST_P(AttentionTest, SplitWithAllScoresMinusInfAddsNothing) {
  // Decoding over 1500 keys (split among tasks): head 3's scores are -inf on
  // keys 0-599 (-1e30 x 1e30) and finite on the rest, and key 0's value is
  // infinite. A split that saw only -inf scores adds nothing to the merge;
  // its sums had carried 0 x inf = NaN into it.
  const Shape s{1, 1500, 4, 1, 16, true};
  Problem pb(s, 0, 0, 6);
  for (size_t j = 0; j < 600; ++j) pb.K(j, 0)[0] = 1e30f;
  pb.Q(0, 3)[0] = -1e30f;
  pb.V(0, 0)[1] = INFINITY;
  ASSERT_EQ(pb.Run(), TFK_SUCCESS);
  // Keys 0-599 have weight exactly 0 (exp(-inf)). The other scores are
  // -1e30 x k with k in [-1, 1), ~1e24 or more apart: the weights are one-hot
  // in float, and head 3's row is exactly the value of the best-scoring key.
  const float* q3 = pb.Q(0, 3);
  size_t best = 0;
  double best_score = -INFINITY;
  for (size_t j = 600; j < s.kv_len; ++j) {
    double score = 0;
    for (size_t k = 0; k < s.d; ++k) score += static_cast<double>(q3[k]) * pb.K(j, 0)[k];
    if (score > best_score) best_score = score, best = j;
  }
  for (size_t c = 0; c < s.d; ++c) ASSERT_EQ(pb.O(0, 3)[c], pb.V(best, 0)[c]) << "c=" << c;
}

TEST_P(AttentionTest, SameBitsForAnyThreadCount) {
  for (const Shape& s : {Shape{300, 300, 4, 2, 64, true}, Shape{1, 3000, 8, 2, 64, false},
                         Shape{4, 3000, 32, 4, 32, true}, Shape{1, 3000, 3, 3, 40, true}}) {
    Problem pb(s, 1, 1, 9);
    std::vector<float> first;
    for (int threads : {1, 2, 7}) {
      pb.ResetO();
      WithThreads(threads, [&] { ASSERT_EQ(pb.Run(), TFK_SUCCESS); });
      std::vector<float> out(pb.o.data(), pb.o.data() + pb.o.size());
      if (first.empty()) {
        first = out;
      } else {
        ASSERT_TRUE(SameBits(first.data(), out.data(), out.size())) << threads << " threads";
      }
    }
  }
}

TEST_P(AttentionTest, Errors) {
  const Shape s{4, 6, 4, 2, 8, false};
  Problem pb(s, 0, 0, 1);
  // Nothing is written: not O, nor Q, K or V where a bad O points into them.
  const std::vector<float> before(pb.o.data(), pb.o.data() + pb.o.size());
  const std::vector<float> q_before(pb.q.data(), pb.q.data() + pb.q.size());
  const std::vector<float> k_before(pb.k.data(), pb.k.data() + pb.k.size());
  const std::vector<float> v_before(pb.v.data(), pb.v.data() + pb.v.size());
  const auto run = [&](size_t q_len, size_t kv_len, size_t nh, size_t nkv, size_t d,
                       const float* Q, size_t ldq, const float* K, size_t ldk, const float* V,
                       size_t ldv, float* O, size_t ldo, float scale, int mask) {
    return tfk_attention(q_len, kv_len, nh, nkv, d, Q, ldq, K, ldk, V, ldv, O, ldo, scale,
                         static_cast<tfk_mask>(mask));
  };
  float* q = pb.q.data();
  float* k = pb.k.data();
  float* v = pb.v.data();
  float* o = pb.o.data();
  // Each call must fail with a message naming the argument.
  const auto expect = [](tfk_status got, const char* needle) {
    EXPECT_EQ(got, TFK_INVALID_ARGUMENT) << needle;
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos)
        << tfk_last_error();
  };
  expect(run(0, 6, 4, 2, 8, q, 32, k, 16, v, 16, o, 32, 0, 0), "q_len");
  expect(run(4, 6, 4, 0, 8, q, 32, k, 16, v, 16, o, 32, 0, 0), "n_kv_heads");
  expect(run(4, 6, 4, 3, 8, q, 32, k, 24, v, 24, o, 32, 0, 0), "multiple");
  expect(run(4, 6, 1, 1, 257, q, 257, k, 257, v, 257, o, 257, 0, 0), "head_dim");
  expect(run(4, 6, 4, 2, 8, nullptr, 32, k, 16, v, 16, o, 32, 0, 0), "Q");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 15, v, 16, o, 32, 0, 0), "K");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, nullptr, 16, o, 32, 0, 0), "V");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, v, 16, o, 31, 0, 0), "O");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, v, 16, k, 32, 0, 0), "O overlaps K");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, v, 16, q + 1, 32, 0, 0), "O overlaps Q");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, v, 16, v + 8, 32, 0, 0), "O overlaps V");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, v, 15, o, 32, 0, 0), "V");
  expect(run(4, 6, 4, 2, 8, q, 32, k, 16, v, 16, o, 32, NAN, 0), "scale");
  EXPECT_TRUE(SameBits(before.data(), pb.o.data(), before.size()));
  EXPECT_TRUE(SameBits(q_before.data(), pb.q.data(), q_before.size()));
  EXPECT_TRUE(SameBits(k_before.data(), pb.k.data(), k_before.size()));
  EXPECT_TRUE(SameBits(v_before.data(), pb.v.data(), v_before.size()));
}

// ---- KV cache ---------------------------------------------------------------

struct Cache {
  tfk_kv_cache* c = nullptr;
  Cache(size_t capacity, size_t n_kv, size_t d, tfk_dtype dtype) {
    EXPECT_EQ(tfk_kv_cache_create(&c, capacity, n_kv, d, dtype), TFK_SUCCESS) << tfk_last_error();
  }
  ~Cache() { tfk_kv_cache_destroy(c); }
};

class KvCacheTest : public IsaTest {};

// Decoding token by token (after a prompt) equals one causal pass over the
// whole sequence, for both element types, checked against the reference.
TEST_P(KvCacheTest, IncrementalDecodingMatchesReference) {
  for (tfk_dtype dtype : {TFK_DTYPE_F32, TFK_DTYPE_BF16}) {
    for (const Shape& s : {Shape{300, 300, 4, 2, 64, true}, Shape{40, 40, 4, 1, 17, true},
                           Shape{30, 30, 6, 2, 19, true}}) {
      Problem pb(s, 2, 1, 21);
      Cache cache(s.kv_len + 5, s.n_kv_heads, s.d, dtype);
      const size_t prompt = s.q_len / 3;
      ASSERT_EQ(tfk_kv_cache_append(cache.c, prompt, pb.k.data(), pb.ldk, pb.v.data(), pb.ldv),
                TFK_SUCCESS);
      ASSERT_EQ(tfk_kv_cache_attention(cache.c, prompt, s.n_heads, pb.q.data(), pb.ldq,
                                       pb.o.data(), pb.ldo, 0.0f, TFK_MASK_CAUSAL),
                TFK_SUCCESS);
      for (size_t t = prompt; t < s.q_len; ++t) {
        ASSERT_EQ(tfk_kv_cache_append(cache.c, 1, pb.K(t, 0), pb.ldk, pb.V(t, 0), pb.ldv),
                  TFK_SUCCESS);
        ASSERT_EQ(tfk_kv_cache_attention(cache.c, 1, s.n_heads, pb.Q(t, 0), pb.ldq, pb.O(t, 0),
                                         pb.ldo, 0.0f, TFK_MASK_CAUSAL),
                  TFK_SUCCESS);
      }
      size_t len = 0, cap = 0, bytes = 0;
      ASSERT_EQ(tfk_kv_cache_info(cache.c, &len, &cap, &bytes), TFK_SUCCESS);
      EXPECT_EQ(len, s.kv_len);
      EXPECT_EQ(cap, s.kv_len + 5);
      EXPECT_EQ(bytes, 2 * cap * s.n_kv_heads * s.d * (dtype == TFK_DTYPE_BF16 ? 2 : 4));
      const bool bf16 = dtype == TFK_DTYPE_BF16;
      ExpectAttention(pb, 1.0f / std::sqrt(static_cast<float>(s.d)),
                      bf16 ? "bf16 cache" : "f32 cache", bf16);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(KvCacheTest, MatchesAttentionOnTheSameData) {
  // f32 cache: the same kernel on the same values as tfk_attention (only the
  // strides differ), so the same bits.
  const Shape s{3, 700, 8, 2, 32, true};
  Problem pb(s, 0, 0, 4);
  Problem direct(s, 0, 0, 4);
  ASSERT_EQ(direct.Run(), TFK_SUCCESS);
  Cache cache(1000, s.n_kv_heads, s.d, TFK_DTYPE_F32);
  ASSERT_EQ(tfk_kv_cache_append(cache.c, s.kv_len, pb.k.data(), pb.ldk, pb.v.data(), pb.ldv),
            TFK_SUCCESS);
  ASSERT_EQ(tfk_kv_cache_attention(cache.c, s.q_len, s.n_heads, pb.q.data(), pb.ldq, pb.o.data(),
                                   pb.ldo, 0.0f, TFK_MASK_CAUSAL),
            TFK_SUCCESS);
  EXPECT_TRUE(SameBits(pb.o.data(), direct.o.data(), pb.o.size()));
  // An explicit scale reaches the kernel as it does through tfk_attention.
  ASSERT_EQ(tfk_attention(s.q_len, s.kv_len, s.n_heads, s.n_kv_heads, s.d, direct.q.data(),
                          direct.ldq, direct.k.data(), direct.ldk, direct.v.data(), direct.ldv,
                          direct.o.data(), direct.ldo, 0.37f, TFK_MASK_CAUSAL),
            TFK_SUCCESS);
  ASSERT_EQ(tfk_kv_cache_attention(cache.c, s.q_len, s.n_heads, pb.q.data(), pb.ldq, pb.o.data(),
                                   pb.ldo, 0.37f, TFK_MASK_CAUSAL),
            TFK_SUCCESS);
  EXPECT_TRUE(SameBits(pb.o.data(), direct.o.data(), pb.o.size()));
  ExpectAttention(pb, 0.37f, "f32 cache, scale 0.37");
}

// A prefix kept by truncate and then extended (rejected draft tokens):
// the same as appending the right tokens in the first place. Checked against
// the reference, head_dim 256 on the decoding path, both element types.
TEST_P(KvCacheTest, TruncateMidwayAndAppendAgain) {
  for (tfk_dtype dtype : {TFK_DTYPE_F32, TFK_DTYPE_BF16}) {
    const Shape s{1, 900, 4, 2, 256, true};
    Problem pb(s, 0, 0, 31);
    Cache cache(s.kv_len, s.n_kv_heads, s.d, dtype);
    ASSERT_EQ(tfk_kv_cache_append(cache.c, 700, pb.k.data(), pb.ldk, pb.v.data(), pb.ldv),
              TFK_SUCCESS);
    std::vector<float> junk(200 * pb.ldk, 9.0f);
    ASSERT_EQ(tfk_kv_cache_append(cache.c, 200, junk.data(), pb.ldk, junk.data(), pb.ldk),
              TFK_SUCCESS);
    ASSERT_EQ(tfk_kv_cache_truncate(cache.c, 600), TFK_SUCCESS);
    ASSERT_EQ(tfk_kv_cache_append(cache.c, 300, pb.K(600, 0), pb.ldk, pb.V(600, 0), pb.ldv),
              TFK_SUCCESS);
    ASSERT_EQ(tfk_kv_cache_attention(cache.c, 1, s.n_heads, pb.q.data(), pb.ldq, pb.o.data(),
                                     pb.ldo, 0.0f, TFK_MASK_CAUSAL),
              TFK_SUCCESS);
    const bool bf16 = dtype == TFK_DTYPE_BF16;
    ExpectAttention(pb, 1.0f / 16.0f, bf16 ? "bf16 cache" : "f32 cache", bf16);
    if (HasFatalFailure()) return;
  }
}

// With one cached token the output is that token's V as stored (weight 1):
// bf16 rounds to nearest, ties to even, overflows to inf, keeps NaN.
TEST_P(KvCacheTest, Bf16RoundsToNearestEven) {
  const float in[8] = {1.0f + 0x1p-8f,           // tie: to even, 1
                       1.0f + 3 * 0x1p-8f,       // tie: to even, 1 + 2^-6
                       1.0f + 0x1p-8f + 0x1p-20f,  // above the tie: 1 + 2^-7
                       -(1.0f + 0x1p-8f),        // -1
                       3.4028235e38f,            // FLT_MAX: rounds to inf
                       NAN,
                       0x1p-130f,                // subnormal, kept to 8 bits
                       -2.5f};
  const float want[8] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -1.0f, INFINITY, NAN, 0x1p-130f,
                         -2.5f};
  Cache cache(1, 1, 8, TFK_DTYPE_BF16);
  const std::vector<float> q(8, 0.0f), k(8, 0.0f);  // finite score, weight 1
  ASSERT_EQ(tfk_kv_cache_append(cache.c, 1, k.data(), 8, in, 8), TFK_SUCCESS);
  std::vector<float> o(8, 7.0f);
  ASSERT_EQ(tfk_kv_cache_attention(cache.c, 1, 1, q.data(), 8, o.data(), 8, 0, TFK_MASK_NONE),
            TFK_SUCCESS);
  for (size_t c = 0; c < 8; ++c) {
    if (std::isnan(want[c])) {
      EXPECT_TRUE(std::isnan(o[c])) << c;
    } else {
      EXPECT_TRUE(SameBits(&o[c], &want[c], 1)) << c << ": " << o[c];
    }
  }
  // NaNs whose payload lies in the low 16 bits only (dropped by the
  // truncation): NaN, not inf. Quiet and signalling, both signs.
  const uint32_t nan_bits[4] = {0x7F800001u, 0xFF800001u, 0x7FC00001u, 0xFF80FFFFu};
  std::vector<float> nans(8, 0.5f);
  for (size_t c = 0; c < 4; ++c) std::memcpy(&nans[2 * c], &nan_bits[c], 4);
  ASSERT_EQ(tfk_kv_cache_truncate(cache.c, 0), TFK_SUCCESS);
  ASSERT_EQ(tfk_kv_cache_append(cache.c, 1, k.data(), 8, nans.data(), 8), TFK_SUCCESS);
  ASSERT_EQ(tfk_kv_cache_attention(cache.c, 1, 1, q.data(), 8, o.data(), 8, 0, TFK_MASK_NONE),
            TFK_SUCCESS);
  for (size_t c = 0; c < 8; ++c) {
    if (c % 2 == 0) {
      EXPECT_TRUE(std::isnan(o[c])) << c << ": " << o[c];
    } else {
      EXPECT_EQ(o[c], 0.5f) << c;
    }
  }
}

TEST_P(KvCacheTest, SameBitsForAnyThreadCount) {
  for (tfk_dtype dtype : {TFK_DTYPE_F32, TFK_DTYPE_BF16}) {
    const Shape s{2, 2000, 8, 2, 64, true};
    Problem pb(s, 0, 0, 41);
    Cache cache(s.kv_len, s.n_kv_heads, s.d, dtype);
    ASSERT_EQ(tfk_kv_cache_append(cache.c, s.kv_len, pb.k.data(), pb.ldk, pb.v.data(), pb.ldv),
              TFK_SUCCESS);
    std::vector<float> first;
    for (int threads : {1, 2, 7}) {
      pb.ResetO();
      WithThreads(threads, [&] {
        ASSERT_EQ(tfk_kv_cache_attention(cache.c, s.q_len, s.n_heads, pb.q.data(), pb.ldq,
                                         pb.o.data(), pb.ldo, 0.0f, TFK_MASK_CAUSAL),
                  TFK_SUCCESS);
      });
      std::vector<float> out(pb.o.data(), pb.o.data() + pb.o.size());
      if (first.empty()) first = out;
      ASSERT_TRUE(SameBits(first.data(), out.data(), out.size())) << threads << " threads";
    }
  }
}

TEST_P(KvCacheTest, Errors) {
  tfk_kv_cache* c = nullptr;
  EXPECT_EQ(tfk_kv_cache_create(&c, 0, 1, 8, TFK_DTYPE_F32), TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("capacity"), std::string::npos);
  EXPECT_EQ(tfk_kv_cache_create(&c, 4, 1, 300, TFK_DTYPE_F32), TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_kv_cache_create(nullptr, 4, 1, 8, TFK_DTYPE_F32), TFK_INVALID_ARGUMENT);
  // capacity x n_kv_heads x head_dim x 4 bytes x 2 wraps size_t (to 0).
  EXPECT_EQ(tfk_kv_cache_create(&c, size_t{1} << 30, size_t{1} << 34, 256, TFK_DTYPE_F32),
            TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_kv_cache_create(&c, SIZE_MAX / 2, 1, 8, TFK_DTYPE_BF16), TFK_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);

  Cache cache(4, 2, 8, TFK_DTYPE_BF16);
  std::vector<float> kv(5 * 16, 1.0f), q(4 * 16, 1.0f), o(4 * 16, 3.0f);
  EXPECT_EQ(tfk_kv_cache_attention(cache.c, 1, 2, q.data(), 16, o.data(), 16, 0, TFK_MASK_NONE),
            TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("empty"), std::string::npos);
  EXPECT_EQ(tfk_kv_cache_append(cache.c, 5, kv.data(), 16, kv.data(), 16), TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("capacity"), std::string::npos);
  EXPECT_EQ(tfk_kv_cache_append(cache.c, 2, kv.data(), 15, kv.data(), 16), TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_kv_cache_append(cache.c, 2, kv.data(), 16, kv.data(), 15), TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("V"), std::string::npos) << tfk_last_error();
  size_t len = 9;
  EXPECT_EQ(tfk_kv_cache_info(cache.c, &len, nullptr, nullptr), TFK_SUCCESS);
  EXPECT_EQ(len, 0u);  // refused appends add nothing
  ASSERT_EQ(tfk_kv_cache_append(cache.c, 3, kv.data(), 16, kv.data(), 16), TFK_SUCCESS);
  EXPECT_EQ(tfk_kv_cache_attention(cache.c, 1, 3, q.data(), 24, o.data(), 24, 0, TFK_MASK_NONE),
            TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("n_heads"), std::string::npos);
  EXPECT_EQ(tfk_kv_cache_attention(cache.c, 1, 2, q.data(), 16, nullptr, 16, 0, TFK_MASK_NONE),
            TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_kv_cache_attention(cache.c, 1, 2, q.data(), 16, o.data(), 16, INFINITY,
                                   TFK_MASK_NONE),
            TFK_INVALID_ARGUMENT);
  // O partly over Q (two queries, O = Q + 1): refused, Q untouched.
  EXPECT_EQ(tfk_kv_cache_attention(cache.c, 2, 2, q.data(), 16, q.data() + 1, 16, 0, TFK_MASK_NONE),
            TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("O overlaps Q"), std::string::npos)
      << tfk_last_error();
  for (float x : q) ASSERT_EQ(x, 1.0f);
  for (float x : o) ASSERT_EQ(x, 3.0f);  // nothing written
  EXPECT_EQ(tfk_kv_cache_truncate(cache.c, 4), TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_kv_cache_truncate(cache.c, 3), TFK_SUCCESS);  // its own length: nothing to do
  EXPECT_EQ(tfk_kv_cache_truncate(cache.c, 1), TFK_SUCCESS);
  EXPECT_EQ(tfk_kv_cache_info(cache.c, &len, nullptr, nullptr), TFK_SUCCESS);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(tfk_kv_cache_info(nullptr, &len, nullptr, nullptr), TFK_INVALID_ARGUMENT);
  tfk_kv_cache_destroy(nullptr);
}

TFK_INSTANTIATE_FOR_EACH_ISA(AttentionTest);
TFK_INSTANTIATE_FOR_EACH_ISA(KvCacheTest);

}  // namespace
}  // namespace tfk_test
