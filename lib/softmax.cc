// Softmax over rows: public entry and per-target body.
// Contract: include/tfk/tfk.h (tfk_softmax); numerics: docs/numerics.md.
//
// Three passes over each row, the row staying in L1/L2 after the first:
//   1. m = max(scale * x) (= scale * max(x) or scale * min(x));
//   2. y = exp(scale * x - m) (one FMA for the argument; targets without FMA,
//      such as SSE4, round scale * x first), s = sum(y);
//   3. y *= 1 / s.
// Rows of up to 16 vectors go two at a time (SoftmaxPair), with the same
// bits. A row of 2048 floats is 8 KiB, a row of 32000 is 125 KiB: passes 2 and 3
// re-read from L1 or L2, so memory traffic is one read of x and one write of
// y. Outputs far larger than the last-level cache (see SoftmaxRows) are
// written with streaming stores from a per-thread scratch row, which saves
// reading y's lines first; on AVX-512 their rows of 4 KiB or more also
// find the next row's maximum (its pass 1) during passes 2 and 3 (NextRow),
// and unmasked ones do pass 3 during the next row's pass 2 (SoftmaxPiped).
// The exponential is a reduced-range one
// (ExpNonPositive) since its argument is never positive; unlike Highway
// 1.0.3's Exp, which returns 0 for NaN, it keeps NaN, so a NaN anywhere in a
// row makes the sum and so the row NaN.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <math.h>
#include <stdint.h>

#include "hwy/highway.h"
#include "lib/elementwise-inl.h"
#include "lib/exp-inl.h"
#include "lib/fpenv.h"
#include "lib/memory.h"
#include "lib/softmax.h"
#include "lib/threading.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max(x[0, n)) (min if `negative`), n >= Lanes(d). The last vector may
// overlap the previous ones; max and min do not mind. A NaN need not survive
// here (x86 max drops it): it makes its exponential, hence the sum and the
// whole row, NaN in pass 2.
template <class D>
HWY_INLINE float RowExtreme(D d, const float* x, size_t n, bool negative) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const auto reduce = [&](V acc, V v) HWY_ATTR {
    return negative ? hn::Min(acc, v) : hn::Max(acc, v);
  };
  // Eight running extremes: a max has a latency of 4 cycles and two can
  // start per cycle, so with two chains (as before) this pass took 2 cycles
  // a vector, bound by latency rather than by its loads. Softmax [64, 2048]
  // (in L2), Xeon family 6 model 207, medians of per-round ratios: AVX-512
  // +11 % on one thread, +8 % on two; AVX2 +19 %; SSE4 +13 %; [8192, 512]
  // AVX-512 +8 %. The maximum is exact, so the bits do not change.
  constexpr size_t kM = 8;
  V ext[kM];
#pragma GCC unroll 8
  for (size_t k = 0; k < kM; ++k) ext[k] = hn::Set(d, negative ? INFINITY : -INFINITY);
  size_t i = 0;
  for (; i + kM * N <= n; i += kM * N) {
#pragma GCC unroll 8
    for (size_t k = 0; k < kM; ++k) ext[k] = reduce(ext[k], hn::LoadU(d, x + i + k * N));
  }
  for (; i + N <= n; i += N) ext[0] = reduce(ext[0], hn::LoadU(d, x + i));
  ext[1] = reduce(ext[1], hn::LoadU(d, x + n - N));
#pragma GCC unroll 8
  for (size_t k = kM / 2; k > 0; k /= 2) {
    for (size_t j = 0; j < k; ++j) ext[j] = reduce(ext[j], ext[j + k]);
  }
  return hn::GetLane(negative ? hn::MinOfLanes(d, ext[0]) : hn::MaxOfLanes(d, ext[0]));
}

// A row with a NaN among its valid entries comes out as C's NAN (the
// positive quiet NaN, 0x7fc00000) in every valid column, whatever NaN came in: x86's max drops a NaN operand
// or keeps it depending on the order it meets it, so the row's maximum may
// be finite, infinite or NaN, and which one would otherwise show in the
// output's bits (the input's NaN passed through, or a NaN made here). The
// order differs where a row's maximum is found (RowExtreme, or the row
// before it: NextRow), which depends on where a task's rows begin, so
// without this the bits could depend on the thread count.
HWY_INLINE void NanRow(float* y, size_t n) {
  for (size_t k = 0; k < n; ++k) y[k] = NAN;
}

// |m| at or past which a row takes LargeScaledRow: the FMA argument
// scale x - m (exact product, rounded m) is up to ulp(m) / 2 above 0 at the
// row's extreme, 1 at 2^24 and past the exponential's range (88) from 2^31,
// where the row became inf / inf = NaN.
constexpr float kLargeScaled = 0x1p24f;

