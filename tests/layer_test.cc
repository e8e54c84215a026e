// The composite layers (tfk_mha, tfk_ffn, tfk_block) on every supported ISA.
//
// Each layer is a fixed composition of kernels that their own tests check
// against double-precision references with derived bounds. Here the same
// composition is built naively from the public kernels: separate Q, K and V
// projections, RoPE, attention per KV head on gathered heads, concatenation
// by copying, the output projection, separate norms. It must give the same
// bits, because no kernel's result for an element depends on what is
// computed beside it (one FMA chain per matmul element over k in order; one
// attention query per lane with key blocks from key 0).
// Decoding with a KV cache against one causal pass runs different attention
// kernels (dot products and split merges against transposed tiles): there
// the difference is held to twice the attention bound (tests/attention_ref.h)
// carried through the output projection,
//   |dY_i| <= sum_c 2 B_c |Wo_ci| + 4 u (d_q + 2) sum_c |O_c Wo_ci|,
// the second term for the two projections' own roundings.
#include <tfk/tfk.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "attention_ref.h"
#include "test_util.h"

namespace tfk_test {
namespace {

std::vector<float> Rand(size_t n, float scale, uint32_t seed) {
  std::vector<float> v(n);
  FillUniform(v.data(), n, -scale, scale, seed);
  return v;
}

// Y[M, N] = R + act(X W + bias) with a one-off tfk_linear (the reference's
// projections, one per weight).
void Linear(tfk_layout layout, size_t K, size_t N, const float* W, const float* bias,
            tfk_activation act, size_t M, const float* X, size_t ldx, float* Y, size_t ldy,
            const float* R = nullptr, size_t ldr = 0) {
  tfk_linear* l = nullptr;
  tfk::check(tfk_linear_create(&l, K, N, W, layout == TFK_LAYOUT_KN ? N : K, layout, bias, act));
  tfk::check(tfk_linear_forward(l, M, X, ldx, Y, ldy, R, ldr));
  tfk_linear_destroy(l);
}

struct Mha {
  tfk_mha_config cfg{};
  size_t dq, dkv;
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo;
  Mha(size_t d_model, size_t h, size_t h_kv, size_t d_k, tfk_layout layout, bool bias, int rope,
      bool causal, uint32_t seed)
      : dq(h * d_k), dkv(h_kv * d_k) {
    const float s = 1.0f / std::sqrt(static_cast<float>(d_model));
    wq = Rand(d_model * dq, s, seed), wk = Rand(d_model * dkv, s, seed + 1);
    wv = Rand(d_model * dkv, s, seed + 2), wo = Rand(dq * d_model, s, seed + 3);
    if (bias) {
      bq = Rand(dq, 0.1f, seed + 4), bk = Rand(dkv, 0.1f, seed + 5);
      bv = Rand(dkv, 0.1f, seed + 6), bo = Rand(d_model, 0.1f, seed + 7);
    }
    cfg.d_model = d_model, cfg.n_heads = h, cfg.n_kv_heads = h_kv, cfg.head_dim = d_k;
    cfg.layout = layout;
    cfg.wq = wq.data(), cfg.wk = wk.data(), cfg.wv = wv.data(), cfg.wo = wo.data();
    cfg.bq = bias ? bq.data() : nullptr, cfg.bk = bias ? bk.data() : nullptr;
    cfg.bv = bias ? bv.data() : nullptr, cfg.bo = bias ? bo.data() : nullptr;
    cfg.causal = causal;
    cfg.rope = rope != 0;
    cfg.rope_pairing = rope == 2 ? TFK_ROPE_INTERLEAVED : TFK_ROPE_HALF;
    cfg.rope_dim = rope == 2 ? d_k - 2 : 0;  // interleaved: a partial rotation
    cfg.rope_base = rope == 2 ? 500000.0 : 0.0;
  }

  // Projections and RoPE as the reference does them: q [n, dq], k and v
  // [n, dkv], positions 0 .. n-1.
  void Project(size_t n, const float* X, std::vector<float>& q, std::vector<float>& k,
               std::vector<float>& v) const {
    const size_t d = cfg.d_model, dk = cfg.head_dim;
    q.resize(n * dq), k.resize(n * dkv), v.resize(n * dkv);
    Linear(cfg.layout, d, dq, cfg.wq, cfg.bq, TFK_ACT_NONE, n, X, d, q.data(), dq);
    Linear(cfg.layout, d, dkv, cfg.wk, cfg.bk, TFK_ACT_NONE, n, X, d, k.data(), dkv);
    Linear(cfg.layout, d, dkv, cfg.wv, cfg.bv, TFK_ACT_NONE, n, X, d, v.data(), dkv);
    if (cfg.rope) {
      const size_t rd = cfg.rope_dim ? cfg.rope_dim : dk;
      const double base = cfg.rope_base ? cfg.rope_base : 10000.0;
      tfk::check(tfk_rope(n, cfg.n_heads, dk, rd, cfg.rope_pairing, base, q.data(), dq, 0, nullptr));
      tfk::check(tfk_rope(n, cfg.n_kv_heads, dk, rd, cfg.rope_pairing, base, k.data(), dkv, 0, nullptr));
    }
  }

