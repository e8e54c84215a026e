// Machine limit for compute: the FMA peak per ISA, 1 and all threads, each
// thread running limit_loops.h's FMA loop (independent FMA chains held in
// registers, bound by FMA throughput alone). GFLOPS counts 2 flops per lane
// per FMA.
//
// Beside it, the matmul's register tile alone (peak/tile/<ISA>/mr<rows>_nr32):
// lib/matmul-inl.h's Tile<kMaxMR>, compiled here from the same source with
// the same target configuration, fed as the GEMM feeds it (kTileK k-steps a
// call from L2) but with nothing else of a GEMM around it. Its share of the
// FMA peak is the most a broadcast-and-FMA kernel reaches on the core; the
// GEMM's share of the tile's rate is what its blocking and threading keep.
// (On one Xeon of family 6 model 167: AVX-512's 14 x 32 tile at 83-86 % of
// the FMA peak in early runs and 96-97 % in later, calmer ones, AVX2's
// 3 x 32 at 91-92 %; docs/matmul.md.)

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/bench_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "lib/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tfk_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The tile's working set: kTilePanels panel slices of kTileK x 32 floats
// (64 KiB each at kTileK = 512, the GEMM's kc on 32-48 KiB L1d) and
// kTileRowTiles row tiles of A (28 KiB each on AVX-512), about 370 KiB on
// AVX-512: in L2 where it holds 512 KiB or more (every AVX-512 core), as the
// GEMM's A block and slices are.
constexpr size_t kTileK = 512, kTilePanels = 4, kTileRowTiles = 4;

size_t TileRows() { return tfk::HWY_NAMESPACE::kMaxMR; }

// iters passes over the working set, each tile parking its sums in W (no
// epilogue: that runs once per K, not per k-block). Returns flops done.
double TileLoop(size_t iters, float* sink) {
  namespace tk = tfk::HWY_NAMESPACE;
  constexpr size_t kMR = tk::kMaxMR, kNR = tfk::kNR;
  // Per thread, allocated once: the timed passes touch no new pages.
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffer;
  constexpr size_t a_floats = kTileRowTiles * kMR * kTileK, b_floats = kTilePanels * kTileK * kNR;
  if (!buffer) {
    buffer = hwy::AllocateAligned<float>(a_floats + b_floats + kMR * kNR);
    for (size_t i = 0; i < a_floats + b_floats; ++i) buffer[i] = 0.25f + 0.001f * (i % 7);
  }
  const float* a = buffer.get();
  const float* b = a + a_floats;
  float* w = buffer.get() + a_floats + b_floats;
  const tfk::Epilogue epi;
  for (size_t it = 0; it < iters; ++it) {
    for (size_t p = 0; p < kTilePanels; ++p) {
      for (size_t t = 0; t < kTileRowTiles; ++t) {
        // A tile: [kc][kMR] where A is packed (AVX-512), else kMR rows of kc.
        tk::Tile<kMR, false>(kTileK, a + t * kMR * kTileK, kTileK, b + p * kTileK * kNR, kNR, w,
                             /*first=*/true, /*last=*/false, nullptr, 0, kNR, 0, 0, epi, nullptr,
                             0, 0, /*pf_l1=*/false);
      }
    }
  }
  *sink = w[0];
  return 2.0 * kMR * kNR * kTileK * kTilePanels * kTileRowTiles * static_cast<double>(iters);
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>

#include "bench_util.h"
#include "limit_loops.h"

namespace tfk_bench {
HWY_EXPORT(TileLoop);
HWY_EXPORT(TileRows);

namespace {

// Runs fn(iters) on each of `threads` threads at once and counts the flops.
void RegisterLoop(const std::string& name, const std::string& isa, int threads, LoopFn fn,
                  size_t iters) {
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
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

void RegisterPeak() {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::ChosenTarget chosen;  // picks this target's entry in the table
    chosen.Update(target);
    const size_t index = chosen.GetIndex();
    const std::string isa = hwy::TargetName(target);
    const std::string tile = "mr" + std::to_string(HWY_DISPATCH_TABLE(TileRows)[index]()) + "_nr32";
    for (int threads : ThreadCounts()) {
      const std::string t = "/threads:" + std::to_string(threads);
      // ~1-4 ms an iteration for either loop.
      RegisterLoop("peak/fma/" + isa + t, isa, threads, FmaLoopFor(target), size_t{1} << 20);
      RegisterLoop("peak/tile/" + isa + "/" + tile + t, isa, threads,
                   HWY_DISPATCH_TABLE(TileLoop)[index], 32);
    }
  }
}

const bool kRegistered = (RegisterPeak(), true);

}  // namespace
}  // namespace tfk_bench
#endif  // HWY_ONCE