// Softmax of x[0, n) into y (equal or disjoint; n >= Lanes(d)) for a row
// whose m = fl(scale * extreme) is finite with |m| >= kLargeScaled: the
// arguments are fl(scale x) - m, the product rounded as m's was, so the
// extreme's is exactly 0 and every other one <= 0 (rounding is monotone);
// the rounding of the product is within the bound's |scale x| u term. The
// product goes through an empty asm statement, which GCC cannot see into:
// it would otherwise fuse the multiplication and the subtraction into the
// very FMA this avoids (its default -ffp-contract=fast). Plain vector
// loops: such scales are rare.
template <class D>
HWY_NOINLINE void LargeScaledRow(D d, const float* x, float* y, size_t n, float scale, float m) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t n_full = n - n % N;
  const V vscale = hn::Set(d, scale), vm = hn::Set(d, m);
  const auto arg = [&](size_t i) HWY_ATTR {
    V product = hn::Mul(hn::LoadU(d, x + i), vscale);
    asm("" : "+v"(product.raw));  // rounded here, not fused into the Sub
    return hn::Sub(product, vm);
  };
  const V last = ExpNonPositive(d, arg(n - N));  // before anything is stored
  V s = hn::Zero(d);
  for (size_t i = 0; i < n_full; i += N) {
    const V e = ExpNonPositive(d, arg(i));
    hn::StoreU(e, d, y + i);
    s = hn::Add(s, e);
  }
  if (n_full != n) s = hn::Add(s, hn::IfThenZeroElse(hn::FirstN(d, N - n % N), last));
  const float sum = hn::GetLane(hn::SumOfLanes(d, s));
  if (isnan(sum)) return NanRow(y, n);
  const V inv = hn::Set(d, 1.0f / sum);
  for (size_t i = 0; i < n_full; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), inv), d, y + i);
  if (n_full != n) hn::StoreU(hn::Mul(last, inv), d, y + n - N);
}

// A task's rows whose outputs are streamed come from memory. On AVX-512,
// where rows of at least kPrefetchAhead floats (4 KiB) follow each other,
// each row finds the extreme of the next (pass 1 of that row, which is then
// skipped) during its own passes 2 and 3: one vector of the next row per
// two vectors of those passes, its first half in pass 2 and the rest in
// pass 3, each line prefetched into L2 kPrefetchAhead floats before it is
// read (in address order: past the row's end, where rows are dense, that
// is the row after it). So the reads from memory go on while both passes
// compute and write, and no pass waits for them alone. Elsewhere passes 2
// and 3 prefetch the next row into L2 (half each, PrefetchNextRowHalf) and
// pass 1 reads it from there. One Xeon (family 6 model 167), two library
// copies alternating in one process, medians over 5 processes of the
// medians of per-round ratios, 1 / 2 threads: AVX-512 [2048, 32000] +10 /
// +7 %, [65536, 2048] +3 / +4 %; fused at every row length, [131072, 1024]
// -0.5 / +3 % and [262144, 512] +5 / -3 %; on AVX2 [65536, 2048] -3 / -4 %
// (twice the operations a float, so the extra loads and maxima cost more
// than pass 1 did). Loading the next row without the prefetch ahead was
// 6-10 % slower than the halves: each load waited for memory. The fused
// loops are their own instantiation (SoftmaxValid's kFuse): with the
// checks for both kinds of next row in one loop, [65536, 2048] lost 2-4 %
// instead of gaining. The maximum is exact and ignores order, so the bits
// are those of pass 1 (with a NaN in the row, which the maximum may drop,
// the row is NaN either way).
constexpr bool kFuseNextRow = HWY_MAX_BYTES >= 64;

// A next row of kNextStreamsMinCols floats (64 KiB) or more is read as
// kNextStreams streams: each half cut into four segments, a vector of each
// in turn, each line prefetched into L2 kNextStreamsAhead floats (512 bytes)
// before it is read (the first lines of a segment are not). One core here
// reads one sequential stream at ~12 GB/s and four interleaved ones at 15-17
// (as the decoding matmul and memory/read found); with pass 3 writing to
// scratch instead of y, the rows' reads alone had taken as long as one
// stream's. Same Xeon and method (one process each), one thread, four
// streams against one (each prefetched 4 KiB ahead): 16384 / 20000 / 32000 /
// 40960 / 65536 / 128256 columns +2 / +1 / +7 / +10 / +12 / +9 %; two
// threads 32000 / 128256 +1 / +8 %. Then 512 bytes ahead instead of 4 KiB (2
// KiB ahead in all, against 16 KiB): 16384 / 20000 / 32000 / 40960 / 128256
// +4 / +6 / +3 / +2 / +2 %, two threads 32000 +2 %; 1 KiB about as much, 256
// bytes less. Rows of 2048-4096 lost 25-40 % as four streams. 2 / 6 / 8
// streams gained less than 4 at 32000 (+2 / +4 / 0 %), as did prefetching
// pass 3's segment heads during pass 2. The variant runs out of line
// (SoftmaxFusedStreams).
constexpr size_t kNextStreams = 4, kNextStreamsMinCols = 16384;
constexpr size_t kNextStreamsAhead = 128;