  // Y = R + MHA(X) built from the kernels: project, attend per KV head on its
  // gathered query heads, scatter ("concat"), output projection.
  void ByParts(size_t n, const float* X, const float* R, float* Y) const {
    std::vector<float> q, k, v;
    Project(n, X, q, k, v);
    const size_t dk = cfg.head_dim, rep = cfg.n_heads / cfg.n_kv_heads, gw = rep * dk;
    std::vector<float> o(n * dq), qg(n * gw), kg(n * dk), vg(n * dk), og(n * gw);
    for (size_t g = 0; g < cfg.n_kv_heads; ++g) {
      for (size_t t = 0; t < n; ++t) {
        std::copy_n(&q[t * dq + g * gw], gw, &qg[t * gw]);
        std::copy_n(&k[t * dkv + g * dk], dk, &kg[t * dk]);
        std::copy_n(&v[t * dkv + g * dk], dk, &vg[t * dk]);
      }
      tfk::check(tfk_attention(n, n, rep, 1, dk, qg.data(), gw, kg.data(), dk, vg.data(), dk,
                               og.data(), gw, cfg.scale,
                               cfg.causal ? TFK_MASK_CAUSAL : TFK_MASK_NONE));
      for (size_t t = 0; t < n; ++t) std::copy_n(&og[t * gw], gw, &o[t * dq + g * gw]);
    }
    Linear(cfg.layout, dq, cfg.d_model, cfg.wo, cfg.bo, TFK_ACT_NONE, n, o.data(), dq, Y,
           cfg.d_model, R, R ? cfg.d_model : 0);
  }
};

struct Workspace {
  std::vector<char> bytes;
  void* data() { return bytes.data() + 1 * 4; }  // deliberately not 64-byte aligned
  size_t size() const { return bytes.size() - 4; }
};

Workspace MhaWorkspace(const tfk_mha* m, size_t n) {
  size_t b = 0;
  tfk::check(tfk_mha_workspace_size(m, n, &b));
  return Workspace{std::vector<char>(b + 4)};
}

class LayerTest : public IsaTest {};

TEST_P(LayerTest, MhaEqualsItsComposition) {
  const size_t d = 48;
  uint32_t seed = 1;
  for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
    for (int rope : {0, 1, 2}) {
      for (bool causal : {false, true}) {
        // MHA (4 x 12 = d_model), GQA 4/2 with head_dim != d_model / h, MQA.
        for (auto heads : {std::array<size_t, 3>{4, 4, 0}, {4, 2, 16}, {6, 1, 8}}) {
          Mha m(d, heads[0], heads[1], heads[2] ? heads[2] : d / heads[0], layout,
                seed % 2 == 0, rope, causal, seed);
          m.cfg.scale = seed % 3 == 0 ? 0.3f : 0.0f;  // given, or 1/sqrt(head_dim)
          tfk_mha* h = nullptr;
          ASSERT_EQ(tfk_mha_create(&h, &m.cfg), TFK_SUCCESS) << tfk_last_error();
          std::unique_ptr<tfk_mha, decltype(&tfk_mha_destroy)> guard(h, tfk_mha_destroy);
          for (size_t n : {1, 5, 37}) {
            const auto X = Rand(n * d, 1.0f, seed + 10), R = Rand(n * d, 1.0f, seed + 11);
            std::vector<float> want(n * d), got(n * d, NAN);
            m.ByParts(n, X.data(), R.data(), want.data());
            Workspace ws = MhaWorkspace(h, n);
            ASSERT_EQ(tfk_mha_forward(h, n, X.data(), d, got.data(), d, R.data(), d, nullptr,
                                      ws.data(), ws.size()),
                      TFK_SUCCESS)
                << tfk_last_error();
            ASSERT_TRUE(SameBits(want.data(), got.data(), n * d))
                << "layout " << layout << " rope " << rope << " causal " << causal << " heads "
                << heads[0] << "/" << heads[1] << " n " << n << " scale " << m.cfg.scale;
          }
          ++seed;
        }
      }
    }
  }
}

// Decoding token by token through a KV cache (and a prompt of several tokens
// first) against one causal pass over the whole sequence.
TEST_P(LayerTest, MhaDecodingWithCacheMatchesFullPass) {
  const size_t d = 64, n = 300, prompt = 40;
  for (auto heads : {std::array<size_t, 2>{4, 4}, {4, 1}}) {
    const Mha m(d, heads[0], heads[1], 16, TFK_LAYOUT_NK, true, 1, true, 3);
    tfk_mha* h = nullptr;
    ASSERT_EQ(tfk_mha_create(&h, &m.cfg), TFK_SUCCESS);
    std::unique_ptr<tfk_mha, decltype(&tfk_mha_destroy)> guard(h, tfk_mha_destroy);
    const auto X = Rand(n * d, 1.0f, 5);
    std::vector<float> full(n * d), inc(n * d);
    Workspace ws = MhaWorkspace(h, n);
    ASSERT_EQ(tfk_mha_forward(h, n, X.data(), d, full.data(), d, nullptr, 0, nullptr, ws.data(),
                              ws.size()),
              TFK_SUCCESS);
    tfk_kv_cache* cache = nullptr;
    ASSERT_EQ(tfk_kv_cache_create(&cache, n, heads[1], 16, TFK_DTYPE_F32), TFK_SUCCESS);
    std::unique_ptr<tfk_kv_cache, decltype(&tfk_kv_cache_destroy)> cg(cache, tfk_kv_cache_destroy);
    ASSERT_EQ(tfk_mha_forward(h, prompt, X.data(), d, inc.data(), d, nullptr, 0, cache, ws.data(),
                              ws.size()),
              TFK_SUCCESS);
    for (size_t t = prompt; t < n; ++t) {
      ASSERT_EQ(tfk_mha_forward(h, 1, &X[t * d], d, &inc[t * d], d, nullptr, 0, cache, ws.data(),
                                ws.size()),
                TFK_SUCCESS)
          << tfk_last_error();
    }
    // The bound: attention bounds from the reference's Q, K, V (the same
    // values both paths attend with), through |Wo|.
    std::vector<float> q, k, v;
    m.Project(n, X.data(), q, k, v);
    const size_t dk = 16, rep = heads[0] / heads[1];
    const float scale = 1.0f / 4.0f;
    std::vector<double> ref, tol, B(m.dq), Oabs(m.dq);
    for (size_t t = 0; t < n; ++t) {
      for (size_t hh = 0; hh < heads[0]; ++hh) {
        const size_t g = hh / rep;
        AttentionRowRef(
            t + 1, dk, scale, [&](size_t kk) { return q[t * m.dq + hh * dk + kk]; },
            [&](size_t j, size_t kk) { return k[j * m.dkv + g * dk + kk]; },
            [&](size_t j, size_t c) { return v[j * m.dkv + g * dk + c]; }, ref, tol);
        for (size_t c = 0; c < dk; ++c) B[hh * dk + c] = tol[c], Oabs[hh * dk + c] = std::fabs(ref[c]);
      }
      for (size_t i = 0; i < d; ++i) {
        double bound = 0;
        for (size_t c = 0; c < m.dq; ++c) {
          const double w = std::fabs(m.wo[i * m.dq + c]);  // NK: wo is [d_model, dq]
          bound += 2 * B[c] * w + 4 * kEps * (m.dq + 2) * Oabs[c] * w;
        }
        ASSERT_NEAR(inc[t * d + i], full[t * d + i], bound + 1e-30) << "t=" << t << " i=" << i;
      }
    }
  }
}

struct Ffn {
  tfk_ffn_config cfg{};
  std::vector<float> w1, w3, w2, b1, b3, b2;
  Ffn(size_t d, size_t d_ff, tfk_activation act, bool gated, tfk_layout layout, uint32_t seed) {
    w1 = Rand(d * d_ff, 1.0f / std::sqrt(float(d)), seed);
    w3 = Rand(d * d_ff, 1.0f / std::sqrt(float(d)), seed + 1);
    w2 = Rand(d_ff * d, 1.0f / std::sqrt(float(d_ff)), seed + 2);
    b1 = Rand(d_ff, 0.1f, seed + 3), b3 = Rand(d_ff, 0.1f, seed + 4), b2 = Rand(d, 0.1f, seed + 5);
    cfg.d_model = d, cfg.d_ff = d_ff, cfg.act = act, cfg.gated = gated, cfg.layout = layout;
    cfg.w1 = w1.data(), cfg.w3 = w3.data(), cfg.w2 = w2.data();
    cfg.b1 = b1.data(), cfg.b3 = b3.data(), cfg.b2 = b2.data();
  }
  void ByParts(size_t n, const float* X, size_t ldx, const float* R, size_t ldr, float* Y,
               size_t ldy) const {
    const size_t d = cfg.d_model, f = cfg.d_ff;
    std::vector<float> hid(n * f), up(n * f);
    if (cfg.gated) {
      Linear(cfg.layout, d, f, cfg.w1, cfg.b1, TFK_ACT_NONE, n, X, ldx, hid.data(), f);
      Linear(cfg.layout, d, f, cfg.w3, cfg.b3, TFK_ACT_NONE, n, X, ldx, up.data(), f);
      tfk::check(tfk_activate(cfg.act, n, f, hid.data(), f, hid.data(), f));
      for (size_t i = 0; i < n * f; ++i) hid[i] *= up[i];
    } else {
      Linear(cfg.layout, d, f, cfg.w1, cfg.b1, cfg.act, n, X, ldx, hid.data(), f);
    }
    Linear(cfg.layout, f, d, cfg.w2, cfg.b2, TFK_ACT_NONE, n, hid.data(), f, Y, ldy, R, ldr);
  }
};

TEST_P(LayerTest, FfnEqualsItsComposition) {
  const size_t d = 40, d_ff = 72;
  uint32_t seed = 50;
  for (tfk_activation act : {TFK_ACT_RELU, TFK_ACT_GELU_ERF, TFK_ACT_GELU_TANH, TFK_ACT_SILU}) {
    for (bool gated : {false, true}) {
      for (tfk_layout layout : {TFK_LAYOUT_KN, TFK_LAYOUT_NK}) {
        const Ffn f(d, d_ff, act, gated, layout, seed++);
        tfk_ffn* h = nullptr;
        ASSERT_EQ(tfk_ffn_create(&h, &f.cfg), TFK_SUCCESS) << tfk_last_error();
        std::unique_ptr<tfk_ffn, decltype(&tfk_ffn_destroy)> guard(h, tfk_ffn_destroy);
        for (size_t n : {1, 3, 29}) {
          const auto X = Rand(n * d, 2.0f, seed), R = Rand(n * d, 1.0f, seed + 1);
          std::vector<float> want(n * d), got = R;
          f.ByParts(n, X.data(), d, R.data(), d, want.data(), d);
          size_t bytes = 0;
          tfk::check(tfk_ffn_workspace_size(h, n, &bytes));
          std::vector<char> ws(bytes);
          // Residual in place: Y = R.
          ASSERT_EQ(tfk_ffn_forward(h, n, X.data(), d, got.data(), d, got.data(), d, ws.data(),
                                    ws.size()),
                    TFK_SUCCESS)
              << tfk_last_error();
          ASSERT_TRUE(SameBits(want.data(), got.data(), n * d))
              << "act " << act << " gated " << gated << " n " << n;
        }
      }
    }
  }
}

struct Block {
  Mha mha;
  Ffn ffn;
  tfk_block_config cfg{};
  std::vector<float> g1, be1, g2, be2;
  // alt: the FFN gated with LayerNorm and plain with RMSNorm (the other way
  // round otherwise), and no gamma or beta (NULL).
  Block(size_t d, bool post_ln, tfk_norm_kind norm, int rope, uint32_t seed, bool alt = false)
      : mha(d, 4, 2, d / 4, TFK_LAYOUT_NK, true, rope, true, seed),
        ffn(d, 3 * d, TFK_ACT_GELU_ERF, (norm == TFK_NORM_RMS) != alt, TFK_LAYOUT_NK, seed + 20) {
    if (!alt) {
      g1 = Rand(d, 1.0f, seed + 30), be1 = Rand(d, 0.2f, seed + 31);
      g2 = Rand(d, 1.0f, seed + 32), be2 = Rand(d, 0.2f, seed + 33);
    }
    cfg.attn = mha.cfg, cfg.ffn = ffn.cfg;
    cfg.post_ln = post_ln, cfg.norm = norm, cfg.eps = 1e-5f;
    cfg.norm1_gamma = Ptr(g1), cfg.norm1_beta = Ptr(be1);
    cfg.norm2_gamma = Ptr(g2), cfg.norm2_beta = Ptr(be2);
  }
  static const float* Ptr(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
  void Norm(size_t n, const float* x, const std::vector<float>& g, const std::vector<float>& b,
            float* y) const {
    const size_t d = cfg.attn.d_model;
    if (cfg.norm == TFK_NORM_LAYER) {
      tfk::check(tfk_layernorm(n, d, x, d, Ptr(g), Ptr(b), cfg.eps, y, d));
    } else {
      tfk::check(tfk_rmsnorm(n, d, x, d, Ptr(g), cfg.eps, y, d));
    }
  }
  // The block from its parts (tfk_mha by parts, norms, FFN by parts).
  void ByParts(size_t n, const float* X, float* Y) const {
    const size_t d = cfg.attn.d_model;
    std::vector<float> t(n * d), h(n * d);
    if (!cfg.post_ln) {
      Norm(n, X, g1, be1, t.data());
      mha.ByParts(n, t.data(), X, h.data());
      Norm(n, h.data(), g2, be2, t.data());
      ffn.ByParts(n, t.data(), d, h.data(), d, Y, d);
    } else {
      mha.ByParts(n, X, X, t.data());
      Norm(n, t.data(), g1, be1, h.data());
      ffn.ByParts(n, h.data(), d, h.data(), d, t.data(), d);
      Norm(n, t.data(), g2, be2, Y);
    }
  }
};

TEST_P(LayerTest, BlockPreAndPostLnEqualTheirComposition) {
  const size_t d = 32;
  uint32_t seed = 70;
  for (bool post_ln : {false, true}) {
    for (tfk_norm_kind norm : {TFK_NORM_LAYER, TFK_NORM_RMS}) {
      for (int rope : {0, 1}) {
        const Block b(d, post_ln, norm, rope, seed++, /*alt=*/rope == 1);
        tfk_block* h = nullptr;
        ASSERT_EQ(tfk_block_create(&h, &b.cfg), TFK_SUCCESS) << tfk_last_error();
        std::unique_ptr<tfk_block, decltype(&tfk_block_destroy)> guard(h, tfk_block_destroy);
        for (size_t n : {1, 17, 70}) {
          const auto X = Rand(n * d, 1.0f, seed);
          std::vector<float> want(n * d), got = X;
          b.ByParts(n, X.data(), want.data());
          size_t bytes = 0;
          tfk::check(tfk_block_workspace_size(h, n, &bytes));
          std::vector<char> ws(bytes + 1);
          // In place (Y = X), workspace at an odd offset.
          ASSERT_EQ(tfk_block_forward(h, n, got.data(), d, got.data(), d, nullptr, ws.data() + 1,
                                      bytes),
                    TFK_SUCCESS)
              << tfk_last_error();
          ASSERT_TRUE(SameBits(want.data(), got.data(), n * d))
              << "post_ln " << post_ln << " norm " << norm << " rope and alt " << rope
              << " n " << n;
        }
      }
    }
  }
}

// A block decoding through its cache is the same as the composition with
// tfk_mha_forward on the same cache: the block's plumbing adds nothing.
TEST_P(LayerTest, BlockDecodingStepsEqualTheirComposition) {
  const size_t d = 32, n = 20;
  for (bool post_ln : {false, true}) {
    const Block b(d, post_ln, TFK_NORM_LAYER, 1, 90);
    tfk_block* h = nullptr;
    tfk_mha* m = nullptr;
    tfk_ffn* f = nullptr;
    ASSERT_EQ(tfk_block_create(&h, &b.cfg), TFK_SUCCESS);
    ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS);
    ASSERT_EQ(tfk_ffn_create(&f, &b.ffn.cfg), TFK_SUCCESS);
    tfk_kv_cache *c1 = nullptr, *c2 = nullptr;
    tfk::check(tfk_kv_cache_create(&c1, n, 2, d / 4, TFK_DTYPE_BF16));
    tfk::check(tfk_kv_cache_create(&c2, n, 2, d / 4, TFK_DTYPE_BF16));
    std::vector<char> ws(1 << 20);
    const auto X = Rand(n * d, 1.0f, 91);
    for (size_t t = 0; t < n; ++t) {
      std::vector<float> y(d), tt(d), hh(d), want(d);
      ASSERT_EQ(tfk_block_forward(h, 1, &X[t * d], d, y.data(), d, c1, ws.data(), ws.size()),
                TFK_SUCCESS)
          << tfk_last_error();
      const float* x = &X[t * d];
      if (!post_ln) {
        b.Norm(1, x, b.g1, b.be1, tt.data());
        tfk::check(tfk_mha_forward(m, 1, tt.data(), d, hh.data(), d, x, d, c2, ws.data(), ws.size()));
        b.Norm(1, hh.data(), b.g2, b.be2, tt.data());
        tfk::check(tfk_ffn_forward(f, 1, tt.data(), d, want.data(), d, hh.data(), d, ws.data(), ws.size()));
      } else {
        tfk::check(tfk_mha_forward(m, 1, x, d, tt.data(), d, x, d, c2, ws.data(), ws.size()));
        b.Norm(1, tt.data(), b.g1, b.be1, hh.data());
        tfk::check(tfk_ffn_forward(f, 1, hh.data(), d, tt.data(), d, hh.data(), d, ws.data(), ws.size()));
        b.Norm(1, tt.data(), b.g2, b.be2, want.data());
      }
      ASSERT_TRUE(SameBits(want.data(), y.data(), d)) << "t=" << t << " post_ln " << post_ln;
    }
    tfk_kv_cache_destroy(c1);
    tfk_kv_cache_destroy(c2);
    tfk_block_destroy(h);
    tfk_mha_destroy(m);
    tfk_ffn_destroy(f);
  }
}

// Caches of n sequences with prompts of different lengths (1 + 7i mod 23
// tokens), filled by tfk_block_forward; each has room for `steps` more.
std::vector<tfk_kv_cache*> PrefilledCaches(tfk_block* h, size_t n, size_t d, tfk_dtype dtype,
                                           size_t steps, uint32_t seed) {
  std::vector<tfk_kv_cache*> caches(n);
  std::vector<char> ws;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = 1 + (7 * i) % 23;
    tfk::check(tfk_kv_cache_create(&caches[i], len + steps, 2, d / 4, dtype));
    const auto X = Rand(len * d, 1.0f, seed + static_cast<uint32_t>(i));
    std::vector<float> y(len * d);
    size_t bytes = 0;
    tfk::check(tfk_block_workspace_size(h, len, &bytes));
    ws.resize(bytes);
    tfk::check(tfk_block_forward(h, len, X.data(), d, y.data(), d, caches[i], ws.data(), bytes));
  }
  return caches;
}

