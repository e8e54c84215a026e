// tfk-ab's sides that are the machine's limits (limit_loops.h), run in a TBB
// arena of the problem's thread count, so that a kernel's rate is paired
// round by round with the limit it is read against (docs/benchmarks.md reads
// shares of them):
// - `copy`: a copy of the bytes the kernel reads and writes, the limit of a
//   kernel on inputs from memory: tfk_bench's copy with streaming stores and
//   the source prefetched 4 KiB ahead (way 2: its fastest way from 32 MiB up
//   on the Xeons measured; tfk's row kernels write the same way past their
//   threshold), split into `threads` parts of whole lines;
// - `peak`: the FMA loop doing the flops of the linear layer's call, split
//   equally over the threads: the limit of the compute-bound matmul.
// Both on the vectors of the ISA the library side is active on.
#include <algorithm>
#include <cmath>
#include <memory>

#include "limit_loops.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/partitioner.h"
#include "oneapi/tbb/task_arena.h"
#include "tfk_ab.h"

namespace tfk_ab {

std::function<void()> CopyCall(const Problem& p, const char* isa, std::string* why) {
  if (p.kernel == Kernel::kAdd || p.kernel == Kernel::kLinear) {
    *why = "copy pairs with the kernels of one input and one output of the same size";
    return {};
  }
  const int64_t target = tfk_bench::SupportedTarget(isa);
  if (target == 0) {
    *why = std::string("no copy loop for the ISA ") + isa + " on this CPU";
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
          [&](size_t t) { tfk_bench::CopyPart(target, src, dst, n, t, threads, /*way=*/2); },
          oneapi::tbb::static_partitioner());
    });
  };
}

std::function<void()> PeakCall(const Problem& p, const char* isa, std::string* why) {
  if (p.kernel != Kernel::kLinear) {
    *why = "the FMA peak pairs with linear, the compute-bound kernel";
    return {};
  }
  const int64_t target = tfk_bench::SupportedTarget(isa);
  if (target == 0) {
    *why = std::string("no FMA loop for the ISA ") + isa + " on this CPU";
    return {};
  }
  const tfk_bench::LoopFn loop = tfk_bench::FmaLoopFor(target);
  // Whole steps of the loop: for calls of a few MFLOP a thread the loop's
  // flops differ from the call's by up to half a step (~1.5 kFLOP with
  // AVX-512), a few % below ~0.1 MFLOP; run.sh's shapes are 10^9 and more.
  float sink;
  const double flops_per_step = loop(1, &sink);
  const double flops = 2.0 * static_cast<double>(p.M) * static_cast<double>(p.K) * p.N;
  const size_t steps = std::max<size_t>(1, std::llround(flops / flops_per_step / p.threads));
  auto arena = std::make_shared<oneapi::tbb::task_arena>(p.threads);
  const int threads = p.threads;
  return [=] {
    arena->execute([&] {
      oneapi::tbb::parallel_for(
          0, threads,
          [&](int) {
            float s;
            loop(steps, &s);
            volatile float keep = s;  // the loop's result is used
            (void)keep;
          },
          oneapi::tbb::static_partitioner());
    });
  };
}

}  // namespace tfk_ab