struct NextRow {
  const float* x;  // the next row, n >= 2 Lanes(d) valid columns
  size_t n;
  float extreme;   // found by the row before it: max(x) (min(x) if scale < 0)
};

// A streamed row whose exponentials wait in scratch for pass 3 (y = tmp *
// inv), which the next row's pass 2 does a vector at a time (kPipe) and
// FinishPending completes: the whole 64-byte lines of y are streamed, the
// elements before and after them take ordinary stores, as in WriteRow.
// pos == lines_end (as for none) once every line is out.
struct PendingRow {
  const float* tmp = nullptr;  // null: none
  float* y = nullptr;
  size_t n = 0;
  size_t pos = 0, lines_end = 0;  // lines of y [pos, lines_end) to go
  float inv = 0.0f;
};

HWY_INLINE PendingRow MakePending(const float* tmp, float* y, size_t n, float inv) {
  PendingRow p{tmp, y, n, ElementsBeforeLine(y, n), 0, inv};
  p.lines_end = p.pos + (n - p.pos) / kLineFloats * kLineFloats;
  return p;
}

// The rest of p's row (n >= Lanes(d)); p becomes none.
template <class D>
HWY_INLINE void FinishPending(D d, PendingRow& p) {
  if (p.tmp == nullptr) return;
  const size_t N = hn::Lanes(d);
  const hn::CappedTag<float, 1> d1;
  const auto v = hn::Set(d, p.inv);
  for (; p.pos < p.lines_end; p.pos += N) {  // N divides 16
    hn::Stream(hn::Mul(hn::LoadU(d, p.tmp + p.pos), v), d, p.y + p.pos);
  }
  const size_t head = ElementsBeforeLine(p.y, p.n);
  for (size_t i = 0; i < head; ++i) {
    hn::StoreU(hn::Mul(hn::LoadU(d1, p.tmp + i), hn::Set(d1, p.inv)), d1, p.y + i);
  }
  for (size_t i = p.lines_end; i < p.n; i += N) {
    const size_t at = i + N <= p.n ? i : p.n - N;  // the last vector may overlap
    hn::StoreU(hn::Mul(hn::LoadU(d, p.tmp + at), v), d, p.y + at);
  }
  p = PendingRow();
}

