// Matmul and packed linear layers: public entries and per-target loops.
// Contract: include/tfk/tfk.h; kernel: lib/matmul-inl.h; docs/matmul.md.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <new>
#include <thread>

#include "hwy/highway.h"
#include "lib/fpenv.h"
#include "lib/matmul-inl.h"
#include "lib/matmul.h"
#include "lib/memory.h"
#include "lib/threading.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {

// Smallest chunk of a ParallelFor over (M chunk, panel) items: 4 panels
// where A is packed (AVX-512: 16-core Xeon, 16 threads, M = 512, K = N =
// 4096: 8-panel chunks 1075-1139, 4-panel chunks 1204-1298 GFLOP/s, oneDNN
// 1123-1145), else a single panel. Only where the tasks share one packed A
// (as there: 8 tasks an M chunk); tasks that pack A each for themselves
// (Gemm) take whole workspace groups instead.
constexpr size_t kMinItemsPerChunk = kPackA ? 4 : 1;

// Where A is packed and more than two of a call's tasks share an M chunk
// (or the shape is a decoding one; Gemm), the call packs each
// (M chunk, k-block) piece of its rows once, into a buffer all its tasks
// read (detail::CallBuffer): the tasks that need a piece before it is done
// pack it, a row tile each in turn, right before its first use (streamed
// out where tasks share it, GemmPlan::stream_a), and wait for the rest of
// it (PackedPiece). Packed per small chunk of work instead, every chunk
// packed its M chunk's A again; packing an element costs about as much as
// one panel's FMAs on it (32 multiply-adds, a cycle), so that cost
// 1 / (panels per chunk) of the time, a quarter with 4-panel chunks. At
// most kPackedABudget floats (32 MiB) are packed at a time; taller A goes
// through in slabs of rows.
constexpr size_t kPackedABudget = size_t{8} << 20;

// Unpacked [K, N] B read in place by M = 1 (MakePlan): the largest K whose
// partial last panel is packed whole into scratch (1 MiB).
constexpr size_t kInPlaceMaxK = 8192;

// Decoding panels of at most this many k-steps (256 KiB of packed weights)
// are short: their tiles prefetch the next panel on every CPU
// (GemmPlan::next_panel in MakePlan).
constexpr size_t kShortPanelK = 2048;

// Calls of at most kL1SliceMaxM rows whose row tiles have at most
// kL1SliceMaxRows rows take k-blocks of Blocking::kc_l1 (MakePlan).
constexpr size_t kL1SliceMaxRows = 11, kL1SliceMaxM = 256;

// How a call (or a slab of its rows) is cut into work; see Gemm.
struct GemmPlan {
  bool decode, in_place, stream_next, next_panel, stream_a, decode_pf_l1;
  size_t kc, split_kc, n_panels, mc, m_chunks, group, cost;
  // k-steps ahead that one-row (0: none), several-panel and split decoding
  // tiles prefetch.
  size_t one_row_pf_dist, rows_pf_dist, split_pf_dist;
};

