// Scaled dot-product attention: public entry and per-target loops.
// Contract: include/tfk/tfk.h (tfk_attention); kernels: lib/attention-inl.h;
// layout and constants: lib/attention.h; design: docs/attention.md.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "lib/attention-inl.h"
#include "lib/attention.h"
#include "lib/fpenv.h"
#include "lib/memory.h"
#include "lib/threading.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {

// Copies K or V rows [j0, j0 + rows) of group g into buf as floats (stride
// head_dim): converted from bf16, or copied. The copy is cheap (1/64 of the
// block's flops at 32 queries x 2 products) and makes the tiles' operand
// contiguous: rows of a [tokens, heads, d] array lie heads * d * 4 bytes
// apart, 16 KiB at 32 heads x 128, so read in place they all fall into the
// same few cache sets (L1 repeats every 4 KiB, L2 every 64 KiB), and K and V
// never stay cached between query blocks (measured on AVX2, causal, 2048
// tokens: 21.9 GFLOP/s at 32 heads against 29.6 at 2 heads, 1 KiB apart).
template <class T>
HWY_INLINE void CopyKVRows(const AttentionArgs& a, const void* base, size_t ld,
                           size_t head_stride, size_t g, size_t j0, size_t rows, float* buf) {
  RowsToFloat(static_cast<const T*>(base) + g * head_stride + j0 * ld, ld, rows, a.head_dim, buf);
}

// Per query block of a prefill task: its 32 queries' transposed Q, output
// accumulator and softmax state.
struct QueryBlock {
  float* qt;          // [d][32]: (scale Q)^T
  float* ot;          // [d][32]: O^T, unnormalised
  float* m;           // [32] running max
  float* l;           // [32] running sum
  float* alpha;       // [32] rescale of O^T for the current key block
  int32_t* visible;   // [32] keys each query sees
  size_t f0, n_f;     // first query and number of queries (<= 32)
  size_t min_keys, max_keys;
};

HWY_INLINE size_t QueryBlockFloats(size_t dh) { return 2 * dh * kQB + 4 * kQB; }

// Query f of group g is token f / n_rep, head g n_rep + f mod n_rep; its
// rows in Q and O.
HWY_INLINE size_t QueryOffset(const AttentionArgs& a, size_t g, size_t f, size_t ld) {
  const size_t n_rep = a.n_heads / a.n_kv_heads;
  return (f / n_rep) * ld + (g * n_rep + f % n_rep) * a.head_dim;
}
HWY_INLINE const float* QueryRow(const AttentionArgs& a, size_t g, size_t f) {
  return a.q + QueryOffset(a, g, f, a.ldq);
}
HWY_INLINE float* OutputRow(const AttentionArgs& a, size_t g, size_t f) {
  return a.o + QueryOffset(a, g, f, a.ldo);
}

// Sets up block qb for queries f0 .. f0 + n_f of group g in `mem`.
HWY_INLINE void InitQueryBlock(const AttentionArgs& a, size_t g, size_t f0, size_t n_f,
                               float* mem, QueryBlock& qb) {
  const size_t dh = a.head_dim, n_rep = a.n_heads / a.n_kv_heads;
  qb.qt = mem, qb.ot = mem + dh * kQB, qb.m = qb.ot + dh * kQB;
  qb.l = qb.m + kQB, qb.alpha = qb.l + kQB;
  qb.visible = reinterpret_cast<int32_t*>(qb.alpha + kQB);
  qb.f0 = f0, qb.n_f = n_f, qb.min_keys = a.kv_len, qb.max_keys = 0;
  for (size_t lane = 0; lane < kQB; ++lane) {
    size_t keys = 0;
    if (lane < n_f) {
      const float* q = QueryRow(a, g, f0 + lane);
      for (size_t k = 0; k < dh; ++k) qb.qt[k * kQB + lane] = a.scale * q[k];
      keys = VisibleKeys(a, (f0 + lane) / n_rep);
      if (keys < qb.min_keys) qb.min_keys = keys;
      if (keys > qb.max_keys) qb.max_keys = keys;
    } else {
      for (size_t k = 0; k < dh; ++k) qb.qt[k * kQB + lane] = 0.0f;
    }
    qb.visible[lane] = static_cast<int32_t>(keys);
    qb.m[lane] = -INFINITY;
    qb.l[lane] = 0.0f;
  }
}