// Softmax of x[0, n) into y[0, n); n >= Lanes(d). x and y equal or disjoint.
// Pass 2 writes the exponentials to tmp: y itself, or with kStream a scratch
// row in L1/L2, from which pass 3 streams the result to y (no read of y's
// lines from memory before they are written). next: the row computed next
// (null: none), prefetched during passes 2 and 3 (into L2 with kStream),
// its first half in pass 2 and its second half in pass 3, one line per two
// lines of x, so that its reads go on while pass 3 writes
// (PrefetchNextRowHalf). known_extreme: this row's extreme if the row
// before found it (else null); fused: the next row, whose extreme this row
// finds instead of prefetching it (null: none; with kStream only, NextRow),
// reading it as kNS streams. kPipe (with kFuse): pass 2 also reads the
// whole next row, a vector per vector of x, and does the pass 3 of the row
// before (*pending) a vector per vector of x; this row's pass 3 is left in
// *pending for the next (SoftmaxPiped).
template <bool kStream, bool kFuse = false, size_t kNS = 1, bool kPipe = false, class D>
HWY_INLINE void SoftmaxValid(D d, const float* x, float* y, size_t n, float scale,
                             float* tmp, const float* next, const float* known_extreme,
                             NextRow* fused, PendingRow* pending = nullptr) {
  static_assert(!kPipe || (kStream && kFuse), "kPipe comes with kStream and kFuse");
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const V vscale = hn::Set(d, scale);
  const size_t n_full = n - n % N;
  const bool negative = scale < 0.0f;
  // The next row's pass 1 (NextRow), kept in registers: its running
  // extreme and the next vector to read.
  V next_ext = hn::Set(d, negative ? INFINITY : -INFINITY);
  size_t next_pos = 0;
  const size_t next_n = kFuse ? fused->n : 0;
  // The part of the next row read in pass 2: half, or with kPipe all of its
  // whole vectors.
  const size_t next_half = kPipe ? next_n / N * N : next_n / 2 / N * N;
  const auto add_next = [&](V v) HWY_ATTR {
    next_ext = negative ? hn::Min(next_ext, v) : hn::Max(next_ext, v);
  };
  // With kNS > 1 each half's first kNS seg_vecs[half] vectors are read in
  // another order, kNS streams seg_vecs[half] vectors apart, the same
  // vectors once each (the maximum ignores order).
  const size_t seg_vecs[2] = {next_half / N / kNS, (next_n - next_half) / N / kNS};
  // Each stream's lines are prefetched kAhead floats before they are read.
  constexpr size_t kAhead = kNS > 1 ? kNextStreamsAhead : kPrefetchAhead;
  // The vector at next_pos if it ends by `limit`.
  const auto next_step = [&](size_t limit) HWY_ATTR {
    if (next_pos + N > limit) return;
    size_t at = next_pos;
    if constexpr (kNS > 1) {
      const size_t base = next_pos < next_half ? 0 : next_half;
      const size_t len = seg_vecs[base != 0];
      const size_t q = (next_pos - base) / N;  // vector within the half
      if (q < kNS * len) at = base + ((q % kNS) * len + q / kNS) * N;
    }
    if (at % kLineFloats < N) {
      // Past the row's end this may leave the caller's buffer: the address
      // is formed as an integer (a prefetch of any address is harmless).
      PrefetchToL2(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(fused->x) +
                                                 (at + kAhead) * sizeof(float)));
    }
    add_next(hn::LoadU(d, fused->x + at));
    next_pos += N;
  };
  // kPipe: the row before's pass 3, a line of y at a time.
  const float* prev_tmp = kPipe ? pending->tmp : nullptr;
  float* prev_y = kPipe ? pending->y : nullptr;
  size_t prev_pos = kPipe ? pending->pos : 0;
  const size_t prev_end = kPipe ? pending->lines_end : 0;
  const V prev_inv = hn::Set(d, kPipe ? pending->inv : 0.0f);
  const auto prev_step = [&]() HWY_ATTR {
    if (!kPipe || prev_pos + N > prev_end) return;
    hn::Stream(hn::Mul(hn::LoadU(d, prev_tmp + prev_pos), prev_inv), d, prev_y + prev_pos);
    prev_pos += N;
  };
  // The rest of the next row and its last vector (which may overlap the
  // ones before it), and with kPipe the rest of the row before; every
  // return path calls this.
  const auto next_finish = [&]() HWY_ATTR {
    if (kPipe) {
      pending->pos = prev_pos;
      FinishPending(d, *pending);
    }
    if (!kFuse) return;
    while (next_pos + N <= next_n) next_step(next_n);
    add_next(hn::LoadU(d, fused->x + next_n - N));
    fused->extreme =
        hn::GetLane(negative ? hn::MinOfLanes(d, next_ext) : hn::MaxOfLanes(d, next_ext));
  };

  // Pass 1: m = max(scale * x) = scale * max(x) for scale >= 0 (rounding is
  // monotone), scale * min(x) for scale < 0 (RowExtreme). Skipped where the
  // row before it found the extreme (NextRow).
  const float extreme = known_extreme != nullptr ? *known_extreme : RowExtreme(d, x, n, negative);
  const float m = scale * extreme;
  if (m == INFINITY) {  // exp(inf - inf): NaN, as the definition gives
    NanRow(y, n);
    next_finish();
    return;
  }
  if (m == -INFINITY) {  // every entry -inf or NaN (x86 max may drop a NaN)
    bool nan = false;
    for (size_t k = 0; k < n; ++k) nan |= isnan(x[k]);
    for (size_t k = 0; k < n; ++k) y[k] = nan ? NAN : 0.0f;
    next_finish();
    return;
  }
  if (!(fabsf(m) < kLargeScaled)) {
    LargeScaledRow(d, x, y, n, scale, m);
    next_finish();
    return;
  }

  // Pass 2: exponentials and their sum. The tail vector is computed before
  // anything is stored (in-place safety); its lanes already covered by the
  // main loop are excluded from the sum.
  const V vm = hn::Set(d, m);
  const V last = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, x + n - N), vscale, vm));
  V s0 = hn::Zero(d), s1 = s0;
  // Pass 1 alone reads memory; while this pass and the next compute, the
  // next row (next, may be null) is prefetched, so the memory stream does
  // not stop (with kFuse it is read instead: NextRow). AVX2, 1 / 2 threads:
  // [8192, 512] 3.8-4.0 -> 4.7 / 7.2-7.5 -> 9.2-9.3 GB/s, [65536, 2048]
  // 4.1-4.4 -> 4.9-5.0 / 7.5-8.1 -> 9.7 (all of it prefetched here). Half
  // here and half in pass 3: prefetched all here,
  // a long row's reads stopped while pass 3 streamed it out (one Zen 4
  // core, medians of per-round ratios, [2048, 32000]: AVX-512 +15-20 %, two
  // threads +16 %, AVX2 +3 %; [8192, 512] +3-7 %, [65536, 2048] and
  // [64, 2048] the same). Four vectors a step, their exponentials
  // interleaved (ExpNonPositiveN); the even vectors are summed in s0, the
  // odd in s1.
  constexpr size_t kK = 4;
  size_t i = 0;
  for (; i + kK * N <= n_full; i += kK * N) {
    V e[kK];
#pragma GCC unroll 4
    for (size_t k = 0; k < kK; ++k) {
      if (kFuse) {
        if (kPipe || k % 2 == 0) next_step(next_half);
      } else if (next != nullptr) {
        PrefetchNextRowHalf<kStream>(d, next, 0, i + k * N);
      }
      prev_step();
      e[k] = hn::MulSub(hn::LoadU(d, x + i + k * N), vscale, vm);
    }
    ExpNonPositiveN<kK>(d, e);
#pragma GCC unroll 4
    for (size_t k = 0; k < kK; ++k) hn::StoreU(e[k], d, tmp + i + k * N);
    s0 = hn::Add(hn::Add(s0, e[0]), e[2]);
    s1 = hn::Add(hn::Add(s1, e[1]), e[3]);
  }
  for (size_t k = 0; i < n_full; i += N, ++k) {
    if (kFuse) {
      if (kPipe || k % 2 == 0) next_step(next_half);
    } else if (next != nullptr) {
      PrefetchNextRowHalf<kStream>(d, next, 0, i);
    }
    prev_step();
    const V e = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, x + i), vscale, vm));
    hn::StoreU(e, d, tmp + i);
    if (k % 2 == 0) {
      s0 = hn::Add(s0, e);
    } else {
      s1 = hn::Add(s1, e);
    }
  }
  if (kStream) hn::StoreU(last, d, tmp + n - N);  // tmp then holds the whole row
  if (n_full != n) {
    s1 = hn::Add(s1, hn::IfThenZeroElse(hn::FirstN(d, N - n % N), last));
  }
  const float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  if (isnan(sum)) {  // a NaN in the row: NAN everywhere (NanRow)
    NanRow(y, n);
    next_finish();
    return;
  }

  // Pass 3: normalise (sum >= 1: the max entry contributes exp(~0)).
  const float inv = 1.0f / sum;
  if (kPipe) {  // left to the next row (or FinishPending)
    next_finish();
    *pending = MakePending(tmp, y, n, inv);
    return;
  }
  if (kStream) {
    if (kFuse) {
      while (next_pos + N <= next_half) next_step(next_half);
    }
    size_t calls = 0;
    const auto one = [&](auto dd, size_t j) HWY_ATTR {
      if (kFuse) {
        if (hn::Lanes(dd) == N && calls++ % 2 == 0) next_step(next_n);
      } else if (next != nullptr) {
        PrefetchNextRowHalf<kStream>(dd, next, n, j);
      }
      return hn::Mul(hn::LoadU(dd, tmp + j), hn::Set(dd, inv));
    };
    WriteRow<true>(d, y, n, one, StreamStalls(y, tmp));
    next_finish();
    return;
  }
  const V vinv = hn::Set(d, inv);
  for (i = 0; i < n_full; i += N) {
    if (next != nullptr) PrefetchNextRowHalf<kStream>(d, next, n, i);
    hn::StoreU(hn::Mul(hn::LoadU(d, tmp + i), vinv), d, y + i);
  }
  if (i != n) hn::StoreU(hn::Mul(last, vinv), d, y + n - N);
}