GemmPlan MakePlan(const GemmArgs& g) {
  const Blocking blk = GetBlocking();
  GemmPlan pl;
  // One row tile (decoding): each panel is read once anyway; one pass over
  // K keeps it a sequential stream (M = 1, K = N = 4096, AVX2: 8.6 -> 11
  // GB/s), and M = 1 reads four panels at once (TileRowPanels). With more
  // tiles, k-blocks keep each panel slice in cache for all of them (M = 8 on
  // AVX2's 3-row tiles would read each panel 3 times).
  // Packed weights; or, for M = 1, unpacked [K, N] ones, whose whole panels
  // are then read in place, four at a time (TileRowPanels: 512 contiguous
  // bytes of each row of B), where packing them would only add a copy
  // (medians of per-round ratios, M = 1: one AVX-512 core, K = N = 4096 /
  // 1024 / 1000 +37 / +36 / +50 %, two threads +46 %; AVX2 +79 %). With
  // more rows a tile reads one panel, 128 bytes a row, each row on its own
  // page: in place, M = 8 at K = N = 4096 took 1.7x as long as packing
  // kc-row slices. [N, K] weights are always packed. A partial last panel
  // is packed whole (K x 32 floats of scratch), so in place takes N a
  // multiple of 32 or K <= kInPlaceMaxK.
  pl.in_place = g.packed == nullptr && g.layout == TFK_LAYOUT_KN && g.M == 1 &&
                kDecodePanels > 1 && (g.N % kNR == 0 || g.K <= kInPlaceMaxK);
  pl.decode = (g.packed != nullptr && g.M <= kMaxMR) || pl.in_place;
  // Packed weights with several row tiles (M = 8 on AVX2's 3-row tiles, and
  // up): the first tile of a panel slice would wait for it from memory while
  // the others find it in L2, so memory and FMAs would take turns. Instead
  // the tiles of each slice prefetch the next slice, one line per k-step,
  // the first tile its first kb lines and the second the rest, so the stream
  // runs while all tiles compute (AVX2, 1 / 2 threads, K = N = 4096: M = 8
  // 20.4 / 37.4 -> 28.4 / 50.8 GFLOP/s; M = 64 33.9 / 64.9 -> 36.4 / 71.5).
  // Unpacked [K, N] B the same: its slices are packed right before use,
  // rows ldb floats apart, two lines each, and the copy's loads found them
  // in memory or L3 (one Zen 4 core, tfk_matmul, medians of per-round
  // ratios: M = 8, K = N = 4096 +5 %, two threads +5 %; M = 64, K = N = 1024
  // +1-2 %; M = 512 the same within noise). The lines go into L2 only
  // (PrefetchToL2): against L1, K = N = 4096, one Zen 4 core, M = 16 / 32
  // +23 / +6 % (two threads M = 16 +13 %), AVX2's M = 8 / 64 +68 / +10 %
  // (two threads M = 8 +41 %); M >= 64 on AVX-512, and M = 512 in cache
  // (K or N = 1024), the same within 1-2 %.
  pl.stream_next = !pl.decode && (g.packed != nullptr || g.layout == TFK_LAYOUT_KN);
  // Decoding tiles of packed weights that read one panel front to back, one
  // stream (M = 2..kMaxMR, but on AVX-512 only M >= 13 and the panels that
  // tiles of 2-12 rows, which read several at once, leave over; M = 1 reads
  // four panels at once): where the call runs as one task they also
  // prefetch the next panel, a panel ahead
  // (row k of panel p + 1 at step k), so two streams are in flight. One Zen 4 core,
  // K = N = 4096, medians of per-round ratios over three runs: M = 8
  // +2-5 %, M = 4 +6-22 %; AVX2's M = 3 and M = 8 at K = N = 1024 (in
  // cache) the same within 2 %. Two tasks, already bound by memory, lost
  // 5-13 % with it. Tiles of at most 4 rows over panels of more than
  // kShortPanelK k-steps only where the CPU gains by it
  // (detail::DecodeNextLongPanel): on a Xeon the second stream slowed the
  // first (K = 4096, M = 3 / 4 by 30 / 23 %), while at K = 1024 and 2048,
  // where a panel's own stream is short and restarts often, it still helped
  // M = 8 (one thread, weights from memory, medians of per-round ratios in
  // both orders, without it: K = 1024 / 2048, N = 4096, -6 / -5 %; M = 4
  // +0 / +2 %).
  pl.next_panel = pl.decode && g.packed != nullptr && g.M > 1 &&
                  (g.K <= kShortPanelK || g.M > 4 || detail::DecodeNextLongPanel());
  // Several-panel decoding tiles prefetch into L1 or L2 by CPU vendor
  // (detail::DecodePrefetchToL1, with the measurements).
  pl.decode_pf_l1 = detail::DecodePrefetchToL1();
  pl.one_row_pf_dist = pl.decode_pf_l1 ? kOneRowPrefetchL1 : 0;
  pl.rows_pf_dist = pl.decode_pf_l1 ? kRowPanelsPrefetchL1 : kRowPanelsPrefetch;
  pl.split_pf_dist = pl.decode_pf_l1 ? kSplitPrefetchL1 : kSplitPrefetch;
  pl.kc = pl.decode || g.K < blk.kc ? g.K : blk.kc;
  // Split decoding tiles (TileRowsSplit) take short k-blocks where the
  // layer's weights exceed one core's L2 (so come from L3 or memory, each
  // call), long ones where they fit.
  pl.split_kc = g.K * g.N * sizeof(float) > blk.l2 ? kSplitKcStream : kSplitKcCached;
  pl.n_panels = NumPanels(g.N);
  // Panels per workspace group: larger where A is packed, so that a tile's
  // packed rows serve more panels before they are packed again (unpacked B
  // goes through one slice of scratch, packed right before use).
  pl.group = kPackA ? 4 * blk.nc_panels : blk.nc_panels;
  // Where K takes several k-blocks, each tile parks its partial sums in the
  // workspace W (group x mc x kNR floats) between them, and W and the A
  // block (mc x kc) are read again for every panel and k-block: rows of A
  // are capped so that both take at most 3/4 of L2. With 32 panels a group
  // (AVX-512) that is 6 KiB a row, 256 rows on a 2 MiB L2, where the A
  // block alone (half of L2) allowed 480 and W outgrew L2: one Xeon core
  // (family 6 model 167), medians of per-round ratios in both orders, 1 / 2
  // threads: M = 2048, K = N = 1024 +3.0 / +3.9 %; M = 2048, K = 1024, N =
  // 4096 +2.5 / +2.5 %; M = 1024, K = N = 4096 +0.4 / +2.8 %; M = 2048, K =
  // 4096, N = 1024 +0.9 / -0.9 %; 192 rows measured the same as 256, 341
  // 0.5-1.5 % below it.
  size_t mc_max = blk.mc;
  if (g.K > pl.kc) {
    const size_t cap = blk.l2 * 3 / 4 / ((pl.kc + pl.group * kNR) * sizeof(float));
    if (cap < mc_max) mc_max = cap > kMaxMR ? cap : kMaxMR;
  }
  // M chunks: at most mc_max rows, equal sizes in rows (each cut into row
  // tiles of balanced heights, RowTiles) so tasks get equal work, and
  // enough of them to give every task work when N has few panels.
  const size_t row_tiles = (g.M + kMaxMR - 1) / kMaxMR;
  size_t m_chunks = (g.M + mc_max - 1) / mc_max;
  const size_t tasks = detail::MaxTasks();
  if (m_chunks * pl.n_panels < tasks) {
    const size_t want = (tasks + pl.n_panels - 1) / pl.n_panels;
    m_chunks = want < row_tiles ? want : row_tiles;
  }
  pl.mc = (g.M + m_chunks - 1) / m_chunks;
  pl.m_chunks = (g.M + pl.mc - 1) / pl.mc;
  // Short row tiles (AVX2's 3 rows; AVX-512 below 12) do few FMAs per
  // 128-byte row of a panel slice: a kc x 32 slice of twice L1d, read from
  // L2 by every tile of the chunk in turn, cost them more than its compute
  // hides. A slice of a third of L1d (kc_l1, 128 k-steps on a 48 KiB L1d)
  // is read from L2 (or memory) by the first tile and from L1 by the
  // others; the parked partial sums cost 2 x rows x 32 floats more per 128
  // k-steps. One Xeon core (family 6 model 167), medians of per-round
  // ratios (tfk-ab), K = N = 4096 from memory (4 layers): AVX2 M = 4 / 8 /
  // 16 / 32 / 64 / 128 / 256 +16 / +25 / +19 / +12 / +5 / +4 / +3 % (two
  // threads M = 8 / 64 +23-26 / +3-4 %), in cache (K = N = 1024) M = 8 /
  // 64 / 128 +6 / +4 / +3-4 %; SSE4 (one-row tiles) M = 8 +17 %, M = 64 /
  // 128 0 to +2 %; AVX-512 (tiles of 8 / 11 / 12 / 13 / 12-13 rows at M = 16 /
  // 32 / 48 / 64 / 128) +7-9 / +3-4 / -1 / -1 / -4 % (two threads M = 16 /
  // 20 / 32 +6-8 / +7-9 / +4-6 %; M = 32 at K = 1024, N = 4096, in L3, -2 %
  // on one and two threads). kc = 96 / 160 measured as 128 within 3 points, 192 (half of
  // L1d) lost all but 2-4 %. Taller calls, whose many tiles hide the
  // slice's reads, keep kc: AVX2 M = 512 the same, M = 2048 at K = N =
  // 1024 -5 %.
  // A chunk of one row tile has nothing to reuse from L1 (and was not
  // measured): it keeps kc.
  if (!pl.decode && g.M <= kL1SliceMaxM && g.K > blk.kc_l1) {
    const RowTiles rt(pl.mc);
    if (rt.n > 1 && rt.base + (rt.extra != 0 ? 1 : 0) <= kL1SliceMaxRows && blk.kc_l1 < pl.kc) {
      pl.kc = blk.kc_l1;
    }
  }
  // Cost of an item for ParallelFor's small-work threshold, in bytes: the
  // panel's weights it streams (decoding is bound by them), or ~flops / 8.
  const size_t rows = g.M < pl.mc ? g.M : pl.mc;
  const size_t flops_cost = rows * g.K * kNR / 4, bytes_cost = g.K * kNR * sizeof(float);
  pl.cost = flops_cost > bytes_cost ? flops_cost : bytes_cost;
  const size_t n_tasks = detail::NumTasks(pl.m_chunks * pl.n_panels, pl.cost);
  pl.next_panel = pl.next_panel && n_tasks <= 1;
  // Fewer M chunks than tasks: tasks share a chunk's packed A (unless they
  // pack it each for themselves: Gemm), which is then
  // streamed out where the CPU gains by it (detail::StreamSharedPackedA;
  // PackATileTransposed has the figures). Where each chunk has a task of its
  // own, its pieces stay in that core's cache, unstreamed (streamed, M =
  // 512, K = 4096 or 1024, N = 1024 lost 2.5 % on two Zen 4 cores).
  pl.stream_a = pl.m_chunks < n_tasks && detail::StreamSharedPackedA();
  return pl;
}