// Asks for block qb's output rows ahead of FinishQueryBlock: they lie heads
// x d x 4 bytes apart and are cold, and its stores waited on each line
// (causal prefill, 512 tokens x 32 heads, AVX2: +1-4 % on one thread, +4-9 %
// on two; 2048 tokens +1 %).
HWY_INLINE void PrefetchOutputRows(const AttentionArgs& a, size_t g, const QueryBlock& qb) {
  for (size_t lane = 0; lane < qb.n_f; ++lane) {
    PrefetchRow(OutputRow(a, g, qb.f0 + lane), a.head_dim);
  }
}

// Writes block qb's normalised outputs (zeros for queries that saw no key).
HWY_INLINE void FinishQueryBlock(const AttentionArgs& a, size_t g, const QueryBlock& qb) {
  const size_t dh = a.head_dim;
  for (size_t lane = 0; lane < qb.n_f; ++lane) {
    float* o = OutputRow(a, g, qb.f0 + lane);
    // l == 0: every key masked for this query. Its O^T column holds only
    // weight-0 terms, NaN where a value seen by the block's other queries is
    // not finite, so it is not read (nor ever written if max_keys == 0).
    if (qb.max_keys == 0 || qb.l[lane] == 0.0f) {
      memset(o, 0, dh * sizeof(float));
      continue;
    }
    const float inv = 1.0f / qb.l[lane];
    for (size_t c = 0; c < dh; ++c) o[c] = qb.ot[c * kQB + lane] * inv;
  }
}

// Prefill task: up to kTaskBlocks blocks of 32 queries of group g, from
// query f0 (see lib/attention.h). Each K/V block is copied once and used by
// every query block that sees it, which divides the K/V traffic by
// kTaskBlocks. The copy's loads miss (K and V rows lie heads x d x 4 bytes
// apart, 16 KiB at 32 x 128): with 4 blocks it took ~10 % of causal prefill
// here; 8 blocks halve it (AVX2, 2048 tokens, 32 heads: 28.4 -> 30.0 GFLOP/s
// on one thread, 56.6 -> 59.6 on two; 512 tokens +2-4 %). A task's working
// set, 8 x 32 KiB of query state plus 64 KiB of K and V at d = 128, fits the
// 512 KiB-2 MiB L2 of current cores; where L2 is 256 KiB the query state
// comes from L3, a few GB/s for this loop.
// Scratch: [kTaskBlocks * QueryBlockFloats(d) + (kKVB + 2 kKVB d) * ... ].
constexpr size_t kTaskBlocks = 8;

HWY_INLINE size_t PrefillScratchFloats(size_t dh) {
  return kTaskBlocks * QueryBlockFloats(dh) + kKVB * kQB + 2 * kKVB * dh;
}

