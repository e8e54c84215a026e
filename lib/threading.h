// Parallel loops over independent items (rows, tokens, heads) with oneTBB.
//
// ParallelFor splits [0, n) into contiguous chunks run as TBB tasks in the
// calling thread's arena (a host's tbb::task_arena is used as it is; tfk makes
// no threads or arenas of its own). Small loops run on the calling thread: a
// TBB fork-join costs a few microseconds, so each task gets at least
// kMinBytesPerTask of memory traffic. Items must be independent, which makes
// results identical for any partition and thread count.
#ifndef TFK_LIB_THREADING_H_
#define TFK_LIB_THREADING_H_

#include <stddef.h>

namespace tfk {
namespace detail {

// ~30 us of work at 10 GB/s: well above TBB's fork-join cost.
constexpr size_t kMinBytesPerTask = size_t{256} << 10;

// Type-erased range body: fn(ctx, begin, end).
struct RangeBody {
  void (*fn)(const void* ctx, size_t begin, size_t end);
  const void* ctx;
};

// The most tasks a call is split into (tfk_get_num_threads).
size_t MaxTasks();

// Number of tasks a loop of `n` items with `bytes_per_item` traffic uses.
size_t NumTasks(size_t n, size_t bytes_per_item);

void ParallelForImpl(size_t n, size_t bytes_per_item, RangeBody body);

// Calls body(begin, end) over a partition of [0, n). `body` may be a lambda
// defined in target code (HWY_ATTR); it is only called, never copied.
template <class Body>
void ParallelFor(size_t n, size_t bytes_per_item, const Body& body) {
  RangeBody erased{[](const void* ctx, size_t begin, size_t end) {
                     (*static_cast<const Body*>(ctx))(begin, end);
                   },
                   &body};
  ParallelForImpl(n, bytes_per_item, erased);
}

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_THREADING_H_