// A call's packed A: [M chunk][k-block][tile][kb][tile rows], and per
// (M chunk, k-block) piece two counters: its row tiles claimed by a packer,
// and its row tiles packed.
struct PackedA {
  float* data;
  std::atomic<uint32_t>* state;  // [piece][claimed, packed]
  size_t k_blocks;
};

// Floats a call's PackedA takes for M rows: the counters, then the data.
HWY_INLINE size_t PackedAFloats(const GemmArgs& g, const GemmPlan& pl) {
  const size_t counters = 2 * pl.m_chunks * ((g.K + pl.kc - 1) / pl.kc);
  return (counters + 15) / 16 * 16 + g.M * g.K;
}

HWY_INLINE PackedA MakePackedA(const GemmArgs& g, const GemmPlan& pl, float* buf) {
  PackedA pa;
  pa.k_blocks = (g.K + pl.kc - 1) / pl.kc;
  const size_t counters = 2 * pl.m_chunks * pa.k_blocks;
  pa.state = reinterpret_cast<std::atomic<uint32_t>*>(buf);
  for (size_t i = 0; i < counters; ++i) new (&pa.state[i]) std::atomic<uint32_t>(0);
  pa.data = buf + (counters + 15) / 16 * 16;
  return pa;
}

// The packed k-block [k0, k0 + kb) of M chunk [m0, m1): with a shared
// PackedA, packed by the tasks that ask for it before it is done, a row
// tile each in turn (tasks that share a chunk reach its pieces together:
// one packing it alone, the other waited for all of it at every k-block:
// two Zen 4 cores, medians of per-round ratios, M = 130, K = N = 1024
// +5-7 %, M = 64 +5 %; K = 4096 and M = 512 the same within 2 %);
// without one (pa.data null), packed into `own` (this task's scratch) now.
HWY_INLINE const float* PackedPiece(const GemmArgs& g, const GemmPlan& pl, const PackedA& pa,
                                    size_t m0, size_t m1, size_t k0, size_t kb, float* own) {
  const float* a = g.A + m0 * g.lda + k0;
  if (pa.data == nullptr) {
    PackA(a, g.lda, m1 - m0, kb, own);
    return own;
  }
  float* dst = pa.data + m0 * g.K + k0 * (m1 - m0);
  std::atomic<uint32_t>* st = pa.state + 2 * (m0 / pl.mc * pa.k_blocks + k0 / pl.kc);
  const RowTiles rt(m1 - m0);
  if (st[1].load(std::memory_order_acquire) == rt.n) return dst;
  for (uint32_t t; (t = st[0].fetch_add(1, std::memory_order_relaxed)) < rt.n;) {
    if (pl.stream_a) {
      PackATile</*kStream=*/true>(a, g.lda, rt, t, kb, dst);
      hwy::FlushStream();  // the streamed lines are visible before the count says so
    } else {
      PackATile<false>(a, g.lda, rt, t, kb, dst);
    }
    st[1].fetch_add(1, std::memory_order_release);
  }
  while (st[1].load(std::memory_order_acquire) != rt.n) std::this_thread::yield();
  return dst;
}