// Keys [k_begin, k_end) only (all: 0, kv_len). part null: writes the
// normalised outputs. Else the task holds all n_q queries of the group (f0 =
// 0) and writes per query its partial state (m, l, o[d], o unnormalised;
// -inf, 0 and zeros for a query that saw none of these keys), stride d + 2,
// as DecodeTask does, for MergeSplits.
template <class T>
HWY_NOINLINE void PrefillTask(const AttentionArgs& a, size_t g, size_t f0, float* scratch,
                              size_t k_begin, size_t k_end, float* part) {
  const size_t dh = a.head_dim, n_q = a.q_len * (a.n_heads / a.n_kv_heads);
  // The task's Q rows first, all at once: they are as far apart and cold as
  // the output rows, and the transposes below, each storing a row as d
  // scalars, left too few loads in flight (512 tokens x 32 heads, AVX2:
  // +1-4 %; 2048 tokens the same).
  const size_t f_end = f0 + kTaskBlocks * kQB < n_q ? f0 + kTaskBlocks * kQB : n_q;
  for (size_t f = f0; f < f_end; ++f) PrefetchRow(QueryRow(a, g, f), dh);
  QueryBlock blocks[kTaskBlocks];
  size_t n_blocks = 0, max_keys = 0;
  for (size_t f = f0; f < n_q && n_blocks < kTaskBlocks; f += kQB, ++n_blocks) {
    QueryBlock& qb = blocks[n_blocks];
    InitQueryBlock(a, g, f, n_q - f < kQB ? n_q - f : kQB,
                   scratch + n_blocks * QueryBlockFloats(dh), qb);
    if (qb.max_keys > max_keys) max_keys = qb.max_keys;
  }
  float* st = scratch + kTaskBlocks * QueryBlockFloats(dh);  // [kKVB][32]: S^T, then P^T
  float* kbuf = st + kKVB * kQB;                             // [kKVB][d]
  float* vbuf = kbuf + kKVB * dh;                            // [kKVB][d]
  // Keys past a block's max_keys are masked for all its queries: skipped.
  const size_t key_end = max_keys < k_end ? max_keys : k_end;
  for (size_t j0 = k_begin; j0 < key_end; j0 += kKVB) {
    const size_t nj_all = key_end - j0 < kKVB ? key_end - j0 : kKVB;
    CopyKVRows<T>(a, a.k, a.ldk, a.k_head_stride, g, j0, nj_all, kbuf);
    CopyKVRows<T>(a, a.v, a.ldv, a.v_head_stride, g, j0, nj_all, vbuf);
    const bool last = j0 + kKVB >= key_end;  // the task's last key block
    for (size_t b = 0; b < n_blocks; ++b) {
      QueryBlock& qb = blocks[b];
      if (last && part == nullptr) PrefetchOutputRows(a, g, qb);
      if (qb.max_keys <= j0) continue;
      const size_t nj = qb.max_keys - j0 < nj_all ? qb.max_keys - j0 : nj_all;
      PanelRows<true>(nj, dh, kbuf, dh, qb.qt, st, nullptr);
      if (j0 + nj > qb.min_keys) MaskBlock(j0, nj, qb.visible, st);
      OnlineSoftmaxBlock(nj, st, qb.m, qb.l, qb.alpha);
      PanelRows<false>(dh, nj, vbuf, dh, st, qb.ot, j0 == k_begin ? nullptr : qb.alpha);
    }
  }
  for (size_t b = 0; b < n_blocks; ++b) {
    const QueryBlock& qb = blocks[b];
    if (part == nullptr) {
      FinishQueryBlock(a, g, qb);
      continue;
    }
    // As in FinishQueryBlock, a query with l == 0 saw no key here: its O^T
    // column (unset, or weight-0 terms) is not read.
    for (size_t lane = 0; lane < qb.n_f; ++lane) {
      float* pf = part + (qb.f0 + lane) * (dh + 2);
      const bool seen = qb.max_keys > k_begin && qb.l[lane] != 0.0f;
      pf[0] = seen ? qb.m[lane] : -INFINITY;
      pf[1] = seen ? qb.l[lane] : 0.0f;
      for (size_t c = 0; c < dh; ++c) pf[2 + c] = seen ? qb.ot[c * kQB + lane] : 0.0f;
    }
  }
}

// One block of nk keys for kQ queries that see the same keys: scores,
// online softmax per query, value sums. state: per query (m, l, o[d]),
// stride d + 2; sc: kQ score rows of kDecodeKVB + 16.
constexpr size_t kScoreStride = kDecodeKVB + 16;

template <size_t kQ, class T>
HWY_INLINE void DecodeBlock(size_t nk, const float* qs, size_t dh, const T* kb, size_t ldk,
                            const T* vb, size_t ldv, bool prefetch, bool spread, size_t avail,
                            float* sc, float* state, bool first) {
  DotRows<kQ>(nk, qs, dh, kb, ldk, dh, sc, kScoreStride, prefetch, spread, avail);
  float alpha[kQ];
  for (size_t f = 0; f < kQ; ++f) {
    float* st = state + f * (dh + 2);
    alpha[f] = OnlineSoftmaxRow(nk, sc + f * kScoreStride, st[0], st[1]);
  }
  AccumulateValues<kQ>(nk, sc, kScoreStride, vb, ldv, dh, state + 2, dh + 2, alpha, first,
                       prefetch, spread, avail);
}

// Decoding task: keys [s * SplitKeys(n_q), ...) of group g for its n_q <=
// kDecodeMaxQueries queries. Writes per query (m, l, o[d]) to part, stride
// d + 2, or, if final, the normalised output rows directly. spread: K and V
// come from memory, read them as 4 streams (DotRows).
// Scratch: DecodeScratchFloats(n_q, d).
constexpr size_t kDecodeTile = 4;  // queries per DecodeBlock

