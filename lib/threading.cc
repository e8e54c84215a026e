#include "lib/threading.h"

#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <new>

#include "lib/fpenv.h"
#include "lib/status.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/partitioner.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_group.h"
#include "tfk/tfk.h"

namespace tfk {
namespace detail {
namespace {

int InitialThreads() {
  const char* env = getenv("TFK_NUM_THREADS");
  if (env == nullptr || env[0] == '\0') return 0;
  char* end = nullptr;
  const long n = strtol(env, &end, 10);
  while (isspace(static_cast<unsigned char>(*end))) ++end;  // as strtol skips leading ones
  if (*end != '\0' || n < 0 || n > INT_MAX) {
    fprintf(stderr, "tfk: ignoring TFK_NUM_THREADS=%s (want an integer from 0 to %d)\n", env,
            INT_MAX);
    return 0;
  }
  return static_cast<int>(n);
}

std::atomic<int>& RequestedThreads() {
  static std::atomic<int> n{InitialThreads()};
  return n;
}

size_t Threads() {
  const int n = RequestedThreads().load(std::memory_order_relaxed);
  if (n > 0) return static_cast<size_t>(n);
  return static_cast<size_t>(oneapi::tbb::this_task_arena::max_concurrency());
}

}  // namespace

size_t MaxTasks() { return std::min(Threads(), kMaxTasks); }

size_t NumTasks(size_t n, size_t bytes_per_item) {
  // Saturates: a large attention call's items cost ~2^46 each, and a
  // wrapped product would cut its tasks.
  const size_t per = std::max<size_t>(bytes_per_item, 1);
  const size_t total = n > SIZE_MAX / per ? SIZE_MAX : n * per;
  const size_t by_size = std::max<size_t>(total / kMinBytesPerTask, 1);
  return std::min({MaxTasks(), by_size, n});
}

namespace {

// A task's unclaimed chunks [front, back), packed into one word so that the
// owner (from the front) and thieves (from the back) claim each chunk once.
using ChunkRange = std::atomic<uint64_t>;

// The tasks' ranges, in a buffer on the caller's stack of kMaxTasks words,
// spread out to a cache line each where there are at most 128 tasks (64 /
// 32 / ... bytes apart past that). Packed 8 to a line, every claim of a
// chunk took the line from the core that claimed last: GELU-tanh on 256 Ki
// floats, two threads of a Xeon of family 6 model 167, +1.2-1.9 % a line
// each, +1.5-2.3 % with the tasks' captures copied as well (below).
class TaskRanges {
 public:
  explicit TaskRanges(size_t tasks) : stride_(Stride(tasks)) {
    for (size_t t = 0; t < tasks; ++t) new (&bytes_[t * stride_]) ChunkRange(0);
  }
  ChunkRange& operator[](size_t t) {
    return *std::launder(reinterpret_cast<ChunkRange*>(&bytes_[t * stride_]));
  }