// The row tiles of a panel slice prefetch the slice their task reads next
// into L2, each a share: the first 2 tiles one line a k-step each, or, where
// an M chunk has kPrefetchTiles tiles or more, the first kPrefetchTiles one
// line every kPrefetchTiles / 2 = 2^kPrefetchTilesShift k-steps, which
// leaves the tiles' own misses more room (one Xeon core, M = 64, K = N =
// 4096 +10 %; 8 tiles lost 2-3 % at K = 4096, N = 1024; docs/matmul.md).
constexpr size_t kPrefetchTiles = 4, kPrefetchTilesShift = 1;
static_assert(size_t{2} << kPrefetchTilesShift == kPrefetchTiles, "a line every 2^shift k-steps");

// Work split: items are (M chunk of mc rows, panel) pairs, numbered
// chunk-major, so a task's contiguous range walks the panels of one M chunk
// (its A block stays in cache) before moving on. Every item covers all of K.
// pa: the call's shared packed A, or none (each task packs into its scratch;
// kPackA only). by_group: the call is split into whole groups (an M chunk's
// panels cut into runs of pl.group), the unit of work a task takes;
// otherwise into chunks of at least kMinItemsPerChunk items. Returns false
// if a task could not get its scratch memory (out of memory).
bool GemmRows(const GemmArgs& g, const GemmPlan& pl, const PackedA& pa, bool by_group = false) {
  const size_t kc = pl.kc, n_panels = pl.n_panels, mc = pl.mc, group = pl.group;
  const bool decode = pl.decode, in_place = pl.in_place, stream_next = pl.stream_next;
  std::atomic<bool> ok{true};
  const auto rows = [&](size_t begin, size_t end) HWY_ATTR {
    const bool blocked = g.K > kc;  // partial sums parked in W between k-blocks
    const size_t w_floats = blocked ? group * mc * kNR : 0;
    // Unpacked B: one packed slice; none where decoding reads every panel in
    // place.
    const size_t b_floats = g.packed || (in_place && g.N % kNR == 0) ? 0 : kc * kNR;
    const size_t a_floats = kPackA && pa.data == nullptr ? mc * kc : 0;
    // Partial sums of TileRowsSplit.
    const size_t split_floats = decode && kSplitPanels > 1 ? kSplitMaxRows * kSplitPanels * kNR : 0;
    float* scratch = detail::ThreadScratch(w_floats + b_floats + a_floats + split_floats + 16);
    if (scratch == nullptr) {
      ok.store(false);
      return;
    }
    float* w = scratch;
    float* bs = scratch + w_floats;
    float* own_a = bs + b_floats;
    float* split_w = scratch + (w_floats + b_floats + a_floats + 15) / 16 * 16;  // 64-byte aligned
    for (size_t item = begin; item < end;) {
      // A group: consecutive panels of one M chunk, at most `group` of them.
      const size_t chunk = item / n_panels;
      const size_t p0 = item % n_panels;
      size_t p1 = p0 + group;
      if (p1 > n_panels) p1 = n_panels;
      if (p1 - p0 > end - item) p1 = p0 + (end - item);
      item += p1 - p0;
      const size_t m0 = chunk * mc;
      const size_t m1 = m0 + mc < g.M ? m0 + mc : g.M;
      const RowTiles rt(m1 - m0);
      for (size_t k0 = 0; k0 < g.K; k0 += kc) {
        const size_t kb = g.K - k0 < kc ? g.K - k0 : kc;
        const bool first = k0 == 0, last = k0 + kb == g.K;
        const float* ap = kPackA ? PackedPiece(g, pl, pa, m0, m1, k0, kb, own_a) : nullptr;
        size_t p = p0;
        // Decoding rows (one row tile) several panels at a time where a tile
        // exists for them (RowPanelsForRows): packed panels, or (in place,
        // M = 1) whole panels of B itself. One row reads A unpacked.
        size_t dp = 1;
        const RowPanelsFn rows_panels =
            decode && rt.n == 1 ? RowPanelsForRows(m1 - m0, dp) : nullptr;
        if (rows_panels != nullptr && dp > 1) {
          // A: one row unpacked, else packed as [K][rows].
          const float* a = m1 - m0 == 1 ? g.A + m0 * g.lda : ap;
          const size_t a_ks = m1 - m0 == 1 ? 1 : m1 - m0;
          for (; p + dp <= p1 && (!in_place || (p + dp) * kNR <= g.N); p += dp) {
            const size_t col0 = p * kNR;
            const float* b = in_place ? g.B + col0 : g.packed + p * g.K * kNR;
            rows_panels(g.K, a, a_ks, b, in_place ? kNR : g.K * kNR, in_place ? g.ldb : kNR,
                        nullptr, true, true, g.C + m0 * g.ldc + col0, g.ldc, g.N - col0, m0,
                        col0, g.epi,
                        m1 - m0 == 1 ? pl.one_row_pf_dist : pl.rows_pf_dist, g.K, ~0u,
                        pl.decode_pf_l1);
          }
        }
        if (decode && kSplitPanels > 1 && rt.n == 1 && g.packed != nullptr &&
            m1 - m0 >= kSplitMinRows && m1 - m0 <= kSplitMaxRows) {
          for (; p + kSplitPanels <= p1; p += kSplitPanels) {
            const size_t col0 = p * kNR;
            TileRowsSplit(g.K, pl.split_kc, ap, m1 - m0, g.packed + p * g.K * kNR, split_w,
                          g.C + m0 * g.ldc + col0, g.ldc, g.N - col0, m0, col0, g.epi,
                          pl.split_pf_dist, pl.decode_pf_l1);
          }
        }
        for (; p < p1; ++p) {
          const float* bslice;
          size_t ldk = kNR;
          if (g.packed) {
            bslice = g.packed + (p * g.K + k0) * kNR;
          } else if (in_place && (p + 1) * kNR <= g.N) {
            bslice = g.B + k0 * g.ldb + p * kNR;
            ldk = g.ldb;
          } else {
            PackPanelSlice(g.B, g.ldb, g.layout, g.N, p, k0, kb, bs);
            bslice = bs;
          }
          const size_t col0 = p * kNR;
          const size_t n_valid = g.N - col0 < kNR ? g.N - col0 : kNR;
          // The slice this task reads next: the next panel of the group, or
          // the group's first panel in the next k-block (none at the end).
          // Rows of 32 floats (two lines), next_ld floats apart: the packed
          // panel, or B itself.
          const float* next = nullptr;
          size_t next_kb = 0;  // its k-steps (rows): 2 next_kb lines
          const size_t next_ld = g.packed ? kNR : g.ldb;
          if (stream_next) {
            size_t np = 0, nk0 = 0;
            if (p + 1 < p1) {
              np = p + 1, nk0 = k0, next_kb = kb;
            } else if (k0 + kb < g.K) {
              np = p0, nk0 = k0 + kb;
              next_kb = g.K - nk0 < kc ? g.K - nk0 : kc;
            }
            if (next_kb != 0) {
              next = g.packed ? g.packed + (np * g.K + nk0) * kNR : g.B + nk0 * g.ldb + np * kNR;
            }
          }
          // Tile t of the first pf_tiles prefetches rows [t h, (t + 1) h) of
          // the next slice, h = kb / pf_tiles (a line every pf_tiles / 2
          // k-steps), if they lie within it (an odd kb, on the last k-block
          // only, overlaps the next tile's share by a line).
          // A decoding tile with next_panel asks for the next panel itself.
          size_t pf_tiles = 2;
          if (rt.n >= kPrefetchTiles && kb % kPrefetchTiles == 0) pf_tiles = kPrefetchTiles;
          const size_t pf_shift = pf_tiles == 2 ? 0 : kPrefetchTilesShift;
          const size_t h = kb / pf_tiles;
          for (size_t t = 0; t < rt.n; ++t) {
            const size_t r = m0 + rt.Start(t), rows = rt.Rows(t);
            float* wt = w + ((p - p0) * mc + (r - m0)) * kNR;
            const float* a = kPackA ? ap + (r - m0) * kb : g.A + r * g.lda + k0;
            const float* pf = nullptr;
            if (pl.next_panel) {
              if (p + 1 < n_panels) pf = g.packed + (p + 1) * g.K * kNR;
            } else if (next != nullptr && t < pf_tiles && (t + 1) * h <= next_kb) {
              pf = next + t * h * next_ld;
            }
            TileForRows(rows, decode)(kb, a, g.lda, bslice, ldk, wt, first, last,
                                      g.C + r * g.ldc + col0, g.ldc, n_valid, r, col0, g.epi, pf,
                                      next_ld, pf_shift, pl.decode_pf_l1);
          }
        }
      }
    }
  };
  if (by_group) {
    const size_t per_chunk = (n_panels + group - 1) / group;
    detail::ParallelFor(pl.m_chunks * per_chunk, pl.cost * group,
                        [&](size_t begin, size_t end) HWY_ATTR {
                          for (size_t u = begin; u < end; ++u) {
                            const size_t first = u / per_chunk * n_panels + u % per_chunk * group;
                            const size_t rest = n_panels - u % per_chunk * group;
                            rows(first, first + (group < rest ? group : rest));
                          }
                        });
  } else {
    detail::ParallelFor(pl.m_chunks * n_panels, pl.cost, rows, kMinItemsPerChunk);
  }
  return ok.load();
}