void DestroyCaches(const std::vector<tfk_kv_cache*>& caches) {
  for (tfk_kv_cache* c : caches) tfk_kv_cache_destroy(c);
}

// A batched decoding step (one token of each of n sequences, each with its
// own cache, positions and lengths all different) gives the bits of n
// one-token steps, through the block (in place) and through the MHA alone
// (with a residual), for both cache types, batches that span several row
// tiles of the matmul, and 1 or 2 threads; the caches grow by one token.
TEST_P(LayerTest, BatchedDecodingEqualsOneSequenceAtATime) {
  const size_t d = 32, steps = 2;
  uint32_t seed = 300;
  for (bool post_ln : {false, true}) {
    const Block b(d, post_ln, post_ln ? TFK_NORM_LAYER : TFK_NORM_RMS, post_ln ? 2 : 1, seed++);
    tfk_block* h = nullptr;
    tfk_mha* m = nullptr;
    ASSERT_EQ(tfk_block_create(&h, &b.cfg), TFK_SUCCESS) << tfk_last_error();
    ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS) << tfk_last_error();
    for (tfk_dtype dtype : {TFK_DTYPE_F32, TFK_DTYPE_BF16}) {
      for (size_t n : {1, 3, 8, 12, 17}) {  // 8 and 12: AVX-512's split row tiles
        for (int threads : {1, 2}) {
          SCOPED_TRACE(testing::Message() << "post_ln " << post_ln << " dtype " << dtype << " n "
                                          << n << " threads " << threads);
          const auto batch = PrefilledCaches(h, n, d, dtype, 2 * steps, seed);
          const auto one = PrefilledCaches(h, n, d, dtype, 2 * steps, seed);
          size_t bb = 0, mb = 0;
          tfk::check(tfk_block_workspace_size(h, n, &bb));
          tfk::check(tfk_mha_workspace_size(m, n, &mb));
          std::vector<char> ws(std::max(bb, mb) + 3);
          for (size_t step = 0; step < steps; ++step) {
            const auto X = Rand(n * d, 1.0f, seed + 100 + static_cast<uint32_t>(step));
            const auto R = Rand(n * d, 1.0f, seed + 200 + static_cast<uint32_t>(step));
            std::vector<float> got = X, want(n * d), got_m(n * d), want_m(n * d);
            WithThreads(threads, [&] {
              tfk::check(tfk_block_forward_batch(h, n, got.data(), d, got.data(), d, batch.data(),
                                                 ws.data() + 3, bb));
              tfk::check(tfk_mha_forward_batch(m, n, X.data(), d, got_m.data(), d, R.data(), d,
                                               batch.data(), ws.data() + 1, mb));
              for (size_t i = 0; i < n; ++i) {
                tfk::check(tfk_block_forward(h, 1, &X[i * d], d, &want[i * d], d, one[i],
                                             ws.data(), bb));
                tfk::check(tfk_mha_forward(m, 1, &X[i * d], d, &want_m[i * d], d, &R[i * d], d,
                                           one[i], ws.data(), mb));
              }
            });
            ASSERT_TRUE(SameBits(want.data(), got.data(), n * d)) << "block, step " << step;
            ASSERT_TRUE(SameBits(want_m.data(), got_m.data(), n * d)) << "mha, step " << step;
          }
          for (size_t i = 0; i < n; ++i) {
            size_t len_b = 0, len_o = 0;
            tfk::check(tfk_kv_cache_info(batch[i], &len_b, nullptr, nullptr));
            tfk::check(tfk_kv_cache_info(one[i], &len_o, nullptr, nullptr));
            ASSERT_EQ(len_b, 1 + (7 * i) % 23 + 2 * steps);
            ASSERT_EQ(len_b, len_o);
          }
          DestroyCaches(batch);
          DestroyCaches(one);
        }
      }
    }
    tfk_mha_destroy(m);
    tfk_block_destroy(h);
  }
}

