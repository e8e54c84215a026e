// Machine limits: memory bandwidth, so every kernel's bytes/s can be read as a
// share of it. A copy of the same bytes as a kernel moves (memcpy, or a copy
// with streaming stores where that is faster), a read-modify-write pass (the in-place
// analogue), a read (four interleaved streams, software-prefetched where that
// is faster) and a STREAM triad (streaming stores and prefetching where
// faster: the limit of tfk_add), at 1 and all threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/bench_memory.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/cache_control.h"
#include "hwy/highway.h"

// The loops of the limits, written once with Highway and run on the widest
// vectors the CPU has (HWY_DYNAMIC_DISPATCH), like the kernels they frame:
// built for the SSE4 baseline, the read loop's 4 x 32 accumulators had
// spilled to the stack (a Xeon of family 6 model 167, two threads, 4 MiB
// read from the cores' L2: 95 GB/s, on AVX-512 now 124-140).
HWY_BEFORE_NAMESPACE();
namespace tfk_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kReadStreams = 4;
constexpr size_t kReadAheadFloats = 512;  // 2 KiB

// Reads data[lo, hi) as kReadStreams interleaved streams, 128 bytes (a pair
// of lines) from each in turn, and returns the xor of its bit patterns (one
// accumulator a stream: the loop is bound by its loads). prefetch: both
// lines of each pair kReadAheadFloats ahead, into L2.
uint32_t ReadRange(const float* data, size_t lo, size_t hi, bool prefetch) {
  const hn::ScalableTag<uint32_t> d;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t kPair = 32;  // 128 bytes: a whole number of vectors on x86
  const size_t N = hn::Lanes(d);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(data);
  const size_t part = (hi - lo) / kReadStreams / kPair * kPair;
  V acc[kReadStreams];
  for (size_t r = 0; r < kReadStreams; ++r) acc[r] = hn::Zero(d);
  for (size_t i = 0; i < part; i += kPair) {
#pragma GCC unroll 4
    for (size_t r = 0; r < kReadStreams; ++r) {
      const uint32_t* p = w + lo + r * part + i;
      if (prefetch) {
        __builtin_prefetch(p + kReadAheadFloats, 0, 2);  // prefetcht1
        __builtin_prefetch(p + kReadAheadFloats + 16, 0, 2);
      }
      V x = hn::LoadU(d, p);
      for (size_t j = N; j < kPair; j += N) x = hn::Xor(x, hn::LoadU(d, p + j));
      acc[r] = hn::Xor(acc[r], x);
    }
  }
  uint32_t x = 0;
  for (size_t i = lo + kReadStreams * part; i < hi; ++i) x ^= w[i];
  uint32_t lanes[HWY_MAX_BYTES / sizeof(uint32_t)];
  for (size_t r = 0; r < kReadStreams; ++r) {
    hn::StoreU(acc[r], d, lanes);
    for (size_t j = 0; j < N; ++j) x ^= lanes[j];
  }
  return x;
}

// Copies src[lo, hi) to dst with whole vectors: way 1 stores them with
// streaming (non-temporal) stores, as tfk's kernels write outputs past their
// threshold (lib/memory.h); way 2 also prefetches the source 4 KiB ahead
// into L1, as the row kernels do (lib/elementwise-inl.h). Plain stores for
// the ends before and after dst's aligned middle.
void CopyRange(const float* src, float* dst, size_t lo, size_t hi, int way) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = lo;
  for (; i < hi && reinterpret_cast<uintptr_t>(dst + i) % (N * sizeof(float)) != 0; ++i) {
    dst[i] = src[i];
  }
  for (; i + N <= hi; i += N) {
    if (way == 2 && i % 16 < N) hwy::Prefetch(src + i + 1024);
    hn::Stream(hn::LoadU(d, src + i), d, dst + i);
  }
  for (; i < hi; ++i) dst[i] = src[i];
  hwy::FlushStream();
}

// a[lo, hi) *= 0.999 in place, whole vectors.
void ScaleRange(float* a, size_t lo, size_t hi) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto m = hn::Set(d, 0.999f);
  size_t i = lo;
  for (; i + N <= hi; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, a + i), m), d, a + i);
  for (; i < hi; ++i) a[i] *= 0.999f;
}

// a = b + 3 c over [lo, hi), whole vectors: way 0 with plain stores, way 1
// with streaming stores, way 2 also prefetching b and c 4 KiB ahead (the
// ways of the copy, for the kernels that read two inputs: tfk_add).
void TriadRange(float* a, const float* b, const float* c, size_t lo, size_t hi, int way) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto three = hn::Set(d, 3.0f);
  size_t i = lo;
  if (way == 0) {
    for (; i + N <= hi; i += N) {
      hn::StoreU(hn::MulAdd(three, hn::LoadU(d, c + i), hn::LoadU(d, b + i)), d, a + i);
    }
  } else {
    for (; i < hi && reinterpret_cast<uintptr_t>(a + i) % (N * sizeof(float)) != 0; ++i) {
      a[i] = b[i] + 3.0f * c[i];
    }
    for (; i + N <= hi; i += N) {
      if (way == 2 && i % 16 < N) {
        hwy::Prefetch(b + i + 1024);
        hwy::Prefetch(c + i + 1024);
      }
      hn::Stream(hn::MulAdd(three, hn::LoadU(d, c + i), hn::LoadU(d, b + i)), d, a + i);
    }
    hwy::FlushStream();
  }
  for (; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "bench_util.h"

namespace tfk_bench {
HWY_EXPORT(ReadRange);
HWY_EXPORT(CopyRange);
HWY_EXPORT(ScaleRange);
HWY_EXPORT(TriadRange);

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
  RegisterPerThreads("memory/copy/" + std::to_string(n), 2.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n), b(n);
    const auto pass = [&](int way) {
      Split(n, t, [&](size_t lo, size_t hi) {
        if (way == 0) {
          std::memcpy(b.p + lo, a.p + lo, (hi - lo) * 4);
        } else {
          HWY_DYNAMIC_DISPATCH(CopyRange)(a.p, b.p, lo, hi, way);
        }
      });
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
  RegisterPerThreads("memory/rmw/" + std::to_string(n), 2.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n);
    for (auto _ : s) {
      Split(n, t, [&](size_t lo, size_t hi) { HWY_DYNAMIC_DISPATCH(ScaleRange)(a.p, lo, hi); });
      benchmark::DoNotOptimize(a.p);
    }
  });
}

// The read bandwidth: each thread reads its range as kReadStreams
// interleaved streams, 128 bytes (a pair of lines) from each in turn. One
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
  RegisterPerThreads("memory/read/" + std::to_string(n), 1.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n);
    const auto pass = [&](int prefetch) {
      Split(n, t, [&](size_t lo, size_t hi) {
        benchmark::DoNotOptimize(HWY_DYNAMIC_DISPATCH(ReadRange)(a.p, lo, hi, prefetch != 0));
      });
    };
    // The faster way on this machine (FastestWay).
    const bool prefetch = FastestWay(2, pass) == 1;
    for (auto _ : s) pass(prefetch);
    s.SetLabel(prefetch ? "software prefetch" : "hardware prefetch");
  });
}

void RegisterTriad(size_t n) {
  RegisterPerThreads("memory/triad/" + std::to_string(n), 3.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n), b(n), c(n);
    const auto pass = [&](int way) {
      Split(n, t, [&](size_t lo, size_t hi) {
        HWY_DYNAMIC_DISPATCH(TriadRange)(a.p, b.p, c.p, lo, hi, way);
      });
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
#endif  // HWY_ONCE