// Rows of at most this many vectors are paired. One core, medians of
// per-round ratios against one row at a time, [8192, cols]: AVX-512 cols 64
// / 128 / 256 +32 / +22 / +8 % (two threads, 128: +24 %), but 512 -5 to
// -17 % and [1024, 1024] -15 % when paired too; AVX2 64 / 128 +21 / +9 %,
// 256 -4 %, 512 -13 % when paired; SSE4 32 / 64 +15 / +7 %.
constexpr size_t kPairMaxVectors = 16;

// Two rows of n valid columns (n >= 2 Lanes(d)) in lockstep, in y (no
// streaming): the same operations on each row, in the same order, as
// SoftmaxValid<false> (its exponential pass sums even-numbered vectors in s0
// and odd ones in s1; here two vectors of each row a step, four
// exponentials interleaved), so each row gets the same bits whether it is
// paired or not, and with whichever neighbour. Returns false, having written
// nothing, if either row's m is infinite or its magnitude kLargeScaled or
// more (SoftmaxValid handles those).
// Why: a row's tail (reductions, the scalar reciprocal) is a chain of ~150
// cycles that the next row's work did not hide (softmax [8, 64] took 62 ns a
// row on one AVX-512 core, of which ~10 for its elements), which counts for
// short rows.
template <class D>
HWY_INLINE bool SoftmaxPair(D d, const float* x0, float* y0, const float* x1, float* y1,
                            size_t n, float scale, const float* next0, const float* next1) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t n_full = n - n % N;
  const bool negative = scale < 0.0f;
  const float m0 = scale * RowExtreme(d, x0, n, negative);
  const float m1 = scale * RowExtreme(d, x1, n, negative);
  if (!(fabsf(m0) < kLargeScaled && fabsf(m1) < kLargeScaled)) return false;
  const V vscale = hn::Set(d, scale), vm0 = hn::Set(d, m0), vm1 = hn::Set(d, m1);
  const V last0 = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, x0 + n - N), vscale, vm0));
  const V last1 = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, x1 + n - N), vscale, vm1));
  V s00 = hn::Zero(d), s01 = s00, s10 = s00, s11 = s00;
  size_t i = 0;
  for (; i + 2 * N <= n_full; i += 2 * N) {
    if (next0 != nullptr) {
      PrefetchPerLine(d, next0, i);
      PrefetchPerLine(d, next0, i + N);
      PrefetchPerLine(d, next1, i);
      PrefetchPerLine(d, next1, i + N);
    }
    V e[4] = {hn::MulSub(hn::LoadU(d, x0 + i), vscale, vm0),
              hn::MulSub(hn::LoadU(d, x0 + i + N), vscale, vm0),
              hn::MulSub(hn::LoadU(d, x1 + i), vscale, vm1),
              hn::MulSub(hn::LoadU(d, x1 + i + N), vscale, vm1)};
    ExpNonPositiveN<4>(d, e);
    hn::StoreU(e[0], d, y0 + i);
    hn::StoreU(e[1], d, y0 + i + N);
    hn::StoreU(e[2], d, y1 + i);
    hn::StoreU(e[3], d, y1 + i + N);
    s00 = hn::Add(s00, e[0]);
    s01 = hn::Add(s01, e[1]);
    s10 = hn::Add(s10, e[2]);
    s11 = hn::Add(s11, e[3]);
  }
  if (i < n_full) {  // one whole vector left: an even-numbered one
    V e[2] = {hn::MulSub(hn::LoadU(d, x0 + i), vscale, vm0),
              hn::MulSub(hn::LoadU(d, x1 + i), vscale, vm1)};
    ExpNonPositiveN<2>(d, e);
    hn::StoreU(e[0], d, y0 + i);
    hn::StoreU(e[1], d, y1 + i);
    s00 = hn::Add(s00, e[0]);
    s10 = hn::Add(s10, e[1]);
  }
  if (n_full != n) {
    const auto fresh = hn::FirstN(d, N - n % N);
    s01 = hn::Add(s01, hn::IfThenZeroElse(fresh, last0));
    s11 = hn::Add(s11, hn::IfThenZeroElse(fresh, last1));
  }
  const float sum0 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s00, s01)));
  const float sum1 = hn::GetLane(hn::SumOfLanes(d, hn::Add(s10, s11)));
  const V inv0 = hn::Set(d, 1.0f / sum0);
  const V inv1 = hn::Set(d, 1.0f / sum1);
  for (i = 0; i < n_full; i += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, y0 + i), inv0), d, y0 + i);
    hn::StoreU(hn::Mul(hn::LoadU(d, y1 + i), inv1), d, y1 + i);
  }
  if (i != n) {
    hn::StoreU(hn::Mul(last0, inv0), d, y0 + n - N);
    hn::StoreU(hn::Mul(last1, inv1), d, y1 + n - N);
  }
  // A row with a NaN (rare): NAN everywhere, over what was just stored.
  if (isnan(sum0)) NanRow(y0, n);
  if (isnan(sum1)) NanRow(y1, n);
  return true;
}