// A batch's caches are checked before anything is written: no array, a
// NULL entry, one cache twice, one of another shape or full; Y, the
// workspace and every cache are left as they were.
TEST_P(LayerTest, BatchedDecodingRefusals) {
  const size_t d = 32, n = 4;
  const Block b(d, false, TFK_NORM_RMS, 1, 400);
  tfk_block* h = nullptr;
  tfk_mha* m = nullptr;
  ASSERT_EQ(tfk_block_create(&h, &b.cfg), TFK_SUCCESS);
  ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS);
  auto caches = PrefilledCaches(h, n, d, TFK_DTYPE_F32, 1, 401);
  tfk_kv_cache* other = nullptr;  // 2 KV heads of d / 2: the wrong shape
  tfk::check(tfk_kv_cache_create(&other, 8, 2, d / 2, TFK_DTYPE_F32));
  tfk_kv_cache* full = nullptr;
  tfk::check(tfk_kv_cache_create(&full, 1, 2, d / 4, TFK_DTYPE_F32));
  const auto one_token = Rand(d, 1.0f, 402);
  std::vector<float> unused(d);
  std::vector<char> ws0(1 << 16);
  tfk::check(tfk_block_forward(h, 1, one_token.data(), d, unused.data(), d, full, ws0.data(),
                               ws0.size()));
  const auto X = Rand(n * d, 1.0f, 403);
  std::vector<float> Y(n * d, 7.0f);
  std::vector<char> ws(1 << 16, 5);
  const auto before = CacheLengths(caches);
  const auto refused = [&](tfk_kv_cache* const* list, const char* needle) {
    EXPECT_EQ(tfk_block_forward_batch(h, n, X.data(), d, Y.data(), d, list, ws.data(), ws.size()),
              TFK_INVALID_ARGUMENT)
        << needle;
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos) << tfk_last_error();
    EXPECT_NE(std::string(tfk_last_error()).find("tfk_block_forward_batch"), std::string::npos);
    EXPECT_EQ(tfk_mha_forward_batch(m, n, X.data(), d, Y.data(), d, nullptr, 0, list, ws.data(),
                                    ws.size()),
              TFK_INVALID_ARGUMENT)
        << needle;
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos) << tfk_last_error();
    for (float y : Y) ASSERT_EQ(y, 7.0f) << needle;
    for (char c : ws) ASSERT_EQ(c, 5) << needle;
    EXPECT_EQ(CacheLengths(caches), before) << needle;
  };
  refused(nullptr, "caches is NULL");
  std::vector<tfk_kv_cache*> list = caches;
  list[2] = nullptr;
  refused(list.data(), "caches[2] is NULL");
  list = caches, list[3] = caches[1];
  refused(list.data(), "caches[1] and caches[3] are the same cache");
  list = caches, list[1] = other;
  refused(list.data(), "caches[1]: the cache holds 2 KV heads of 16");
  list = caches, list[3] = full;
  refused(list.data(), "caches[3]: the cache (length 1, capacity 1) has no room");
  // The array is read as pointers: aligned as they are.
  std::vector<char> unaligned((n + 1) * sizeof(tfk_kv_cache*));
  char* const half_off = unaligned.data() + alignof(tfk_kv_cache*) / 2;
  std::memcpy(half_off, caches.data(), n * sizeof(tfk_kv_cache*));
  refused(reinterpret_cast<tfk_kv_cache* const*>(half_off), "caches is not");
  // The array inside what the call writes: Y, the workspace.
  const auto lie_in = [&](void* at) {
    std::memcpy(at, caches.data(), n * sizeof(tfk_kv_cache*));
    return static_cast<tfk_kv_cache* const*>(at);
  };
  std::vector<float> y_before = Y;
  std::vector<char> ws_before = ws;
  const auto refused_in = [&](void* at, const char* needle) {
    tfk_kv_cache* const* in = lie_in(at);
    y_before = Y, ws_before = ws;  // the array's bytes, to be left as they are
    EXPECT_EQ(tfk_block_forward_batch(h, n, X.data(), d, Y.data(), d, in, ws.data(), ws.size()),
              TFK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos) << tfk_last_error();
    EXPECT_EQ(tfk_mha_forward_batch(m, n, X.data(), d, Y.data(), d, nullptr, 0, in, ws.data(),
                                    ws.size()),
              TFK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos) << tfk_last_error();
    // Bytes, not floats: pointer bytes read as floats can be NaN, which no
    // float compares equal to, whatever the call did.
    EXPECT_EQ(std::memcmp(Y.data(), y_before.data(), Y.size() * sizeof(float)), 0) << needle;
    EXPECT_EQ(ws, ws_before);
    EXPECT_EQ(CacheLengths(caches), before) << needle;
  };
  refused_in(Y.data() + d + 2, "the caches array overlaps Y");
  refused_in(ws.data() + 200, "the caches array overlaps the workspace");
  tfk_kv_cache_destroy(other);
  tfk_kv_cache_destroy(full);
  DestroyCaches(caches);
  tfk_mha_destroy(m);
  tfk_block_destroy(h);
}

