// The loops of the machine's limits that tfk's kernels are read against
// (memory bandwidth, FMA peak), written once with Highway (limit_loops.cc)
// and run on the widest vectors the CPU has (HWY_DYNAMIC_DISPATCH), like the
// kernels they frame: built for the SSE4 baseline, the read loop's 4 x 32
// accumulators had spilled to the stack (a Xeon of family 6 model 167, two
// threads, 4 MiB read from the cores' L2: 95 GB/s, on AVX-512 124-140).
// Used by tfk_bench (bench_memory.cc, bench_peak.cc), tfk-ab's `copy` and
// `peak` sides (tfk_ab_limits.cc) and tfk-info's limits rows. The memory loops work on [lo, hi) of
// their arrays, so that threads can take parts.
#ifndef TFK_BENCH_LIMIT_LOOPS_H_
#define TFK_BENCH_LIMIT_LOOPS_H_

#include <stddef.h>
#include <stdint.h>

namespace tfk_bench {

// Reads data[lo, hi) as 4 interleaved streams, 128 bytes (a pair of lines)
// from each in turn, and returns the xor of its bit patterns. prefetch: each
// stream 2 KiB ahead, into L2.
uint32_t ReadRange(const float* data, size_t lo, size_t hi, bool prefetch);

// dst[lo, hi) = src[lo, hi): way 0 by memcpy, way 1 with streaming
// (non-temporal) stores, as tfk's kernels write outputs past their threshold
// (lib/memory.h), way 2 also prefetching the source 4 KiB ahead into L1, as
// the row kernels do (lib/elementwise-inl.h).
void CopyRange(const float* src, float* dst, size_t lo, size_t hi, int way);

// a[lo, hi) *= 0.999 in place: the read-modify-write pass.
void ScaleRange(float* a, size_t lo, size_t hi);

// a = b + 3 c over [lo, hi), in the ways of the copy (the limit of tfk_add).
void TriadRange(float* a, const float* b, const float* c, size_t lo, size_t hi, int way);

// The FMA peak: iters steps of independent vector FMA chains held in
// registers, so that the loop is bound by FMA throughput alone; returns the
// flops done (2 a lane an FMA) and stores a value of the result in *sink
// (so that the loop is not removed). The chains must fit the register file
// beside the two constants: 14 where a target has 16 vector registers (x86
// up to AVX2), 24 where it has 32. Measured on one AVX2 core, one sitting:
// 8 chains 27.0 GFLOP/s, 12 chains 35.7, 14 chains 37.5 (latency x pipes is
// above 8 there). 24 chains on AVX2 spilled 11 accumulators to the stack,
// each then waiting on a store-to-load forward per step, and read 21.6-22.7
// GFLOP/s, below the GEMM beside it. Targets without FMA (SSE4) run mul +
// add pairs, counted as 2 flops per lane like an FMA.
using LoopFn = double (*)(size_t iters, float* sink);

// The Highway target bit named `name` (hwy::TargetName: "AVX3", "AVX2",
// "SSE4", tfk's ISA names) among hwy::SupportedAndGeneratedTargets(), or
// with a null name the best of them; 0 where there is none.
int64_t SupportedTarget(const char* name);

// The FMA loop compiled for `target`, a bit of SupportedTarget().
LoopFn FmaLoopFor(int64_t target);

// Part `part` of `parts` of a copy of n floats, src to dst, in the way `way`
// (as CopyRange; ways 1 and 2 in the loop compiled for `target`): the parts
// are whole 64-byte lines of the array, the last taking the rest, so that
// threads copy one part each.
void CopyPart(int64_t target, const float* src, float* dst, size_t n, size_t part, size_t parts,
              int way);

}  // namespace tfk_bench

#endif  // TFK_BENCH_LIMIT_LOOPS_H_