// SoftmaxValid<true, true, kNextStreams> out of line: inlined beside the
// other variants, it slowed theirs by 2-3 % ([65536, 2048], one thread).
template <class D>
HWY_NOINLINE void SoftmaxFusedStreams(D d, const float* x, float* y, size_t n, float scale,
                                      float* tmp, const float* known_extreme, NextRow* fused) {
  SoftmaxValid<true, true, kNextStreams>(d, x, y, n, scale, tmp, nullptr, known_extreme, fused);
}

// SoftmaxValid<true, true, kNS, true> (kPipe), out of line as
// SoftmaxFusedStreams.
template <size_t kNS, class D>
HWY_NOINLINE void SoftmaxPiped(D d, const float* x, float* y, size_t n, float scale, float* tmp,
                               const float* known_extreme, NextRow* fused, PendingRow* pending) {
  SoftmaxValid<true, true, kNS, true>(d, x, y, n, scale, tmp, nullptr, known_extreme, fused,
                                      pending);
}

// scratch: a row of cols floats for the streaming variant, or null; next,
// and with scratch known_extreme and fused: as SoftmaxValid (used only if
// n_valid >= 2 Lanes(d)).
template <class D>
HWY_INLINE void SoftmaxRow(D d, const float* x, float* y, size_t cols, size_t n_valid,
                           float scale, float* scratch, const float* next,
                           const float* known_extreme, NextRow* fused) {
  const hn::CappedTag<float, 1> d1;
  if (n_valid >= 2 * hn::Lanes(d)) {
    if (scratch != nullptr) {
      if (fused != nullptr) {
        if (fused->n >= kNextStreamsMinCols) {
          SoftmaxFusedStreams(d, x, y, n_valid, scale, scratch, known_extreme, fused);
        } else {
          SoftmaxValid<true, true>(d, x, y, n_valid, scale, scratch, nullptr, known_extreme, fused);
        }
      } else {
        SoftmaxValid<true>(d, x, y, n_valid, scale, scratch, next, known_extreme, nullptr);
      }
    } else {
      SoftmaxValid<false>(d, x, y, n_valid, scale, y, next, nullptr, nullptr);
    }
  } else if (n_valid >= hn::Lanes(d)) {
    SoftmaxValid<false>(d, x, y, n_valid, scale, y, nullptr, nullptr, nullptr);
  } else if (n_valid != 0) {
    SoftmaxValid<false>(d1, x, y, n_valid, scale, y, nullptr, nullptr, nullptr);
  }
  for (size_t k = n_valid; k < cols; ++k) y[k] = 0.0f;  // masked
}