TEST_P(LayerTest, SameBitsForAnyThreadCount) {
  const size_t d = 64, n = 150;
  const Block b(d, false, TFK_NORM_RMS, 1, 7);
  tfk_block* h = nullptr;
  ASSERT_EQ(tfk_block_create(&h, &b.cfg), TFK_SUCCESS);
  std::unique_ptr<tfk_block, decltype(&tfk_block_destroy)> guard(h, tfk_block_destroy);
  size_t bytes = 0;
  tfk::check(tfk_block_workspace_size(h, n, &bytes));
  std::vector<char> ws(bytes);
  const auto X = Rand(n * d, 1.0f, 8);
  std::vector<float> first;
  for (int threads : {1, 2, 7}) {
    std::vector<float> y(n * d);
    WithThreads(threads, [&] {
      tfk::check(tfk_block_forward(h, n, X.data(), d, y.data(), d, nullptr, ws.data(), bytes));
    });
    if (first.empty()) first = y;
    ASSERT_TRUE(SameBits(first.data(), y.data(), n * d)) << threads;
  }
}

// Each forward stays inside the *_workspace_size(n) bytes it is given, at
// any alignment of the workspace (the bytes after it are left as they were),
// and its result does not depend on where the workspace lies.
TEST_P(LayerTest, ForwardStaysInsideItsWorkspace) {
  const size_t d = 32, n = 7;
  const auto X = Rand(n * d, 1.0f, 90);
  for (bool gated : {false, true}) {
    const Block b(d, false, gated ? TFK_NORM_RMS : TFK_NORM_LAYER, 1, 91);
    tfk_mha* m = nullptr;
    tfk_ffn* f = nullptr;
    tfk_block* blk = nullptr;
    ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS);
    std::unique_ptr<tfk_mha, decltype(&tfk_mha_destroy)> gm(m, tfk_mha_destroy);
    ASSERT_EQ(tfk_ffn_create(&f, &b.ffn.cfg), TFK_SUCCESS);
    std::unique_ptr<tfk_ffn, decltype(&tfk_ffn_destroy)> gf(f, tfk_ffn_destroy);
    ASSERT_EQ(tfk_block_create(&blk, &b.cfg), TFK_SUCCESS);
    std::unique_ptr<tfk_block, decltype(&tfk_block_destroy)> gb(blk, tfk_block_destroy);
    size_t need[5];
    tfk::check(tfk_mha_workspace_size(m, n, &need[0]));
    tfk::check(tfk_ffn_workspace_size(f, n, &need[1]));
    tfk::check(tfk_block_workspace_size(blk, n, &need[2]));
    need[3] = need[0], need[4] = need[2];  // the batched MHA and block
    // Batched decoding: each run appends a token to every cache, which is
    // cut back to its prompt first.
    const auto caches = PrefilledCaches(blk, n, d, TFK_DTYPE_F32, 1, 92);
    const auto run = [&](int layer, void* ws, size_t bytes, float* Y) {
      for (size_t i = 0; i < n; ++i) tfk::check(tfk_kv_cache_truncate(caches[i], 1 + (7 * i) % 23));
      switch (layer) {
        case 0: return tfk_mha_forward(m, n, X.data(), d, Y, d, nullptr, 0, nullptr, ws, bytes);
        case 1: return tfk_ffn_forward(f, n, X.data(), d, Y, d, nullptr, 0, ws, bytes);
        case 2: return tfk_block_forward(blk, n, X.data(), d, Y, d, nullptr, ws, bytes);
        case 3:
          return tfk_mha_forward_batch(m, n, X.data(), d, Y, d, nullptr, 0, caches.data(), ws,
                                       bytes);
        default:
          return tfk_block_forward_batch(blk, n, X.data(), d, Y, d, caches.data(), ws, bytes);
      }
    };
    for (int layer : {0, 1, 2, 3, 4}) {
      std::vector<float> want(n * d), got(n * d);
      std::vector<char> roomy(need[layer] + 4096);
      ASSERT_EQ(run(layer, roomy.data(), roomy.size(), want.data()), TFK_SUCCESS);
      for (size_t offset : {1, 4, 60, 63, 64}) {
        const size_t canary = 4096;
        std::vector<char> mem(offset + need[layer] + canary, 0x5A);
        ASSERT_EQ(run(layer, mem.data() + offset, need[layer], got.data()), TFK_SUCCESS);
        for (size_t i = offset + need[layer]; i < mem.size(); ++i) {
          ASSERT_EQ(mem[i], 0x5A) << "layer " << layer << " offset " << offset << ": byte "
                                  << i - offset - need[layer] << " past the workspace written";
        }
        for (size_t i = 0; i < offset; ++i) ASSERT_EQ(mem[i], 0x5A) << "before the workspace";
        ASSERT_TRUE(SameBits(want.data(), got.data(), n * d)) << "layer " << layer;
      }
    }
    DestroyCaches(caches);
  }
}

