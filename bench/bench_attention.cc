// Attention on every supported ISA, 1 and all threads, 32 heads x 128:
//   prefill: causal self-attention over L tokens; GFLOPS counts the
//            unmasked half, 4 L^2 d H / 2 (QK^T and PV, 2 flops per FMA);
//   decode:  one query against a KV cache of L tokens (fp32 or bf16, MHA or
//            GQA 32/8); bytes/s counts the K and V bytes read, 2 L H_kv d
//            x 4 or 2, and GFLOPS 4 L d H.
// Labels: attention/prefill_causal_L2048_H32x32_D128/AVX2/threads:1,
//         attention/decode_bf16_L8192_H32x8_D128/AVX2/threads:1.
#include "bench_util.h"

namespace tfk_bench {
namespace {

constexpr size_t kHeads = 32, kDim = 128;

std::string Heads(size_t n_kv) { return "H" + std::to_string(kHeads) + "x" + std::to_string(n_kv); }

void RegisterPrefill(size_t len, size_t n_kv) {
  const std::string name = "attention/prefill_causal_L" + std::to_string(len) + "_" + Heads(n_kv) +
                           "_D" + std::to_string(kDim);
  const double flops = 4.0 * len * len * kDim * kHeads / 2;
  RegisterPerIsaState(name, benchmark::kMillisecond, [=](benchmark::State& state) {
    Floats q(len * kHeads * kDim, -1, 1), k(len * n_kv * kDim, -1, 1),
        v(len * n_kv * kDim, -1, 1), o(len * kHeads * kDim);
    for (auto _ : state) {
      tfk::check(tfk_attention(len, len, kHeads, n_kv, kDim, q.p, kHeads * kDim, k.p,
                               n_kv * kDim, v.p, n_kv * kDim, o.p, kHeads * kDim, 0.0f,
                               TFK_MASK_CAUSAL));
      benchmark::DoNotOptimize(o.p);
    }
    SetGflops(state, flops);
  });
}

void RegisterDecode(size_t len, size_t n_kv, tfk_dtype dtype) {
  const bool bf16 = dtype == TFK_DTYPE_BF16;
  const std::string name = std::string("attention/decode_") + (bf16 ? "bf16" : "f32") + "_L" +
                           std::to_string(len) + "_" + Heads(n_kv) + "_D" + std::to_string(kDim);
  const double bytes = 2.0 * len * n_kv * kDim * (bf16 ? 2 : 4);
  const double flops = 4.0 * len * kDim * kHeads;
  RegisterPerIsaState(name, benchmark::kMicrosecond, [=](benchmark::State& state) {
    Floats kv(len * n_kv * kDim, -1, 1), q(kHeads * kDim, -1, 1), o(kHeads * kDim);
    tfk_kv_cache* cache = nullptr;
    tfk::check(tfk_kv_cache_create(&cache, len, n_kv, kDim, dtype));
    tfk::check(tfk_kv_cache_append(cache, len, kv.p, n_kv * kDim, kv.p, n_kv * kDim));
    for (auto _ : state) {
      tfk::check(tfk_kv_cache_attention(cache, 1, kHeads, q.p, kHeads * kDim, o.p, kHeads * kDim,
                                        0.0f, TFK_MASK_CAUSAL));
      benchmark::DoNotOptimize(o.p);
    }
    tfk_kv_cache_destroy(cache);
    state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
    SetGflops(state, flops);
  });
}

const bool kRegistered = [] {
  RegisterPrefill(512, kHeads);
  RegisterPrefill(2048, kHeads);
  RegisterPrefill(2048, 8);
  for (size_t len : {2048, 8192}) {
    RegisterDecode(len, kHeads, TFK_DTYPE_F32);
    RegisterDecode(len, kHeads, TFK_DTYPE_BF16);
  }
  RegisterDecode(8192, 8, TFK_DTYPE_F32);
  RegisterDecode(8192, 8, TFK_DTYPE_BF16);
  return true;
}();

}  // namespace
}  // namespace tfk_bench