// The streamed row's exponentials go to scratch + s, s < kScratchSlack,
// where they lie at y's offset within a 4 KiB page. Pass 3 loads scratch
// behind its streaming stores to y; where y lay 1-127 bytes after the
// scratch modulo 4 KiB (StreamStalls) every load waited for a store with
// the same low address bits, so that row took ordinary stores instead, each
// line of y read before it was written. With a fixed scratch that was one
// row in four at 32000 columns (rows 125 KiB apart cycle through 4 offsets
// modulo 4 KiB), depending on where the heap put it: one Xeon core (family
// 6 model 167), [2048, 32000], processes ran at 17 or 21 GB/s.
constexpr size_t kScratchSlack = 4096 / sizeof(float);

HWY_INLINE float* RowScratch(float* scratch, const float* y) {
  if (scratch == nullptr) return nullptr;
  const uintptr_t delta =
      (reinterpret_cast<uintptr_t>(y) - reinterpret_cast<uintptr_t>(scratch)) % 4096;
  return scratch + delta / sizeof(float);
}

// Outputs past kSoftmaxStreamFactor x the threshold are streamed, the output
// alone compared with it (not with its input, as detail::StreamOutput does
// for the other row kernels: [16384, 512], 32 MiB each, streamed lost 9 /
// 19 % on 1 / 2 threads of a Xeon of family 6 model 207). With
// 16 lanes the exponential costs about one operation per element and
// softmax is bound by memory, so streaming (one write instead of a read for
// ownership and a write) pays from the threshold on: AVX-512 on a Xeon
// (family 6 model 207, 300 MiB L3), medians of per-round ratios, [2048,
// 32000] / [65536, 2048]: +31 / +64 % on one thread, +30 / +49 % on two.
// Narrower targets stream only outputs 8x past it (4x the last-level cache):
// on an AMD EPYC (AVX2, 8 MiB L3) softmax was compute-bound on a core (~4.5
// GB/s), streaming 3-7 % slower at 8-256 MiB and up to 35 % slower on one
// thread when calls repeated on buffers that partly stayed in cache. (On
// the Xeon above, AVX2 streaming from the threshold on gains 4-25 %.)
constexpr size_t kSoftmaxStreamFactor = HWY_MAX_BYTES >= 64 ? 1 : 8;

// Streamed rows that fuse the next row's pass 1 (AVX-512, NextRow) are also
// piped, where no mask makes rows differ in length (causal rows, piped, went
// +11-12 % at [2048, 32000] with q_len 512 but -7 to -10 % at [32768, 4096]
// with q_len 64 or 2048, rows 16 bytes past a line: not understood, so not
// piped) and kPipeRowsInL2 rows fit in L2 (half of it for the row's x, its
// scratch and the scratch of the row before): row r's pass 2 reads all of row r
// + 1 and does row r - 1's pass 3, a vector of each per vector of its own
// (SoftmaxPiped). Alone, pass 2 is bound by its exponentials and pass 3 by its
// streamed writes (one Xeon core, family 6 model 167, [2048, 32000]: 5.3 and
// 7.8 us a row, one after the other); piped, the reads, the writes and the
// exponentials overlap. Same Xeon, medians over rounds alternating with memcpy
// in one process, two runs, 1 / 2 threads: [2048, 32000] +14-15 / +13-16 %,
// [16384, 8192] +19-22 / +17-22 %, [65536, 2048] +8-15 / +9-13 %, [131072,
// 1024] +7-15 / +9-12 %; [2048, 32000] went from 0.82 to 0.93-0.94 of memcpy's
// rate on one thread. (An intrinsics model of it lost 9 % at 128256 columns,
// where three rows of 501 KiB crowd a 2 MiB L2, and broke even at 98304.) Piped
// rows of kPipeStreamsMinCols or more read the next row as kNextStreams
// streams, here from 4096 columns on ([16384, 8192]: 22.1 against 19.2 GB/s
// with one stream, [32768, 4096] 22.0 against 19.1), while 2048 and fewer do
// better with one ([65536, 2048]: 21.3 against 17.1).
constexpr size_t kPipeRowsInL2 = 6, kPipeStreamsMinCols = 4096;