TEST_P(LayerTest, Errors) {
  const Block b(32, false, TFK_NORM_LAYER, 1, 1);
  const auto expect = [](tfk_status got, const char* needle) {
    EXPECT_EQ(got, TFK_INVALID_ARGUMENT) << needle;
    EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos) << tfk_last_error();
  };
  tfk_mha* m = nullptr;
  tfk_mha_config mc = b.mha.cfg;
  mc.n_kv_heads = 3;
  expect(tfk_mha_create(&m, &mc), "n_kv_heads");
  mc = b.mha.cfg, mc.wk = nullptr;
  expect(tfk_mha_create(&m, &mc), "wk");
  mc = b.mha.cfg, mc.rope_dim = 7;
  expect(tfk_mha_create(&m, &mc), "rope_dim");
  // Refused at create, not by tfk_rope inside forward (after the projection
  // has written the caller's workspace).
  for (double base : {0.5, 1.0, -1e4, static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
    mc = b.mha.cfg, mc.rope = 1, mc.rope_base = base;
    expect(tfk_mha_create(&m, &mc), "rope_base");
  }
  mc = b.mha.cfg, mc.scale = NAN;
  expect(tfk_mha_create(&m, &mc), "scale");
  mc = b.mha.cfg, mc.head_dim = 0, mc.n_heads = 5, mc.n_kv_heads = 5;
  expect(tfk_mha_create(&m, &mc), "head_dim");
  // Past the largest head: named as given, or by what it came from.
  mc = b.mha.cfg, mc.d_model = 516, mc.head_dim = 0, mc.n_heads = 2, mc.n_kv_heads = 2;
  expect(tfk_mha_create(&m, &mc), "head_dim (258 = d_model / n_heads) > 256");
  mc = b.mha.cfg, mc.head_dim = 258;
  expect(tfk_mha_create(&m, &mc), "head_dim (258) > 256");
  tfk_ffn* f = nullptr;
  tfk_ffn_config fc = b.ffn.cfg;
  fc.act = TFK_ACT_NONE;
  expect(tfk_ffn_create(&f, &fc), "act");
  fc = b.ffn.cfg, fc.gated = 1, fc.w3 = nullptr;
  expect(tfk_ffn_create(&f, &fc), "w3");
  // Weights, biases and norm parameters are read as floats when they are
  // copied: each is checked, by name, before the copy.
  const auto misaligned = [](const float* p) {
    return reinterpret_cast<const float*>(reinterpret_cast<const char*>(p) + 2);
  };
  mc = b.mha.cfg, mc.wv = misaligned(mc.wv);
  expect(tfk_mha_create(&m, &mc), "wv is not 4-byte aligned");
  mc = b.mha.cfg, mc.bo = misaligned(mc.wo);
  expect(tfk_mha_create(&m, &mc), "bo is not 4-byte aligned");
  fc = b.ffn.cfg, fc.w2 = misaligned(fc.w2);
  expect(tfk_ffn_create(&f, &fc), "w2 is not 4-byte aligned");
  fc = b.ffn.cfg, fc.gated = 1, fc.w3 = fc.w1, fc.b3 = misaligned(fc.w1);
  expect(tfk_ffn_create(&f, &fc), "b3 is not 4-byte aligned");
  tfk_block_config bc = b.cfg;
  bc.ffn.d_model = 16;
  tfk_block* blk = nullptr;
  expect(tfk_block_create(&blk, &bc), "d_model");
  bc = b.cfg, bc.attn.n_heads = 0;
  expect(tfk_block_create(&blk, &bc), "n_heads");
  bc = b.cfg, bc.norm2_gamma = misaligned(bc.ffn.w1);
  expect(tfk_block_create(&blk, &bc), "tfk_block_create: norm2_gamma is not 4-byte aligned");
  bc = b.cfg, bc.norm1_beta = misaligned(bc.ffn.w1);
  expect(tfk_block_create(&blk, &bc), "norm1_beta is not 4-byte aligned");
  // d_model is checked before the norm parameters (d_model floats each) are
  // read: a d_model too large with short gamma arrays is an error, not a
  // read past them or an exception through the C API.
  bc = b.cfg, bc.attn.d_model = bc.ffn.d_model = (size_t{1} << 25) + 32;
  expect(tfk_block_create(&blk, &bc), "d_model");
  bc.attn.d_model = bc.ffn.d_model = (size_t{1} << 61) + 32;
  expect(tfk_block_create(&blk, &bc), "d_model");
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(f, nullptr);
  EXPECT_EQ(blk, nullptr);

  ASSERT_EQ(tfk_block_create(&blk, &b.cfg), TFK_SUCCESS);
  std::unique_ptr<tfk_block, decltype(&tfk_block_destroy)> guard(blk, tfk_block_destroy);
  size_t bytes = 0;
  // n whose T[n, d_model] alone wraps size_t: refused, not a wrapped size.
  expect(tfk_block_workspace_size(blk, (size_t{1} << 58) - 1, &bytes), "n (");
  // The forward names itself, not the workspace query it asks.
  expect(tfk_block_forward(blk, size_t{1} << 59, nullptr, 32, nullptr, 32, nullptr, nullptr, 0),
         "tfk_block_forward: n (");
  ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS);
  expect(tfk_mha_forward(m, size_t{1} << 59, nullptr, 32, nullptr, 32, nullptr, 0, nullptr,
                         nullptr, 0),
         "tfk_mha_forward: n (");
  tfk_mha_destroy(m);
  ASSERT_EQ(tfk_ffn_create(&f, &b.ffn.cfg), TFK_SUCCESS);
  expect(tfk_ffn_forward(f, size_t{1} << 59, nullptr, 32, nullptr, 32, nullptr, 0, nullptr, 0),
         "tfk_ffn_forward: n (");
  tfk_ffn_destroy(f);
  // n past attention's 2^31 - 1 is refused before the projections write the
  // workspace (the addresses are never touched: 2^31 rows of 32 floats, far
  // apart in the address space, checked by arithmetic alone).
  {
    const size_t big = size_t{1} << 31;
    const auto at = [](uint64_t a) { return reinterpret_cast<float*>(static_cast<uintptr_t>(a)); };
    const uint64_t base = uint64_t{1} << 44;
    float* X = at(base);
    float* Yb = at(base + (uint64_t{1} << 40));
    float* ws_big = at(base + (uint64_t{1} << 42));
    size_t need = 0;
    tfk::check(tfk_block_workspace_size(blk, big, &need));
    expect(tfk_block_forward(blk, big, X, 32, Yb, 32, nullptr, ws_big, need),
           "n (2147483648) exceeds");
    ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS);
    tfk::check(tfk_mha_workspace_size(m, big, &need));
    expect(tfk_mha_forward(m, big, X, 32, Yb, 32, nullptr, 0, nullptr, ws_big, need),
           "n (2147483648) exceeds");
    tfk_mha_destroy(m);
  }
  tfk::check(tfk_block_workspace_size(blk, 4, &bytes));
  std::vector<char> ws(bytes, 0x5A);
  std::vector<float> x(4 * 32, 1.0f), y(4 * 32, 5.0f);
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, nullptr, ws.data(), bytes - 1),
         "workspace_bytes");
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, nullptr, nullptr, bytes),
         "workspace");
  expect(tfk_block_forward(blk, 4, x.data(), 31, y.data(), 32, nullptr, ws.data(), bytes), "X");
  expect(tfk_block_forward(blk, 4, x.data(), 32, x.data() + 1, 32, nullptr, ws.data(), bytes),
         "overlaps");
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, nullptr, x.data(), bytes),
         "workspace overlaps");
  // R or Y inside the workspace (tfk.h: it must not overlap X, Y or R), for
  // each layer: refused, nothing written, the workspace included.
  {
    ASSERT_EQ(tfk_ffn_create(&f, &b.ffn.cfg), TFK_SUCCESS);
    ASSERT_EQ(tfk_mha_create(&m, &b.mha.cfg), TFK_SUCCESS);
    size_t need_f = 0, need_m = 0;
    tfk::check(tfk_ffn_workspace_size(f, 4, &need_f));
    tfk::check(tfk_mha_workspace_size(m, 4, &need_m));
    std::vector<char> w(std::max(need_f, need_m) + 1024, 0x5A);
    float* inside = reinterpret_cast<float*>(w.data()) + 16;
    expect(tfk_ffn_forward(f, 4, x.data(), 32, y.data(), 32, inside, 32, w.data(), need_f),
           "workspace overlaps");
    expect(tfk_ffn_forward(f, 4, x.data(), 32, inside, 32, nullptr, 0, w.data(), need_f),
           "workspace overlaps");
    expect(tfk_mha_forward(m, 4, x.data(), 32, y.data(), 32, inside, 32, nullptr, w.data(), need_m),
           "workspace overlaps");
    expect(tfk_mha_forward(m, 4, x.data(), 32, inside, 32, nullptr, 0, nullptr, w.data(), need_m),
           "workspace overlaps");
    for (char c : w) ASSERT_EQ(c, 0x5A);
    for (float v : y) ASSERT_EQ(v, 5.0f);
    tfk_ffn_destroy(f);
    tfk_mha_destroy(m);
    f = nullptr, m = nullptr;
  }
  tfk_kv_cache* cache = nullptr;
  tfk::check(tfk_kv_cache_create(&cache, 3, 2, 8, TFK_DTYPE_F32));
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, cache, ws.data(), bytes), "room");
  tfk_kv_cache_destroy(cache);
  tfk::check(tfk_kv_cache_create(&cache, 16, 1, 8, TFK_DTYPE_F32));  // the layer has 2 KV heads
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, cache, ws.data(), bytes),
         "KV heads");
  tfk_kv_cache_destroy(cache);
  tfk::check(tfk_kv_cache_create(&cache, 16, 2, 4, TFK_DTYPE_F32));  // head_dim 8 in the layer
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, cache, ws.data(), bytes),
         "KV heads");
  tfk_kv_cache_destroy(cache);
  // A cache that holds two tokens keeps them, and only them, after a failed
  // forward (too small a workspace, an X that overlaps Y).
  tfk::check(tfk_kv_cache_create(&cache, 16, 2, 8, TFK_DTYPE_F32));
  const std::vector<float> kv(2 * 16, 0.5f);
  tfk::check(tfk_kv_cache_append(cache, 2, kv.data(), 16, kv.data(), 16));
  expect(tfk_block_forward(blk, 4, x.data(), 32, y.data(), 32, cache, ws.data(), bytes - 1),
         "workspace_bytes");
  expect(tfk_block_forward(blk, 4, x.data(), 32, x.data() + 1, 32, cache, ws.data(), bytes),
         "overlaps");
  size_t length = 0;
  tfk::check(tfk_kv_cache_info(cache, &length, nullptr, nullptr));
  EXPECT_EQ(length, 2u);
  tfk_kv_cache_destroy(cache);
  for (float v : y) ASSERT_EQ(v, 5.0f);  // nothing written, not even the workspace
  for (float v : x) ASSERT_EQ(v, 1.0f);  // nor X, where Y or the workspace pointed into it
  for (char c : ws) ASSERT_EQ(c, 0x5A);
}