// Keys per split of a decoding group of n_q queries: kSplitKeys, or twice
// that for a lone query (one head per KV head, one token), which takes its
// split as one block and reads it as 4 streams (DecodeTask): the longer its
// streams, the better the hardware follows them. One Zen 4 core, 32 heads,
// KV cache of 8192 tokens, old and new library alternated in one process
// (medians of per-round ratios): one 256-key block instead of two of 128,
// fp32 +11 %, bf16 +10 % (512 tokens in cache +8 %, two threads +4-12 %);
// then 512-key splits, fp32 +4 %, bf16 +22 % (two threads +5 / +11 %). GQA
// 32/8 (4 queries, one tile) lost 3 % with 256-key blocks and keeps 128.
constexpr size_t kLoneSplitKeys = 2 * kSplitKeys;
HWY_INLINE size_t SplitKeys(size_t n_q) { return n_q == 1 ? kLoneSplitKeys : kSplitKeys; }

// Keys per split of a group of 17 .. kQB x kTaskBlocks queries on the
// prefill kernel: 512 per block of 32 queries, so that the splits' partial
// states (d + 2 floats a query) take at most 1/32 of the K and
// V bytes they cover in fp32 (1/16 in bf16), as on the dot-product path at 16
// queries; with 256 keys for any number of blocks, a 64-token chunk of GQA
// 32/8 against 128 Ki cached tokens would have held 545 MB of them.
HWY_INLINE size_t PrefillSplitKeys(size_t n_q) {
  return 2 * kSplitKeys * ((n_q + kQB - 1) / kQB);
}
static_assert(kLoneSplitKeys + 16 <= kDecodeTile * kScoreStride, "a lone query's scores fit");

HWY_INLINE size_t DecodeScratchFloats(size_t n_q, size_t dh) {
  return n_q * (2 * dh + 2) + kDecodeTile * kScoreStride;
}

