// Machine limits: memory bandwidth, so every kernel's bytes/s can be read as a
// share of it. A copy of the same bytes as a kernel moves (memcpy, or a copy
// with streaming stores where that is faster), a read-modify-write pass (the in-place
// analogue), a read (four interleaved streams, software-prefetched where that
// is faster) and a STREAM triad (streaming stores and prefetching where
// faster: the limit of tfk_add), at 1 and all threads. The loops are
// limit_loops.cc's.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "bench_util.h"
#include "limit_loops.h"

namespace tfk_bench {
namespace {

// Runs fn(begin, end) over `threads` equal chunks of [0, n).
template <class F>
void Split(size_t n, int threads, const F& fn) {
  if (threads == 1) return fn(size_t{0}, n);
  oneapi::tbb::parallel_for(
      oneapi::tbb::blocked_range<int>(0, threads, 1),
      [&](const oneapi::tbb::blocked_range<int>& r) {
        for (int t = r.begin(); t != r.end(); ++t) fn(n * t / threads, n * (t + 1) / threads);
      },
      oneapi::tbb::static_partitioner());
}

// Returns the way (0 .. ways - 1) whose pass(way) is the fastest: each way
// warmed up once, then timed in three rounds of enough passes to take ~2 ms
// (a pass of an L2-resident copy takes ~10 us, where a single pass's time
// is mostly noise), keeping each way's best round.
template <class F>
int FastestWay(int ways, const F& pass) {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  const auto t0 = clock::now();
  for (int way = 0; way < ways; ++way) pass(way);
  const double one = seconds(t0) / ways;
  const int reps = static_cast<int>(std::min(1000.0, std::max(1.0, 2e-3 / one)));
  double best[4] = {1e30, 1e30, 1e30, 1e30};
  for (int round = 0; round < 3; ++round) {
    for (int way = 0; way < ways; ++way) {
      const auto start = clock::now();
      for (int r = 0; r < reps; ++r) pass(way);
      best[way] = std::min(best[way], seconds(start));
    }
  }
  return static_cast<int>(std::min_element(best, best + ways) - best);
}

// The copy: the fastest of memcpy, a copy with streaming stores and one that
// also prefetches its source (the last two in the widest vectors; the label
// says which). glibc's memcpy streams only past a threshold of its own, from
// the cache size CPUID reports: on a Xeon VM (family 6 model 167) that
// reports 480 MiB of L3 it did not stream 64 MiB, and ran at 14.7 GB/s on
// one thread where ReLU with streaming stores ran at 22-25; and a kernel
// that prefetches (the row kernels do) had run at up to 1.9x a copy that did
// not (ReLU on 16 Mi floats, two Zen 4 cores).
void RegisterCopy(size_t n) {
  RegisterPerThreads(
      "memory/copy/" + std::to_string(n), 2.0 * n * 4, [=](benchmark::State& s, int t) {
        Floats a(n), b(n);
        const auto pass = [&](int way) {
          Split(n, t, [&](size_t lo, size_t hi) { CopyRange(a.p, b.p, lo, hi, way); });
          benchmark::DoNotOptimize(b.p);
        };
        const int way = FastestWay(3, pass);
        for (auto _ : s) pass(way);
        static const char* const kLabels[] = {"memcpy", "streaming stores",
                                              "streaming stores, prefetch"};
        s.SetLabel(kLabels[way]);
      });
}

void RegisterRmw(size_t n) {
  RegisterPerThreads("memory/rmw/" + std::to_string(n), 2.0 * n * 4,
                     [=](benchmark::State& s, int t) {
                       Floats a(n);
                       for (auto _ : s) {
                         Split(n, t, [&](size_t lo, size_t hi) { ScaleRange(a.p, lo, hi); });
                         benchmark::DoNotOptimize(a.p);
                       }
                     });
}

// The read bandwidth: each thread reads its range as 4 interleaved streams
// (ReadRange, limit_loops.h), 128 bytes (a pair of lines) from each in turn. One
// core here reads one sequential stream at ~12 GB/s but four at 15-17 (more
// lines in flight), so
// a single stream would understate what a kernel can reach (the M = 1
// matmul reads four panels at once). Where software prefetching into L2,
// 2 KiB ahead in each stream (ReadRange), reads faster (as the decoding
// kernels prefetch), the limit is that: on a Xeon (family 6 model 167) 64 /
// 256 MiB read 24.1 -> 26.4 / 12.9 -> 14.3 GB/s on one thread, 25.1-26.9
// -> 29.1-29.7 on two at 256 MiB, where tfk's M = 1 matmul had read its
// 64 MiB of weights at 108 % of the unprefetched figure; while AMD's
// hardware prefetchers did better alone in decoding attention
// (lib/memory.h, DecodeSpreadPrefetch). So each benchmark times one pass
// either way first and keeps the faster (its label says which).
void RegisterRead(size_t n) {
  RegisterPerThreads("memory/read/" + std::to_string(n), 1.0 * n * 4,
                     [=](benchmark::State& s, int t) {
                       Floats a(n);
                       const auto pass = [&](int prefetch) {
                         Split(n, t, [&](size_t lo, size_t hi) {
                           benchmark::DoNotOptimize(ReadRange(a.p, lo, hi, prefetch != 0));
                         });
                       };
                       // The faster way on this machine (FastestWay).
                       const bool prefetch = FastestWay(2, pass) == 1;
                       for (auto _ : s) pass(prefetch);
                       s.SetLabel(prefetch ? "software prefetch" : "hardware prefetch");
                     });
}

void RegisterTriad(size_t n) {
  RegisterPerThreads(
      "memory/triad/" + std::to_string(n), 3.0 * n * 4, [=](benchmark::State& s, int t) {
        Floats a(n), b(n), c(n);
        const auto pass = [&](int way) {
          Split(n, t, [&](size_t lo, size_t hi) { TriadRange(a.p, b.p, c.p, lo, hi, way); });
          benchmark::DoNotOptimize(a.p);
        };
        const int way = FastestWay(3, pass);  // as the copy: the label says which
        for (auto _ : s) pass(way);
        static const char* const kLabels[] = {"plain stores", "streaming stores",
                                              "streaming stores, prefetch"};
        s.SetLabel(kLabels[way]);
      });
}

// One bandwidth benchmark per size of bytes moved that a kernel benchmark
// is read against (bench/report.py takes the nearest within 1.5x, none
// beyond). Copy n floats moves 8n bytes, read n floats 4n.
const bool kRegistered = [] {
  RegisterCopy(size_t{128} << 20);  // 1 GiB: softmax [32*2048, 2048]
  RegisterCopy(size_t{64} << 20);   // 512 MiB: softmax [2048, 32000]
  RegisterCopy(size_t{16} << 20);   // 128 MiB: activations 16M
  RegisterCopy(size_t{8} << 20);    // 64 MiB: LayerNorm, RMSNorm [2048, 4096]
  RegisterCopy(size_t{4} << 20);    // 32 MiB: softmax [16*512, 512]
  RegisterCopy(size_t{512} << 10);  // 4 MiB: LayerNorm [512, 1024], from L3
  RegisterCopy(size_t{256} << 10);  // 2 MiB: activations 256K, L2-resident
  RegisterCopy(size_t{128} << 10);  // 1 MiB: softmax [64, 2048]
  RegisterRmw(size_t{2} << 20);     // 16 MiB: RoPE [512, 32, 128] in place
  // Reads: the weights of decoding matmuls (4, 16, 64, 256 MiB), the steps
  // of decoding blocks (weights and KV cache: 52 and 784 MiB, read against
  // 64 and 768 MiB), the KV caches of decoding
  // attention (bf16: 32 and 128 MiB; fp32: 64 and 256 MiB).
  RegisterRead(size_t{1} << 20);
  RegisterRead(size_t{4} << 20);
  RegisterRead(size_t{8} << 20);
  RegisterRead(size_t{16} << 20);
  RegisterRead(size_t{32} << 20);
  RegisterRead(size_t{64} << 20);
  RegisterRead(size_t{192} << 20);
  RegisterTriad(size_t{64} << 20);
  RegisterTriad(size_t{16} << 20);   // 192 MiB: tfk_add of 16M floats
  RegisterTriad(size_t{256} << 10);  // 3 MiB: tfk_add of 256K floats, from L2 / L3
  return true;
}();

}  // namespace
}  // namespace tfk_bench
