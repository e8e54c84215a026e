// A whole transformer block (tfk_block: pre-LN, LayerNorm, MHA with RoPE,
// GELU FFN with d_ff = 4 d_model) on every supported ISA, 1 and all threads:
//   prefill: 512 tokens, causal; counters tokens/s and GFLOPS (projections
//            24 d^2 per token plus causal attention 2 n d per token);
//   decode:  one token against a cache of 512 (fp32); counters tokens/s and
//            bytes/s read (12 d^2 floats of weights and 2 x 512 x d of the
//            cache's K and V per step: the bound);
//   decode_batch8: one token of each of 8 sequences with caches of 512
//            (tfk_block_forward_batch): the weights are read once for the 8
//            tokens, so tokens/s against decode's is what batching gains.
// Labels: block/prefill_D4096_H32_L512/AVX2/threads:1,
//         block/decode_D4096_H32_KV512/AVX2/threads:1,
//         block/decode_batch8_D4096_H32_KV512/AVX2/threads:1.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "bench_util.h"

namespace tfk_bench {
namespace {

constexpr size_t kTokens = 512;

// One packed block per width, built once and shared by every benchmark (a
// packed handle serves every ISA); d = 4096 holds 805 MB of weights.
struct BlockHandle {
  tfk_block* block = nullptr;
  size_t d, heads;
  ~BlockHandle() { tfk_block_destroy(block); }
};

BlockHandle& GetBlock(size_t d, size_t heads) {
  static std::mutex mu;
  static std::map<size_t, std::unique_ptr<BlockHandle>> blocks;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<BlockHandle>& b = blocks[d];
  if (!b) {
    b = std::make_unique<BlockHandle>();
    b->d = d, b->heads = heads;
    const float s = 1.0f / std::sqrt(static_cast<float>(d));
    Floats wq(d * d, -s, s), wk(d * d, -s, s), wv(d * d, -s, s), wo(d * d, -s, s);
    Floats w1(d * 4 * d, -s, s), w2(4 * d * d, -s / 2, s / 2), g(d, 0.9f, 1.1f), beta(d, -0.1f, 0.1f);
    tfk_block_config c{};
    c.attn.d_model = d, c.attn.n_heads = heads, c.attn.n_kv_heads = heads;
    c.attn.layout = TFK_LAYOUT_NK;
    c.attn.wq = wq.p, c.attn.wk = wk.p, c.attn.wv = wv.p, c.attn.wo = wo.p;
    c.attn.causal = 1, c.attn.rope = 1, c.attn.rope_pairing = TFK_ROPE_HALF;
    c.ffn.d_model = d, c.ffn.d_ff = 4 * d, c.ffn.act = TFK_ACT_GELU_ERF;
    c.ffn.layout = TFK_LAYOUT_NK, c.ffn.w1 = w1.p, c.ffn.w2 = w2.p;
    c.norm = TFK_NORM_LAYER, c.eps = 1e-5f;
    c.norm1_gamma = c.norm2_gamma = g.p, c.norm1_beta = c.norm2_beta = beta.p;
    tfk::check(tfk_block_create(&b->block, &c));
  }
  return *b;
}

// batch: 0 for prefill, else the sequences of a decoding step (one token
// each, with caches of kTokens).
void Register(size_t d, size_t heads, size_t batch) {
  const bool decode = batch > 0;
  const std::string name = std::string("block/") +
                           (!decode ? "prefill" : batch == 1 ? "decode" : "decode_batch") +
                           (batch > 1 ? std::to_string(batch) : "") + "_D" + std::to_string(d) +
                           "_H" + std::to_string(heads) + (decode ? "_KV" : "_L") +
                           std::to_string(kTokens);
  const size_t n = decode ? batch : kTokens;
  // Decoding reads the weights and each cache's K and V (kTokens x d each).
  const double read_bytes = 12.0 * d * d * 4 + batch * 2.0 * kTokens * d * 4;
  const double flops = n * (24.0 * d * d + (decode ? 4.0 * kTokens * d : 2.0 * kTokens * d));
  RegisterPerIsaState(name, benchmark::kMillisecond, [=](benchmark::State& state) {
    BlockHandle& b = GetBlock(d, heads);
    Floats x(n * d, -1, 1), y(n * d);
    size_t bytes = 0;
    tfk::check(tfk_block_workspace_size(b.block, kTokens, &bytes));
    std::vector<char> ws(bytes);
    // Caches holding kTokens tokens each (their values do not matter for
    // the time); each step appends one, truncated back after it.
    std::vector<tfk_kv_cache*> caches(batch);
    Floats kv(decode ? kTokens * d : 1, -1, 1);
    for (tfk_kv_cache*& c : caches) {
      tfk::check(tfk_kv_cache_create(&c, kTokens + 1, heads, d / heads, TFK_DTYPE_F32));
      tfk::check(tfk_kv_cache_append(c, kTokens, kv.p, d, kv.p, d));
    }
    for (auto _ : state) {
      if (batch > 1) {
        tfk::check(tfk_block_forward_batch(b.block, n, x.p, d, y.p, d, caches.data(), ws.data(),
                                           bytes));
      } else {
        tfk::check(tfk_block_forward(b.block, n, x.p, d, y.p, d, decode ? caches[0] : nullptr,
                                     ws.data(), bytes));
      }
      for (tfk_kv_cache* c : caches) tfk::check(tfk_kv_cache_truncate(c, kTokens));
      benchmark::DoNotOptimize(y.p);
    }
    for (tfk_kv_cache* c : caches) tfk_kv_cache_destroy(c);
    state.counters["tokens_per_second"] =
        benchmark::Counter(static_cast<double>(n) * state.iterations(), benchmark::Counter::kIsRate);
    SetGflops(state, flops);
    if (decode) state.SetBytesProcessed(static_cast<int64_t>(read_bytes * state.iterations()));
  });
}

const bool kRegistered = [] {
  for (size_t batch : {0, 1, 8}) {
    Register(1024, 16, batch);
    Register(4096, 32, batch);
  }
  return true;
}();

}  // namespace
}  // namespace tfk_bench