template <class T>
HWY_NOINLINE void DecodeTask(const AttentionArgs& a, size_t g, size_t s, bool final,
                             bool spread, float* part, float* scratch) {
  const size_t dh = a.head_dim, n_rep = a.n_heads / a.n_kv_heads, n_q = a.q_len * n_rep;
  const size_t split_keys = SplitKeys(n_q);
  const size_t k_begin = s * split_keys;
  const size_t k_end = k_begin + split_keys < a.kv_len ? k_begin + split_keys : a.kv_len;
  float* state = scratch;                 // per query: m, l, o[d]
  float* qs = state + n_q * (dh + 2);     // per query: scale * q
  float* sc = qs + n_q * dh;              // scores of one block, per query of a tile
  size_t end[kDecodeMaxQueries];
  size_t last = k_begin;
  for (size_t f = 0; f < n_q; ++f) {
    const float* q = QueryRow(a, g, f);
    for (size_t k = 0; k < dh; ++k) qs[f * dh + k] = a.scale * q[k];
    if (sizeof(T) == 2) SplitPairs(qs + f * dh, dh, false);  // see LoadPairs
    const size_t vis = VisibleKeys(a, f / n_rep);
    end[f] = vis < k_end ? vis : k_end;
    if (end[f] > last) last = end[f];
    float* st = state + f * (dh + 2);
    st[0] = -INFINITY;
    st[1] = 0.0f;
    memset(st + 2, 0, dh * sizeof(float));
  }
  const bool spread_prefetch = detail::DecodeSpreadPrefetch();
  const T* kbase = static_cast<const T*>(a.k) + g * a.k_head_stride;
  const T* vbase = static_cast<const T*>(a.v) + g * a.v_head_stride;
  // Blocks outer, queries inner: a block of K and V (kDecodeKVB rows) stays in L2
  // for every query of the group. Queries that see the same keys (the heads
  // of one token) go through DecodeBlock together, up to kDecodeTile at once.
  // The first tile, which reads K and V from memory, prefetches (K up to the
  // group's last key: beyond the split, which this task or a neighbour reads
  // next). Every query sees the split's first key, so its sums start at 0.
  // A lone query (one head per KV head, one token) has no other tile to
  // share a block with: it takes its whole split as one block, so that each
  // of its 4 streams runs longer (SplitKeys).
  const size_t kvb = n_q == 1 ? split_keys : kDecodeKVB;
  for (size_t j0 = k_begin; j0 < last; j0 += kvb) {
    const T* kb = kbase + j0 * a.ldk;
    const T* vb = vbase + j0 * a.ldv;
    const bool first = j0 == k_begin;
    size_t f1 = 0;
    for (size_t f0 = 0; f0 < n_q; f0 = f1) {
      f1 = f0 + 1;
      while (f1 < n_q && f1 - f0 < kDecodeTile && end[f1] == end[f0]) ++f1;
      if (end[f0] <= j0) continue;
      const size_t nk = end[f0] - j0 < kvb ? end[f0] - j0 : kvb;
      const float* q = qs + f0 * dh;
      float* st = state + f0 * (dh + 2);
      // One-query tiles from memory read 4 streams (sp); they also prefetch
      // where that helps (detail::DecodeSpreadPrefetch).
      const bool sp = f0 == 0 && spread;
      const bool pf = f0 == 0 && (spread_prefetch || !spread || f1 - f0 > 1);
      const size_t avail = a.kv_len - j0;
      switch (f1 - f0) {
        case 1:
          DecodeBlock<1>(nk, q, dh, kb, a.ldk, vb, a.ldv, pf, sp, avail, sc, st, first);
          break;
        case 2:
          DecodeBlock<2>(nk, q, dh, kb, a.ldk, vb, a.ldv, pf, sp, avail, sc, st, first);
          break;
        case 3:
          DecodeBlock<3>(nk, q, dh, kb, a.ldk, vb, a.ldv, pf, sp, avail, sc, st, first);
          break;
        default:
          DecodeBlock<4>(nk, q, dh, kb, a.ldk, vb, a.ldv, pf, sp, avail, sc, st, first);
          break;
      }
    }
  }
  for (size_t f = 0; f < n_q; ++f) {
    float* st = state + f * (dh + 2);
    if (sizeof(T) == 2) SplitPairs(st + 2, dh, true);
    if (final) {
      float* o = OutputRow(a, g, f);
      // l == 0: no key had weight (all scores -inf): zeros, as the prefill
      // path gives (FinishQueryBlock); the sums may hold 0 x inf = NaN.
      if (st[1] == 0.0f) {
        memset(o, 0, dh * sizeof(float));
        continue;
      }
      const float inv = 1.0f / st[1];
      for (size_t c = 0; c < dh; ++c) o[c] = st[2 + c] * inv;
    } else {
      // A split in which no key had weight leaves zeros, not its sums (0 x
      // inf = NaN where a value is infinite), as the prefill splits do.
      float* pf = part + f * (dh + 2);
      if (st[1] == 0.0f) {
        pf[0] = -INFINITY;
        pf[1] = 0.0f;
        memset(pf + 2, 0, dh * sizeof(float));
      } else {
        memcpy(pf, st, (dh + 2) * sizeof(float));
      }
    }
  }
}

// Merges the n_splits partial results of query f of group g, in split order:
// O = sum_s w_s o_s / sum_s w_s l_s, w_s = exp(m_s - max_s m_s).
HWY_INLINE void MergeSplits(const AttentionArgs& a, size_t g, size_t f, size_t n_splits,
                            const float* part) {
  const size_t dh = a.head_dim, n_rep = a.n_heads / a.n_kv_heads, n_q = a.q_len * n_rep;
  const size_t stride = n_q * (dh + 2);  // from one split to the next
  const float* p0 = part + g * n_splits * stride + f * (dh + 2);
  float mx = -INFINITY;
  for (size_t s = 0; s < n_splits; ++s) {
    const float ms = p0[s * stride];
    if (ms > mx || isnan(ms)) mx = ms;
    if (isnan(mx)) break;
  }
  const float shift = mx == -INFINITY ? 0.0f : mx;
  float* o = OutputRow(a, g, f);
  float l = 0.0f;
  for (size_t c = 0; c < dh; ++c) o[c] = 0.0f;
  for (size_t s = 0; s < n_splits; ++s) {
    const float* ps = p0 + s * stride;
    const float w = ExpNonPositive1(ps[0] - shift);
    l += w * ps[1];
    for (size_t c = 0; c < dh; ++c) o[c] += w * ps[2 + c];
  }
  if (l == 0.0f) {  // no key had weight: zeros (see DecodeTask)
    for (size_t c = 0; c < dh; ++c) o[c] = 0.0f;
    return;
  }
  const float inv = 1.0f / l;
  for (size_t c = 0; c < dh; ++c) o[c] *= inv;
}