void SoftmaxRows(const SoftmaxArgs& a) {
  const size_t threshold = detail::StreamThresholdBytes();
  const bool stream = a.rows * a.cols * sizeof(float) / kSoftmaxStreamFactor >= threshold;
  const bool pipe = stream && kFuseNextRow && a.mask == TFK_MASK_NONE &&
                    a.cols * sizeof(float) * kPipeRowsInL2 <= detail::L2CacheBytes();
  detail::ParallelFor(a.rows, a.cols * 2 * sizeof(float), [&](size_t begin, size_t end) HWY_ATTR {
    // Without scratch memory the row is computed in y, as for small outputs.
    // kScratchSlack floats more, so that each row's scratch can start at
    // y's offset within a 4 KiB page (RowScratch); two such rows to pipe.
    const size_t scratch_ld = a.cols + kScratchSlack;
    float* scratch = stream ? detail::ThreadScratch((pipe ? 2 : 1) * scratch_ld) : nullptr;
    const hn::ScalableTag<float> d;
    float known_extreme = 0.0f;  // of row r, if `known` (NextRow)
    bool known = false;
    PendingRow pending;  // with pipe: the row before, to normalise
    for (size_t r = begin; r < end; ++r) {
      const size_t n = SoftmaxValidCols(a.mask, a.q_len, a.cols, r);
      const float* x = a.x + r * a.ldx;
      float* y = a.y + r * a.ldy;
      if (scratch != nullptr) {
        const size_t next_n = r + 1 < end ? SoftmaxValidCols(a.mask, a.q_len, a.cols, r + 1) : 0;
        NextRow fused{r + 1 < end ? x + a.ldx : nullptr, next_n, 0.0f};
        const bool fuse = kFuseNextRow && n >= kPrefetchAhead && next_n >= kPrefetchAhead;
        if (pipe && fuse) {
          float* tmp = RowScratch(scratch + (r % 2) * scratch_ld, y);
          const float* known_ptr = known ? &known_extreme : nullptr;
          if (n >= kPipeStreamsMinCols) {
            SoftmaxPiped<kNextStreams>(d, x, y, n, a.scale, tmp, known_ptr, &fused, &pending);
          } else {
            SoftmaxPiped<1>(d, x, y, n, a.scale, tmp, known_ptr, &fused, &pending);
          }
        } else {
          FinishPending(d, pending);
          SoftmaxRow(d, x, y, a.cols, n, a.scale, RowScratch(scratch, y),
                     !fuse && r + 1 < end ? x + a.ldx : nullptr,
                     known ? &known_extreme : nullptr, fuse ? &fused : nullptr);
        }
        known = fuse;
        known_extreme = fused.extreme;
        continue;
      }
      // Short rows in pairs where both have the same valid columns (no mask,
      // or equal ones), unless streamed.
      if (r + 1 < end && n >= 2 * hn::Lanes(d) &&
          n <= kPairMaxVectors * hn::Lanes(d) &&
          SoftmaxValidCols(a.mask, a.q_len, a.cols, r + 1) == n) {
        const float* next0 = r + 3 < end ? x + 2 * a.ldx : nullptr;
        if (SoftmaxPair(d, x, y, x + a.ldx, y + a.ldy, n, a.scale, next0,
                        next0 != nullptr ? next0 + a.ldx : nullptr)) {
          for (size_t k = n; k < a.cols; ++k) y[k] = y[a.ldy + k] = 0.0f;  // masked
          ++r;
          continue;
        }
      }
      SoftmaxRow(d, x, y, a.cols, n, a.scale, nullptr, r + 1 < end ? x + a.ldx : nullptr, nullptr,
                 nullptr);
    }
    FinishPending(d, pending);
    if (scratch != nullptr) hwy::FlushStream();
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "lib/dispatch.h"
#include "lib/status.h"

namespace tfk {
HWY_EXPORT(SoftmaxRows);
}  // namespace tfk

extern "C" TFK_API tfk_status tfk_softmax(size_t rows, size_t cols, const float* x,
                                          size_t ldx, float* y, size_t ldy, float scale,
                                          tfk_mask mask, size_t q_len) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_softmax";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckSize(fn, "rows", rows));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "cols", cols));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "x", x, rows, cols, ldx));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "y", y, rows, cols, ldy));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "x", x, ldx, "y", y, ldy, rows, cols));
  if (!isfinite(scale)) return Fail(TFK_INVALID_ARGUMENT, fn, "scale (%g) is not finite", scale);
  if (RawEnum(mask) != TFK_MASK_NONE && RawEnum(mask) != TFK_MASK_CAUSAL) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "mask (%d) is not a tfk_mask", RawEnum(mask));
  }
  if (mask == TFK_MASK_CAUSAL) {
    TFK_RETURN_IF_ERROR(CheckSize(fn, "q_len", q_len));
    if (rows % q_len != 0) {
      return Fail(TFK_INVALID_ARGUMENT, fn, "rows (%zu) is not a multiple of q_len (%zu)",
                  rows, q_len);
    }
  }
  const tfk::SoftmaxArgs args{rows, cols, x, ldx, y, ldy, scale, mask, q_len};
  TFK_DISPATCH(tfk::SoftmaxRows)(args);
  return TFK_SUCCESS;
}
#endif  // HWY_ONCE