 private:
  static size_t Stride(size_t tasks) {
    size_t stride = 64;
    while (stride > sizeof(ChunkRange) && stride * tasks > sizeof(bytes_)) stride /= 2;
    return stride;
  }
  alignas(64) unsigned char bytes_[kMaxTasks * sizeof(ChunkRange)];
  size_t stride_;
};

bool TakeChunk(ChunkRange& range, bool front, size_t* chunk) {
  uint64_t r = range.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t f = r & 0xFFFFFFFFu, b = r >> 32;
    if (f >= b) return false;
    const uint64_t next = front ? (b << 32) | (f + 1) : ((b - 1) << 32) | f;
    if (range.compare_exchange_weak(r, next, std::memory_order_relaxed)) {
      *chunk = static_cast<size_t>(front ? f : b - 1);
      return true;
    }
  }
}

// Task t's work: its own chunks from the front, then what is left of the
// others' from the back. Chunk c of `chunks` gets base or base + 1 of the n
// items (the first n % chunks get one more).
void RunTask(size_t t, size_t tasks, TaskRanges& ranges, size_t n, size_t chunks,
             RangeBody body) {
  const size_t base = n / chunks, extra = n % chunks;
  const auto run = [=](size_t c) {
    const size_t begin = c * base + std::min(c, extra);
    body.fn(body.ctx, begin, begin + base + (c < extra ? 1 : 0));
  };
  size_t c;
  while (TakeChunk(ranges[t], true, &c)) run(c);
  for (size_t v = 1; v < tasks; ++v) {
    ChunkRange& victim = ranges[(t + v) % tasks];
    while (TakeChunk(victim, false, &c)) run(c);
  }
}

}  // namespace

void ParallelForImpl(size_t n, size_t bytes_per_item, size_t min_chunk, RangeBody body) {
  const size_t tasks = NumTasks(n, bytes_per_item);
  if (tasks <= 1) {
    body.fn(body.ctx, 0, n);
    return;
  }
  // Each task owns kChunksPerTask consecutive chunks of equal size (at least
  // min_chunk items) and runs them in order, so repeated calls keep their
  // data in the same core's caches; a task that runs out takes chunks from
  // the back of the others' ranges, so a task on a slower core (a
  // hyperthread sibling, a preempted vCPU, a worker that woke late) does
  // fewer of them instead of holding everyone up at the join.
  // static_partitioner keeps TBB from splitting the tasks, so `tasks` still
  // bounds the threads used.
  size_t per_task = kChunksPerTask;
  const size_t by_min = n / std::max<size_t>(min_chunk, 1) / tasks;
  if (per_task > by_min) per_task = std::max<size_t>(by_min, 1);
  const size_t chunks = std::min(tasks * per_task, n);
  TaskRanges owned(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    // Task t owns chunks [t chunks / tasks, (t + 1) chunks / tasks).
    const uint64_t f = t * chunks / tasks, b = (t + 1) * chunks / tasks;
    owned[t].store((b << 32) | f, std::memory_order_relaxed);
  }
  TaskRanges* const ranges = &owned;
  // A context of the call's own: a bound one would inherit the caller's
  // cancellation (a host task group cancelled because a sibling threw), and
  // TBB would then run none of the tasks while the call reported success
  // with its output unwritten. tfk's bodies do not throw, so nothing cancels
  // this one. It captures tfk's floating-point environment (set here first):
  // without its own, a context takes the one its arena captured when it was
  // created, which TBB sets on every thread running the tasks, the waiting
  // caller too, and then writes the caller's back with its status flags
  // cleared (lib/fpenv.h).
  const FpEnvScope fp_env;
  oneapi::tbb::task_group_context context(oneapi::tbb::task_group_context::isolated,
                                          oneapi::tbb::task_group_context::fp_settings);
  // The calling thread waits in an isolated region: it runs tfk's tasks
  // only. Otherwise, called from a host's parallel loop, it would take the
  // host's other tasks while it waited and run them inside this call: a
  // host task that locks what its caller holds would deadlock, and one whose
  // tfk call failed would leave its message behind this call's success.
  // The tasks copy what they read (captures by value) rather than refer to
  // this frame, whose lines the calling thread may write while they run.
  //
  // TBB allocates its tasks and throws std::bad_alloc where that fails;
  // nothing may leave a C entry point as an exception. A failure on the
  // calling thread before the loop's first spawn (its root task, the first
  // split's task and join node) leaves no task running: the calling thread
  // then runs every chunk, and the call completes with the bits of one
  // thread (tests/threading_test.cc fails each of these). A failure after
  // a spawn stays inside TBB: 2021.8 loses the task whose split or spawn
  // threw (the affinity proxy r1::spawn allocates, for one), and its
  // waiting thread never wakes. Only TBB's internal task interface, not its
  // algorithms, could place tasks without allocating.
  try {
    oneapi::tbb::this_task_arena::isolate([&] {
      oneapi::tbb::parallel_for(
          oneapi::tbb::blocked_range<size_t>(0, tasks, 1),
          [=](const oneapi::tbb::blocked_range<size_t>& r) {
            // TBB has set the context's environment, tfk's; the scope makes
            // sure of it at the cost of a read of the control register.
            const FpEnvScope task_fp_env;
            for (size_t t = r.begin(); t != r.end(); ++t) {
              RunTask(t, tasks, *ranges, n, chunks, body);
            }
          },
          oneapi::tbb::static_partitioner(), context);
    });
  } catch (const std::exception&) {
    for (size_t t = 0; t < tasks; ++t) RunTask(t, tasks, owned, n, chunks, body);
  }
}

}  // namespace detail
}  // namespace tfk

extern "C" {

TFK_API tfk_status tfk_set_num_threads(int n) {
  tfk::detail::ClearError();
  if (n < 0) {
    return tfk::detail::Fail(TFK_INVALID_ARGUMENT, "tfk_set_num_threads",
                             "n (%d) is negative", n);
  }
  tfk::detail::RequestedThreads().store(n, std::memory_order_relaxed);
  return TFK_SUCCESS;
}

TFK_API int tfk_get_num_threads(void) {
  return static_cast<int>(tfk::detail::MaxTasks());
}

}  // extern "C"