// Returns false if memory ran out (a task's scratch, or the packed A).
bool Gemm(const GemmArgs& g) {
  // M = 1 with [N, K] B: each panel's rows of B read in place (GemvPanelNK).
  // K = N = 1024, one Zen 4 core: 27.4 GB/s of B, 5.0 with B's slices
  // packed (docs/matmul.md).
  if (g.packed == nullptr && g.layout == TFK_LAYOUT_NK && g.M == 1) {
    const size_t n_panels = NumPanels(g.N);
    detail::ParallelFor(n_panels, g.K * kNR * sizeof(float), [&](size_t begin, size_t end) HWY_ATTR {
      for (size_t p = begin; p < end; ++p) GemvPanelNK(g.K, g.A, g.B, g.ldb, g.N, p, g.C, g.epi);
    });
    return true;
  }
  // A call that runs as one task packs each piece into its own scratch right
  // before use, again for each group of panels: that copy stays in L2, where
  // the shared buffer's pieces land in memory not yet cached (M = 2048,
  // K = N = 1024, one thread: shared 3 % slower).
  const GemmPlan whole = MakePlan(g);
  const size_t items = whole.m_chunks * whole.n_panels;
  const size_t tasks = detail::NumTasks(items, whole.cost);
  if (!kPackA || tasks <= 1) return GemmRows(g, whole, PackedA{});
  // Tasks at most two to an M chunk pack the A they use each for
  // themselves, as a single task does, a group of panels at a time, and
  // take whole groups as their units of work (GemmRows, by_group): a task
  // packs A once a group, and one that runs out takes whole groups from
  // the others. Groups are made as long as a task's panels where their
  // partial sums take at most a quarter of L2, and no longer than a task's
  // share, so every task gets one. Against one packing per call into a
  // buffer all tasks read (where tasks shared an M chunk, each core read
  // the half of A the other packed from that core's cache and, in the next
  // call, stored over lines the other still held; where each had its own,
  // the buffer, up to 32 MiB, went to memory and back, where a group's copy
  // stays in L2), two threads
  // of a Xeon (family 6 model 167), medians of per-round ratios in both
  // orders: M = 64, K = 4096, N = 256 / 512 / 1024 / 4096 (4 / 8 / 16 / 64
  // panels a task) +22 / +8 / +6.5 / +2.5 % (K = 1024, N = 256 +41 %);
  // M = 130, K = 1024, N = 512 / 1024 +8-9 / +6 %; M = 2048, K = 4096 /
  // 1024, N = 1024 +10 / +4 %; M = 2048, K = N = 4096 +3 %; M = 512,
  // K = N = 1024 +2.5 %; M = 512, K = N = 4096 -1 % (each group packs A
  // again: 4 times); M = 1024, K = 1024, N = 4096 -1 %. Tasks of fewer
  // panels gained more (M = 64, K = 4096, N = 64 / 128 +42 / +38 %; M = 32,
  // K = 4096, N = 128 +62 %; M = 130, K = 1024, N = 96 +20 %; M = 256,
  // K = 1024, N = 64 +25 %), each then packing twice what it did. With
  // more tasks on an M chunk, each would pack all of it: packing costs
  // about as much as one panel's FMAs on the same rows, so s tasks of p
  // panels an M chunk would pack s times the A of one packing, 1 / p of
  // their work (a 16-panel share: 6 %), and take whole groups, one a task
  // where the share is one group, where 4-panel chunks of a shared packing
  // let the others absorb a slow core (16 threads of a 16-vCPU Xeon whose
  // cores ran at uneven speeds, M = 512, K = N = 4096, 8 tasks an M chunk:
  // 8-panel chunks 1075-1139, 4-panel chunks 1204-1298 GFLOP/s). Not
  // measurable on two cores, so such tasks keep the shared buffer, as
  // measured there. So do decoding shapes (packed weights with M <= kMaxMR,
  // or M = 1 reading B in place), bound by reading the weights, whose tasks
  // keep their small chunks of work for balance.
  const size_t per_task = (items + tasks - 1) / tasks;
  const size_t sharers = (tasks + whole.m_chunks - 1) / whole.m_chunks;  // tasks an M chunk
  if (!whole.decode && sharers <= 2 && detail::PackAPerTask()) {
    GemmPlan pl = whole;
    const size_t fit = GetBlocking().l2 / 4 / (pl.mc * kNR * sizeof(float));
    const size_t longest = per_task < fit ? per_task : fit;
    if (pl.group < longest) pl.group = longest;
    if (pl.group > per_task) pl.group = per_task;  // a group at least for every task
    return GemmRows(g, pl, PackedA{}, /*by_group=*/true);
  }
  // Slabs of rows whose packed A fits kPackedABudget floats (one slab for
  // most calls): each slab is a multiplication of its own, so its C elements
  // are still single FMA chains over k in order.
  // Equal slabs in whole row tiles (M = 2048 at K = 4096: 2 x 1024, not
  // 2044 + 4, whose 4 rows would read all of B for little work).
  const size_t max_rows = kPackedABudget / g.K < kMaxMR ? kMaxMR : kPackedABudget / g.K;
  const size_t n_slabs = (g.M + max_rows - 1) / max_rows;
  const size_t slab = ((g.M + n_slabs - 1) / n_slabs + kMaxMR - 1) / kMaxMR * kMaxMR;
  for (size_t s0 = 0; s0 < g.M; s0 += slab) {
    GemmArgs sg = g;
    sg.M = g.M - s0 < slab ? g.M - s0 : slab;
    sg.A = g.A + s0 * g.lda;
    sg.C = g.C + s0 * g.ldc;
    if (g.epi.residual != nullptr) sg.epi.residual = g.epi.residual + s0 * g.epi.ldr;
    const GemmPlan pl = MakePlan(sg);
    detail::CallBuffer buf(PackedAFloats(sg, pl));
    if (buf.get() == nullptr || !GemmRows(sg, pl, MakePackedA(sg, pl, buf.get()))) return false;
  }
  return true;
}

