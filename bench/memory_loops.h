// The loops of the memory limits that tfk's kernels are read against, written
// once with Highway (memory_loops.cc) and run on the widest vectors the CPU
// has (HWY_DYNAMIC_DISPATCH), like the kernels they frame: built for the SSE4
// baseline, the read loop's 4 x 32 accumulators had spilled to the stack (a
// Xeon of family 6 model 167, two threads, 4 MiB read from the cores' L2:
// 95 GB/s, on AVX-512 124-140). Used by tfk_bench (bench_memory.cc) and by
// tfk-ab's copy side (tfk_ab_copy.cc). Each works on [lo, hi) of its arrays,
// so that threads can take parts.
#ifndef TFK_BENCH_MEMORY_LOOPS_H_
#define TFK_BENCH_MEMORY_LOOPS_H_

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

}  // namespace tfk_bench

#endif  // TFK_BENCH_MEMORY_LOOPS_H_
