// tfk-ab's `copy` side: a copy of the bytes the kernel reads and writes, so
// that a kernel's rate is paired round by round with the rate of a copy of
// the same bytes, the limit of a kernel on inputs from memory (docs/
// benchmarks.md reads shares of it). It is tfk_bench's copy with streaming
// stores and the source prefetched 4 KiB ahead (memory_loops.h, way 2: its
// fastest way from 32 MiB up on the Xeons measured; tfk's row kernels write
// the same way past their threshold), split into `threads` parts of whole
// lines in a TBB arena of that many threads.
#include <memory>

#include "memory_loops.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/partitioner.h"
#include "oneapi/tbb/task_arena.h"
#include "tfk_ab.h"

namespace tfk_ab {

std::function<void()> CopyCall(const Problem& p, std::string* why) {
  if (p.kernel == Kernel::kAdd || p.kernel == Kernel::kLinear) {
    *why = "copy pairs with the kernels of one input and one output of the same size";
    return {};
  }
  const size_t n = p.rows * p.cols, threads = static_cast<size_t>(p.threads);
  auto arena = std::make_shared<oneapi::tbb::task_arena>(p.threads);
  const float* src = p.x;
  float* dst = p.y;
  return [=] {
    arena->execute([&] {
      oneapi::tbb::parallel_for(
          size_t{0}, threads,
          [&](size_t t) {
            // Parts of whole 64-byte lines, the last taking the rest.
            const size_t lo = n * t / threads / 16 * 16;
            const size_t hi = t + 1 == threads ? n : n * (t + 1) / threads / 16 * 16;
            tfk_bench::CopyRange(src, dst, lo, hi, /*way=*/2);
          },
          oneapi::tbb::static_partitioner());
    });
  };
}

}  // namespace tfk_ab
