#include "lib/threading.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>

#include "lib/status.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/partitioner.h"
#include "oneapi/tbb/task_arena.h"
#include "tfk/tfk.h"

namespace tfk {
namespace detail {
namespace {

int InitialThreads() {
  const char* env = getenv("TFK_NUM_THREADS");
  if (env == nullptr || env[0] == '\0') return 0;
  char* end = nullptr;
  const long n = strtol(env, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 20) {
    fprintf(stderr, "tfk: ignoring TFK_NUM_THREADS=%s (want an integer >= 0)\n", env);
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

size_t MaxTasks() { return Threads(); }

size_t NumTasks(size_t n, size_t bytes_per_item) {
  const size_t total = n * std::max<size_t>(bytes_per_item, 1);
  const size_t by_size = std::max<size_t>(total / kMinBytesPerTask, 1);
  return std::min({Threads(), by_size, n});
}

void ParallelForImpl(size_t n, size_t bytes_per_item, RangeBody body) {
  const size_t tasks = NumTasks(n, bytes_per_item);
  if (tasks <= 1) {
    body.fn(body.ctx, 0, n);
    return;
  }
  // One chunk per task, equal sizes; static_partitioner keeps TBB from
  // splitting further, so `tasks` bounds the threads used.
  oneapi::tbb::parallel_for(
      oneapi::tbb::blocked_range<size_t>(0, tasks, 1),
      [&](const oneapi::tbb::blocked_range<size_t>& r) {
        // Task t gets base or base + 1 items (the first `extra` tasks).
        const size_t base = n / tasks, extra = n % tasks;
        for (size_t t = r.begin(); t != r.end(); ++t) {
          const size_t begin = t * base + std::min(t, extra);
          body.fn(body.ctx, begin, begin + base + (t < extra ? 1 : 0));
        }
      },
      oneapi::tbb::static_partitioner());
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
  return static_cast<int>(tfk::detail::Threads());
}

}  // extern "C"