template <class T>
bool AttentionT(const AttentionArgs& a) {
  const size_t dh = a.head_dim, n_rep = a.n_heads / a.n_kv_heads, n_q = a.q_len * n_rep;
  const size_t groups = a.n_kv_heads;
  std::atomic<bool> ok{true};
  const size_t span = kTaskBlocks * kQB;
  if (n_q > kDecodeMaxQueries && (n_q > span || a.kv_len <= PrefillSplitKeys(n_q))) {
    // Prefill: items (group, kTaskBlocks blocks of 32 queries). Within a
    // group the items are visited from both ends (0, n-1, 1, n-2, ...), so
    // that under the causal mask, where an item's cost grows with its index,
    // equal contiguous runs of items carry nearly equal work.
    const size_t blocks = (n_q + span - 1) / span;
    const size_t scratch_floats = PrefillScratchFloats(dh);
    const size_t cost = span * a.kv_len * dh / 2;  // ~ flops / 8
    detail::ParallelFor(groups * blocks, cost, [&](size_t begin, size_t end) HWY_ATTR {
      float* scratch = detail::ThreadScratch(scratch_floats);
      if (scratch == nullptr) {
        ok.store(false);
        return;
      }
      for (size_t item = begin; item < end; ++item) {
        const size_t g = item / blocks, i = item % blocks;
        const size_t b = i % 2 == 0 ? i / 2 : blocks - 1 - i / 2;
        PrefillTask<T>(a, g, b * span, scratch, 0, a.kv_len, nullptr);
      }
    });
    return ok.load();
  }
  // Decoding, and groups whose queries fit one prefill item: items (group,
  // split of keys: SplitKeys, PrefillSplitKeys), merged afterwards, so that
  // many cores share even one head. With more than kDecodeMaxQueries
  // queries a group (MQA or GQA with many heads per KV head, a few tokens of
  // GQA 32/8, a short chunk of prefill against a long cache) each split runs
  // the prefill kernel on its keys, and the splits are merged as the
  // dot-product path's; before, such a group was one item, on one core.
  const bool dot = n_q <= kDecodeMaxQueries;
  const size_t split_keys = dot ? SplitKeys(n_q) : PrefillSplitKeys(n_q);
  const size_t n_splits = (a.kv_len + split_keys - 1) / split_keys;
  const bool split = n_splits > 1;
  // Partial state of one item (group, split): (m, l, o[d]) per query.
  const size_t item_floats = n_q * (dh + 2);
  detail::CallBuffer part_buf(split ? groups * n_splits * item_floats : 1);
  float* part = part_buf.get();
  if (part == nullptr) return false;
  const size_t scratch_floats = dot ? DecodeScratchFloats(n_q, dh) : PrefillScratchFloats(dh);
  const size_t cost = dot ? split_keys * dh * 2 * sizeof(T) : n_q * split_keys * dh / 2;
  // K and V larger than half the last-level cache come from memory.
  const bool spread = groups * a.kv_len * dh * 2 * sizeof(T) >= detail::StreamThresholdBytes();
  detail::ParallelFor(groups * n_splits, cost, [&](size_t begin, size_t end) HWY_ATTR {
    float* scratch = detail::ThreadScratch(scratch_floats);
    if (scratch == nullptr) {
      ok.store(false);
      return;
    }
    for (size_t item = begin; item < end; ++item) {
      const size_t g = item / n_splits, s = item % n_splits;
      float* p = part + item * item_floats;
      if (dot) {
        DecodeTask<T>(a, g, s, !split, spread, p, scratch);
      } else {
        PrefillTask<T>(a, g, 0, scratch, s * split_keys, (s + 1) * split_keys,
                       split ? p : nullptr);
      }
    }
  });
  if (!ok.load() || !split) return ok.load();
  detail::ParallelFor(groups * n_q, n_splits * dh * 8, [&](size_t begin, size_t end) HWY_ATTR {
    for (size_t item = begin; item < end; ++item) {
      MergeSplits(a, item / n_q, item % n_q, n_splits, part);
    }
  });
  return true;
}

