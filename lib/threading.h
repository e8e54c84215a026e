// Parallel loops over independent items (rows, tokens, heads) with oneTBB.
//
// ParallelFor splits [0, n) into tasks run in the calling thread's arena (a
// host's tbb::task_arena is used as it is; tfk makes no threads or arenas of
// its own). Each task owns kChunksPerTask contiguous chunks and runs them in
// order; a task that is done takes chunks from the back of the others'. Small
// loops run on the calling thread: each task gets at least kMinBytesPerTask
// of memory traffic. Items must be independent, which makes results
// identical for any partition and thread count. docs/design.md, Threading.
#ifndef TFK_LIB_THREADING_H_
#define TFK_LIB_THREADING_H_

#include <stddef.h>

namespace tfk {
namespace detail {

// ~6 us of work at 10 GB/s, a few times TBB's fork-join cost. A worker that
// wakes late costs nothing: the chunks it has not started are taken by the
// others (16-core Xeon, 16 threads: softmax [64, 2048] 41-43 -> 90-92 GB/s,
// GELU on 256 Ki floats 38-49 -> 79-82 GB/s, against 256 KiB per task and
// static shares).
constexpr size_t kMinBytesPerTask = size_t{64} << 10;

// Chunks per task. With equal static shares a call waits for its slowest
// core; on a 16-vCPU VM the cores ran at uneven speeds (the FMA peak
// benchmark scales 7x on 16 threads, and its first thread is done in 60 % of
// the time of the last). 8 chunks let the others absorb it:
// 16 threads, against equal shares, softmax [8192, 512] 101-123 -> 193-204
// GB/s, causal prefill 2048 x 32 heads 890-1214 -> 1306-1311 GFLOP/s; 1.32x
// geometric mean over 38 benchmarks. On 2 cores it measured the same.
constexpr size_t kChunksPerTask = 8;

// Tasks per call at most (their chunk ranges live on the caller's stack, 8 KiB).
constexpr size_t kMaxTasks = 1024;

// Type-erased range body: fn(ctx, begin, end).
struct RangeBody {
  void (*fn)(const void* ctx, size_t begin, size_t end);
  const void* ctx;
};

// The most tasks a call is split into (tfk_get_num_threads).
size_t MaxTasks();

// Number of tasks a loop of `n` items with `bytes_per_item` traffic uses.
size_t NumTasks(size_t n, size_t bytes_per_item);

void ParallelForImpl(size_t n, size_t bytes_per_item, size_t min_chunk, RangeBody body);

// Calls body(begin, end) over a partition of [0, n) into chunks of at least
// min_chunk items (fewer where a task's share, n / tasks, is smaller). `body` may be a lambda defined in
// target code (HWY_ATTR); it is only called, never copied.
template <class Body>
void ParallelFor(size_t n, size_t bytes_per_item, const Body& body, size_t min_chunk = 1) {
  RangeBody erased{[](const void* ctx, size_t begin, size_t end) {
                     (*static_cast<const Body*>(ctx))(begin, end);
                   },
                   &body};
  ParallelForImpl(n, bytes_per_item, min_chunk, erased);
}

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_THREADING_H_