// Packs all of W ([K, N] or [N, K]) into n_panels panels of [K][32]
// (tfk_linear_create).
void PackPanels(const float* W, size_t ldw, tfk_layout layout, size_t K, size_t N,
                float* panels) {
  for (size_t p = 0; p < NumPanels(N); ++p) {
    PackPanelSlice(W, ldw, layout, N, p, 0, K, panels + p * K * kNR);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <math.h>
#include <unistd.h>

#include <new>

#include "lib/dispatch.h"
#include "lib/status.h"

namespace tfk {
HWY_EXPORT(Gemm);
HWY_EXPORT(PackPanels);

Blocking GetBlocking() {
  static const Blocking blocking = [] {
    const size_t l1 = detail::L1dCacheBytes(), l2 = detail::L2CacheBytes();
    Blocking b;
    b.kc = l1 * 2 / (kNR * sizeof(float));  // twice L1d, see matmul.h
    b.kc = b.kc < 64 ? 64 : (b.kc > 512 ? 512 : b.kc);
    b.kc_l1 = l1 / 3 / (kNR * sizeof(float)) / 16 * 16;  // a third of L1d
    b.kc_l1 = b.kc_l1 < 32 ? 32 : (b.kc_l1 > b.kc ? b.kc : b.kc_l1);
    b.mc = l2 / 2 / (b.kc * sizeof(float));  // half of L2
    b.mc = b.mc < 48 ? 48 : (b.mc > 480 ? 480 : b.mc);
    b.nc_panels = 8;
    b.l2 = l2;
    return b;
  }();
  return blocking;
}

}  // namespace tfk

struct tfk_linear {
  size_t K, N;
  float* panels;  // [n_panels][K][32], 64-byte aligned
  float* bias;    // [n_panels * 32] or null
  int act;
  size_t bytes;
};

namespace {

using namespace tfk::detail;  // NOLINT

// B [K,N] (KN, ldb >= N) or [N,K] (NK, ldb >= K).
tfk_status CheckB(const char* fn, const char* name, const float* B, size_t ldb,
                  const tfk_layout& layout, size_t K, size_t N) {
  if (RawEnum(layout) != TFK_LAYOUT_KN && RawEnum(layout) != TFK_LAYOUT_NK) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "layout (%d) is not a tfk_layout", RawEnum(layout));
  }
  return layout == TFK_LAYOUT_KN ? CheckMatrix(fn, name, B, K, N, ldb)
                                 : CheckMatrix(fn, name, B, N, K, ldb);
}

bool Overlaps(const float* a, size_t rows_a, size_t cols_a, size_t lda, const float* b,
              size_t rows_b, size_t cols_b, size_t ldb) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  const uintptr_t a1 = a0 + ((rows_a - 1) * lda + cols_a) * sizeof(float);
  const uintptr_t b1 = b0 + ((rows_b - 1) * ldb + cols_b) * sizeof(float);
  return a0 < b1 && b0 < a1;
}