TEST_P(LayerTest, CppWrappers) {
  const Block b(32, true, TFK_NORM_LAYER, 1, 3);
  tfk::block blk(b.cfg);
  tfk::kv_cache cache(8, 2, 8, TFK_DTYPE_BF16);
  std::vector<char> ws(blk.workspace_size(8));
  const auto X = Rand(8 * 32, 1.0f, 4);
  std::vector<float> y1(8 * 32), y2(8 * 32);
  blk.forward(5, X.data(), y1.data(), ws.data(), ws.size(), &cache);
  EXPECT_EQ(cache.length(), 5u);
  cache.truncate(0);
  blk.forward(5, X.data(), y2.data(), ws.data(), ws.size(), &cache);
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), 5 * 32));
  try {
    blk.forward(4, X.data(), y1.data(), ws.data(), ws.size(), &cache);  // 9 > capacity 8
    FAIL() << "no exception";
  } catch (const tfk::error& e) {
    EXPECT_EQ(e.status(), TFK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("no room"), std::string::npos) << e.what();
  }
  tfk_block_config bad = b.cfg;
  bad.eps = -1.0f;
  EXPECT_THROW(tfk::block{bad}, tfk::error);
  // tfk::attention is tfk_attention on dense arrays.
  const auto q = Rand(6 * 16, 1.0f, 5), kv = Rand(6 * 8, 1.0f, 6);
  std::vector<float> o1(6 * 16), o2(6 * 16);
  tfk::attention(6, 6, 2, 1, 8, q.data(), kv.data(), kv.data(), o1.data(), TFK_MASK_CAUSAL);
  ASSERT_EQ(tfk_attention(6, 6, 2, 1, 8, q.data(), 16, kv.data(), 8, kv.data(), 8, o2.data(), 16,
                          0.0f, TFK_MASK_CAUSAL),
            TFK_SUCCESS);
  EXPECT_TRUE(SameBits(o1.data(), o2.data(), o1.size()));
  // tfk::mha, tfk::ffn and the cache's append and attention wrap the C calls.
  const tfk::mha m(b.mha.cfg);
  const tfk::ffn f(b.ffn.cfg);
  std::vector<char> wm(m.workspace_size(5)), wf(f.workspace_size(5));
  std::vector<float> a1(5 * 32), a2(5 * 32);
  m.forward(5, X.data(), a1.data(), X.data(), wm.data(), wm.size());
  tfk::check(tfk_mha_forward(m.get(), 5, X.data(), 32, a2.data(), 32, X.data(), 32, nullptr,
                             wm.data(), wm.size()));
  EXPECT_TRUE(SameBits(a1.data(), a2.data(), a1.size()));
  f.forward(5, X.data(), a1.data(), nullptr, wf.data(), wf.size());
  tfk::check(tfk_ffn_forward(f.get(), 5, X.data(), 32, a2.data(), 32, nullptr, 0, wf.data(),
                             wf.size()));
  EXPECT_TRUE(SameBits(a1.data(), a2.data(), a1.size()));
  tfk::kv_cache c(8, 2, 8);  // the layer's 2 KV heads of 8
  const auto k3 = Rand(3 * 16, 1.0f, 7), v3 = Rand(3 * 16, 1.0f, 8), q3 = Rand(3 * 32, 1.0f, 9);
  c.append(3, k3.data(), v3.data());
  EXPECT_EQ(c.length(), 3u);
  EXPECT_EQ(c.capacity(), 8u);
  EXPECT_EQ(c.bytes(), 2u * 8 * 16 * sizeof(float));
  c.attention(3, 4, q3.data(), a1.data());
  ASSERT_EQ(tfk_attention(3, 3, 4, 2, 8, q3.data(), 32, k3.data(), 16, v3.data(), 16, a2.data(),
                          32, 0.0f, TFK_MASK_CAUSAL),
            TFK_SUCCESS);
  EXPECT_TRUE(SameBits(a1.data(), a2.data(), 3 * 32));
  EXPECT_THROW(c.append(6, k3.data(), v3.data()), tfk::error);  // 9 > capacity 8
  // forward_batch wraps the batched calls: two sequences, one token each.
  tfk::kv_cache s0(4, 2, 8), s1(4, 2, 8), t0(4, 2, 8), t1(4, 2, 8);
  tfk_kv_cache* const mine[2] = {s0.get(), s1.get()};
  tfk_kv_cache* const theirs[2] = {t0.get(), t1.get()};
  m.forward_batch(2, X.data(), a1.data(), nullptr, wm.data(), wm.size(), mine);
  tfk::check(tfk_mha_forward_batch(m.get(), 2, X.data(), 32, a2.data(), 32, nullptr, 0, theirs,
                                   wm.data(), wm.size()));
  EXPECT_TRUE(SameBits(a1.data(), a2.data(), 2 * 32));
  blk.forward_batch(2, X.data(), a1.data(), ws.data(), ws.size(), mine);
  tfk::check(tfk_block_forward_batch(blk.get(), 2, X.data(), 32, a2.data(), 32, theirs, ws.data(),
                                     ws.size()));
  EXPECT_TRUE(SameBits(a1.data(), a2.data(), 2 * 32));
  EXPECT_EQ(s0.length(), 2u);
  tfk_kv_cache* const twice[2] = {s0.get(), s0.get()};
  EXPECT_THROW(m.forward_batch(2, X.data(), a1.data(), nullptr, wm.data(), wm.size(), twice),
               tfk::error);
}

TFK_INSTANTIATE_FOR_EACH_ISA(LayerTest);

}  // namespace
}  // namespace tfk_test
