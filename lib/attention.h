// Scaled dot-product attention: target-independent arguments, tiling
// constants and the causal rule. Public contracts: include/tfk/tfk.h
// (tfk_attention, tfk_kv_cache_*); body: lib/attention-inl.h and
// lib/attention.cc; design: docs/attention.md.
#ifndef TFK_LIB_ATTENTION_H_
#define TFK_LIB_ATTENTION_H_

#include <stddef.h>
#include <stdint.h>

#include "tfk/tfk.h"

namespace tfk {

// Queries are handled per KV head ("group"): the n_rep = n_heads / n_kv_heads
// query heads that share K and V, over all q_len tokens, are numbered
// f = t * n_rep + r (token t, head g * n_rep + r), so K and V are read once
// for the whole group (grouped-query attention costs no extra K/V traffic).
//
// Prefill: a task owns kQB consecutive queries f of one group. Scores are
// computed transposed, S^T[key][query], so the kQB queries lie along the SIMD
// lanes: the online softmax (max, exp, sum, rescale) is plain vertical vector
// work with no horizontal reduction, and both products are register tiles of
// the same shape as the matmul's (kMR rows x 32 columns):
//   S^T[kKVB][32] = K_block[kKVB][d] * (scale Q)^T[d][32]
//   O^T[d][32]   = alpha * O^T + V_block^T[d][kKVB] * P^T[kKVB][32]
// kKVB = 64 keys: S^T is 8 KiB and (scale Q)^T, O^T 16 KiB each at d = 128,
// so a task's working set stays in L1/L2 while K and V stream past.
constexpr size_t kQB = 32;
constexpr size_t kKVB = 64;

// Decoding: a group with at most kDecodeMaxQueries queries (q_len x heads
// per KV head: one token of GQA with up to 16 heads per KV head, 4 tokens
// of GQA 32/8) uses a dot-product kernel instead (32 lanes of queries would
// be mostly empty), and splits the keys into chunks of kSplitKeys (twice that
// for a lone query: lib/attention.cc, SplitKeys), merged by
// log-sum-exp, so that many cores share even one head. The split depends on
// the shape only, never on the thread count, so results are identical for
// any number of threads. 16, not 8 or 32: measured on AVX2, GQA 32/8 against
// 4096 cached tokens, 1 / 2 threads, 4 tokens (16 queries per KV head) take
// 12.5 / 6.7 ms here against 19.0 / 9.9 on the prefill kernel, but 8 tokens
// (32) 24.4 / 12.2 against 20.1 / 10.8: the dot-product tiles of 4 queries
// re-read each K/V block once per tile, the prefill kernel once.
// Groups of 17 .. kQB x 8 queries against more keys than a split holds are
// split the same way, each split running the prefill kernel; a lone query
// takes its whole split as one block (lib/attention.cc: SplitKeys,
// PrefillSplitKeys).
constexpr size_t kDecodeMaxQueries = 16;
constexpr size_t kSplitKeys = 256;

// The decoding kernel takes the keys of a split in blocks of kDecodeKVB:
// 64 KiB of K and of V at d = 128 in fp32, in L2 while the tiles of a group
// take turns on them. 128, not 64: with K and V read as 4 streams, one
// thread, KV 8192, old and new library alternated in one process (medians
// of 15 calls, 2-4 sittings): 32 heads fp32 -4 .. +5 %, bf16 +2-4 %, GQA
// 32/8 +2-3.5 %, 256 keys in cache +3-7 %; 32 was 4-30 % slower.
constexpr size_t kDecodeKVB = 128;
static_assert(kSplitKeys % kDecodeKVB == 0, "a split is whole blocks");

constexpr size_t kMaxHeadDim = 256;

struct AttentionArgs {
  size_t q_len, kv_len, n_heads, n_kv_heads, head_dim;
  float scale;
  bool causal;
  // Q(t, h, :) at q + t * ldq + h * head_dim; O likewise.
  const float* q;
  size_t ldq;
  float* o;
  size_t ldo;
  // K(j, g, :) at k + j * ldk + g * k_head_stride (elements of type bf16 if
  // kv_bf16, else float); V likewise.
  const void* k;
  const void* v;
  size_t ldk, ldv, k_head_stride, v_head_stride;
  bool kv_bf16;
};

// Keys query token t may see: all kv_len, or with the causal mask
// (bottom-right aligned: token t sits at position kv_len - q_len + t) the
// first kv_len - q_len + t + 1, or none.
inline size_t VisibleKeys(const AttentionArgs& a, size_t t) {
  if (!a.causal) return a.kv_len;
  if (a.kv_len + t + 1 <= a.q_len) return 0;
  const size_t n = a.kv_len + t + 1 - a.q_len;
  return n < a.kv_len ? n : a.kv_len;
}

// Runs attention on the active target. Returns false if scratch memory
// could not be allocated (nothing is then guaranteed about O).
bool RunAttention(const AttentionArgs& a);

// The number of KV heads and head_dim of a cache (lib/kv_cache.cc), for the
// layers that attend through one.
void KvCacheShape(const tfk_kv_cache* cache, size_t* n_kv_heads, size_t* head_dim);

// Round to nearest even of a float to bf16 (NaN stays a quiet NaN).
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tfk

#endif  // TFK_LIB_ATTENTION_H_
