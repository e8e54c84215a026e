// Machine limit for compute: the FMA peak per ISA, 1 and all threads.
// Each thread runs independent vector FMA chains held in registers, so the
// loop is bound by FMA throughput alone. The chains must fit the register file
// beside the two constants: 14 where a target has 16 vector registers (x86 up
// to AVX2), 24 where it has 32. Measured on one AVX2 core here, one sitting:
// 8 chains 27.0 GFLOP/s, 12 chains 35.7, 14 chains 37.5 (latency x pipes is
// above 8 on this host). 24 chains on AVX2 spilled 11 accumulators to the
// stack, each then waiting on a store-to-load forward per step, and read
// 21.6-22.7 GFLOP/s, below the GEMM beside it.
// Targets without FMA (SSE4) run mul + add pairs, counted as 2 flops per lane
// like an FMA. GFLOPS counts 2 flops per lane per FMA.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/bench_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tfk_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns flops done; the result is consumed so the loop is not removed.
double FmaLoop(size_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
  constexpr size_t kChains = 14;  // + 2 constants = 16 registers
#else
  constexpr size_t kChains = 24;
#endif
  V acc[kChains];
  const V m = hn::Set(d, 0.999999f), a = hn::Set(d, 1e-7f);
#pragma GCC unroll 24
  for (size_t c = 0; c < kChains; ++c) acc[c] = hn::Set(d, static_cast<float>(c));
  for (size_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (size_t c = 0; c < kChains; ++c) acc[c] = hn::MulAdd(acc[c], m, a);
  }
  V sum = hn::Zero(d);
#pragma GCC unroll 24
  for (size_t c = 0; c < kChains; ++c) sum = hn::Add(sum, acc[c]);
  *sink = hn::GetLane(sum);
  return 2.0 * kChains * hn::Lanes(d) * static_cast<double>(iters);
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>

#include "bench_util.h"

namespace tfk_bench {
HWY_EXPORT(FmaLoop);

namespace {

void RegisterPeak() {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::ChosenTarget chosen;  // picks this target's entry in the table
    chosen.Update(target);
    const auto fn = HWY_DISPATCH_TABLE(FmaLoop)[chosen.GetIndex()];
    const std::string isa = hwy::TargetName(target);
    for (int threads : ThreadCounts()) {
      const std::string name = "peak/fma/" + isa + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
        const size_t iters = 1 << 20;
        oneapi::tbb::task_arena arena(threads);
        double flops = 0;
        for (auto _ : state) {
          std::atomic<double> total{0};
          arena.execute([&] {
            oneapi::tbb::parallel_for(0, threads, [&](int) {
              float sink;
              const double f = fn(iters, &sink);
              benchmark::DoNotOptimize(sink);
              double cur = total.load();
              while (!total.compare_exchange_weak(cur, cur + f)) {
              }
            });
          });
          flops += total.load();
        }
        state.counters["GFLOPS"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
        state.SetLabel(isa);
      })->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }
}

const bool kRegistered = (RegisterPeak(), true);

}  // namespace
}  // namespace tfk_bench
#endif  // HWY_ONCE