tfk_status CheckAct(const char* fn, const tfk_activation& act) {
  const int a = RawEnum(act);
  if (a == TFK_ACT_NONE || a == TFK_ACT_RELU || a == TFK_ACT_GELU_ERF || a == TFK_ACT_GELU_TANH ||
      a == TFK_ACT_SILU) {
    return TFK_SUCCESS;
  }
  return Fail(TFK_INVALID_ARGUMENT, fn, "act (%d) is not a tfk_activation", a);
}

// Runs the multiplication. Out of memory for the per-thread workspace is the
// one failure after validation; C may then be partly written.
tfk_status Run(const char* fn, const tfk::GemmArgs& g) {
  if (TFK_DISPATCH(tfk::Gemm)(g)) return TFK_SUCCESS;
  return Fail(TFK_OUT_OF_MEMORY, fn, "cannot allocate the per-thread workspace");
}

}  // namespace

extern "C" {

TFK_API tfk_status tfk_matmul(size_t M, size_t N, size_t K, float alpha, const float* A,
                              size_t lda, const float* B, size_t ldb, tfk_layout b_layout,
                              float beta, float* C, size_t ldc) {
  const char* fn = "tfk_matmul";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckSize(fn, "M", M));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "N", N));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "K", K));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "A", A, M, K, lda));
  TFK_RETURN_IF_ERROR(CheckB(fn, "B", B, ldb, b_layout, K, N));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "C", C, M, N, ldc));
  if (!isfinite(alpha)) return Fail(TFK_INVALID_ARGUMENT, fn, "alpha (%g) is not finite", alpha);
  if (!isfinite(beta)) return Fail(TFK_INVALID_ARGUMENT, fn, "beta (%g) is not finite", beta);
  if (Overlaps(C, M, N, ldc, A, M, K, lda)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "C overlaps A");
  }
  const bool kn = b_layout == TFK_LAYOUT_KN;
  if (Overlaps(C, M, N, ldc, B, kn ? K : N, kn ? N : K, ldb)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "C overlaps B");
  }
  // alpha = 0 reads neither A nor B, as BLAS: C = beta C (+0 where beta =
  // 0), not NaN from an inf or a NaN, or an overflowing product, there.
  if (alpha == 0.0f) {
    for (size_t i = 0; beta != 1.0f && i < M; ++i) {
      float* c = C + i * ldc;
      if (beta == 0.0f) {
        memset(c, 0, N * sizeof(float));
      } else {
        for (size_t j = 0; j < N; ++j) c[j] *= beta;
      }
    }
    return TFK_SUCCESS;
  }
  tfk::GemmArgs g{M, N, K, A, lda, nullptr, B, ldb, b_layout, C, ldc, {}};
  g.epi.alpha = alpha;
  g.epi.beta = beta;
  return Run(fn, g);
}