bool Attention(const AttentionArgs& a) {
  return a.kv_bf16 ? AttentionT<uint16_t>(a) : AttentionT<float>(a);
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "lib/dispatch.h"
#include "lib/status.h"

namespace tfk {
HWY_EXPORT(Attention);

bool RunAttention(const AttentionArgs& a) { return TFK_DISPATCH(Attention)(a); }
}  // namespace tfk

extern "C" TFK_API tfk_status tfk_attention(size_t q_len, size_t kv_len, size_t n_heads,
                                            size_t n_kv_heads, size_t head_dim,
                                            const float* Q, size_t ldq, const float* K,
                                            size_t ldk, const float* V, size_t ldv, float* O,
                                            size_t ldo, float scale, tfk_mask mask) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_attention";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckSize(fn, "q_len", q_len));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "kv_len", kv_len));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n_heads", n_heads));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n_kv_heads", n_kv_heads));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "head_dim", head_dim));
  if (head_dim > tfk::kMaxHeadDim) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "head_dim (%zu) > %zu", head_dim, tfk::kMaxHeadDim);
  }
  if (n_heads % n_kv_heads != 0) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n_heads (%zu) is not a multiple of n_kv_heads (%zu)",
                n_heads, n_kv_heads);
  }
  if (kv_len > INT32_MAX || q_len > INT32_MAX) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "q_len (%zu) or kv_len (%zu) exceeds 2^31 - 1", q_len,
                kv_len);
  }
  if (n_heads > SIZE_MAX / 256 / head_dim) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n_heads (%zu) x head_dim (%zu) overflows", n_heads,
                head_dim);
  }
  const size_t q_cols = n_heads * head_dim, kv_cols = n_kv_heads * head_dim;
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "Q", Q, q_len, q_cols, ldq));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "K", K, kv_len, kv_cols, ldk));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "V", V, kv_len, kv_cols, ldv));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "O", O, q_len, q_cols, ldo));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "Q", Q, ldq, "O", O, ldo, q_len, q_cols));
  // O may be Q (in place) but must not touch K or V.
  const auto overlaps = [&](const float* x, size_t ldx) {
    const uintptr_t x0 = reinterpret_cast<uintptr_t>(x), o0 = reinterpret_cast<uintptr_t>(O);
    const uintptr_t x1 = x0 + ((kv_len - 1) * ldx + kv_cols) * sizeof(float);
    const uintptr_t o1 = o0 + ((q_len - 1) * ldo + q_cols) * sizeof(float);
    return x0 < o1 && o0 < x1;
  };
  if (overlaps(K, ldk)) return Fail(TFK_INVALID_ARGUMENT, fn, "O overlaps K");
  if (overlaps(V, ldv)) return Fail(TFK_INVALID_ARGUMENT, fn, "O overlaps V");
  if (!isfinite(scale)) return Fail(TFK_INVALID_ARGUMENT, fn, "scale (%g) is not finite", scale);
  if (RawEnum(mask) != TFK_MASK_NONE && RawEnum(mask) != TFK_MASK_CAUSAL) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "mask (%d) is not a tfk_mask", RawEnum(mask));
  }
  tfk::AttentionArgs a{};
  a.q_len = q_len, a.kv_len = kv_len, a.n_heads = n_heads, a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.scale = scale == 0.0f ? 1.0f / sqrtf(static_cast<float>(head_dim)) : scale;
  a.causal = mask == TFK_MASK_CAUSAL;
  a.q = Q, a.ldq = ldq, a.o = O, a.ldo = ldo;
  a.k = K, a.v = V, a.ldk = ldk, a.ldv = ldv;
  a.k_head_stride = a.v_head_stride = head_dim;
  a.kv_bf16 = false;
  if (!tfk::RunAttention(a)) return Fail(TFK_OUT_OF_MEMORY, fn, "scratch allocation failed");
  return TFK_SUCCESS;
}
#endif  // HWY_ONCE