TFK_API tfk_status tfk_linear_create(tfk_linear** out, size_t K, size_t N, const float* W,
                                     size_t ldw, tfk_layout layout, const float* bias,
                                     tfk_activation act) {
  const char* fn = "tfk_linear_create";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "out", out));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "K", K));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "N", N));
  TFK_RETURN_IF_ERROR(CheckB(fn, "W", W, ldw, layout, K, N));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "bias", bias, N));
  TFK_RETURN_IF_ERROR(CheckAct(fn, act));
  const size_t n_panels = tfk::NumPanels(N);
  if (K > SIZE_MAX / sizeof(float) / tfk::kNR / n_panels) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "K x N (%zu x %zu) is too large", K, N);
  }
  const size_t panel_bytes = n_panels * K * tfk::kNR * sizeof(float);
  const size_t bias_bytes = bias ? n_panels * tfk::kNR * sizeof(float) : 0;
  tfk_linear* h = new (std::nothrow) tfk_linear{K, N, nullptr, nullptr, act, 0};
  if (h != nullptr) {
    h->panels = static_cast<float*>(tfk::detail::AllocateLarge(panel_bytes));
    if (bias && h->panels != nullptr) {
      h->bias = static_cast<float*>(aligned_alloc(64, (bias_bytes + 63) / 64 * 64));
    }
  }
  if (h == nullptr || h->panels == nullptr || (bias && h->bias == nullptr)) {
    tfk_linear_destroy(h);
    return Fail(TFK_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of packed weights",
                panel_bytes + bias_bytes);
  }
  h->bytes = panel_bytes + bias_bytes + sizeof(tfk_linear);
  TFK_DISPATCH(tfk::PackPanels)(W, ldw, layout, K, N, h->panels);
  if (bias) {
    memcpy(h->bias, bias, N * sizeof(float));
    for (size_t j = N; j < n_panels * tfk::kNR; ++j) h->bias[j] = 0.0f;
  }
  *out = h;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_linear_forward(const tfk_linear* h, size_t M, const float* X, size_t ldx,
                                      float* Y, size_t ldy, const float* R, size_t ldr) {
  const char* fn = "tfk_linear_forward";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "layer", h));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "M", M));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "X", X, M, h->K, ldx));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "Y", Y, M, h->N, ldy));
  if (Overlaps(Y, M, h->N, ldy, X, M, h->K, ldx)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "Y overlaps X");
  }
  if (R != nullptr) {
    TFK_RETURN_IF_ERROR(CheckMatrix(fn, "R", R, M, h->N, ldr));
    TFK_RETURN_IF_ERROR(CheckAliasing(fn, "R", R, ldr, "Y", Y, ldy, M, h->N));
  }
  tfk::GemmArgs g{M, h->N, h->K, X, ldx, h->panels, nullptr, 0, TFK_LAYOUT_KN, Y, ldy, {}};
  g.epi.bias = h->bias;
  g.epi.act = h->act;
  g.epi.residual = R;
  g.epi.ldr = ldr;
  return Run(fn, g);
}

TFK_API tfk_status tfk_linear_info(const tfk_linear* h, size_t* K, size_t* N, size_t* bytes) {
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull("tfk_linear_info", "layer", h));
  if (K) *K = h->K;
  if (N) *N = h->N;
  if (bytes) *bytes = h->bytes;
  return TFK_SUCCESS;
}

TFK_API void tfk_linear_destroy(tfk_linear* h) {
  if (h == nullptr) return;
  free(h->panels);
  free(h->bias);
  delete h;
}

}  // extern "C"
#endif  // HWY_ONCE
