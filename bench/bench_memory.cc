// Machine limits: memory bandwidth, so every kernel's bytes/s can be read as a
// share of it. A copy of the same bytes as a kernel moves (memcpy, or a copy
// with streaming stores where that is faster), a read-modify-write pass (the in-place
// analogue), a read (four interleaved streams, software-prefetched where that
// is faster) and a STREAM triad, at 1 and all threads.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "bench_util.h"

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

// Copies src[lo, hi) to dst with streaming (non-temporal) stores, as tfk's
// kernels write outputs past their threshold (lib/memory.h); plain stores
// for the unaligned ends.
void StreamCopy(const float* src, float* dst, size_t lo, size_t hi) {
  size_t i = lo;
  for (; i < hi && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= hi; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < hi; ++i) dst[i] = src[i];
  _mm_sfence();
}

// Times pass(false) and pass(true) twice each and returns whether the best
// time of pass(true) is the shorter.
template <class F>
bool SecondIsFaster(const F& pass) {
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 2; ++round) {
    for (int way = 0; way < 2; ++way) {
      const auto t0 = std::chrono::steady_clock::now();
      pass(way != 0);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[way] = std::min(best[way], sec);
    }
  }
  return best[1] < best[0];
}

// The copy: memcpy, or a copy with streaming stores where that is faster
// (glibc's memcpy streams only past a threshold of its own, from the cache
// size CPUID reports: on a Xeon VM (family 6 model 167) that reports 480
// MiB of L3 it did not stream 64 MiB, and ran at 14.7 GB/s on one thread
// where ReLU with streaming stores ran at 22-25). The label says which.
void RegisterCopy(size_t n) {
  RegisterPerThreads("memory/copy/" + std::to_string(n), 2.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n), b(n);
    const auto pass = [&](bool stream) {
      Split(n, t, [&](size_t lo, size_t hi) {
        if (stream) {
          StreamCopy(a.p, b.p, lo, hi);
        } else {
          std::memcpy(b.p + lo, a.p + lo, (hi - lo) * 4);
        }
      });
      benchmark::DoNotOptimize(b.p);
    };
    const bool stream = SecondIsFaster(pass);
    for (auto _ : s) pass(stream);
    s.SetLabel(stream ? "streaming stores" : "memcpy");
  });
}

void RegisterRmw(size_t n) {
  RegisterPerThreads("memory/rmw/" + std::to_string(n), 2.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n);
    for (auto _ : s) {
      Split(n, t, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) a.p[i] = a.p[i] * 0.999f;
      });
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
// kReadAhead bytes ahead in each stream, reads faster (as the decoding
// kernels prefetch), the limit is that: on a Xeon (family 6 model 167) 64 /
// 256 MiB read 24.1 -> 26.4 / 12.9 -> 14.3 GB/s on one thread, 25.1-26.9
// -> 29.1-29.7 on two at 256 MiB, where tfk's M = 1 matmul had read its
// 64 MiB of weights at 108 % of the unprefetched figure; while AMD's
// hardware prefetchers did better alone in decoding attention
// (lib/memory.h, DecodeSpreadPrefetch). So each benchmark times one pass
// either way first and keeps the faster (its label says which).
constexpr size_t kReadStreams = 4;
constexpr size_t kReadAhead = 2048;

template <bool kPrefetch>
void ReadRange(const float* data, size_t lo, size_t hi) {
  // Integer xor of the bit patterns into 32 independent lanes per
  // stream: associative, so the compiler vectorises it, and the chains
  // are independent, so the loop is bound by the loads alone.
  const uint32_t* w = reinterpret_cast<const uint32_t*>(data);
  const size_t part = (hi - lo) / kReadStreams / 32 * 32;
  uint32_t acc[kReadStreams][32] = {};
  for (size_t i = 0; i < part; i += 32) {
    for (size_t r = 0; r < kReadStreams; ++r) {
      const uint32_t* p = w + lo + r * part + i;
      if (kPrefetch) {  // both lines of the pair, into L2 (locality 2: prefetcht1)
        __builtin_prefetch(p + kReadAhead / 4, 0, 2);
        __builtin_prefetch(p + kReadAhead / 4 + 16, 0, 2);
      }
      for (size_t j = 0; j < 32; ++j) acc[r][j] ^= p[j];
    }
  }
  uint32_t x = 0;
  for (size_t i = lo + kReadStreams * part; i < hi; ++i) x ^= w[i];
  for (const auto& row : acc) {
    for (uint32_t v : row) x ^= v;
  }
  benchmark::DoNotOptimize(x);
}

void RegisterRead(size_t n) {
  RegisterPerThreads("memory/read/" + std::to_string(n), 1.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n);
    const auto pass = [&](bool prefetch) {
      Split(n, t, [&](size_t lo, size_t hi) {
        prefetch ? ReadRange<true>(a.p, lo, hi) : ReadRange<false>(a.p, lo, hi);
      });
    };
    // The faster way on this machine: the best of two untimed passes each.
    const bool prefetch = SecondIsFaster(pass);
    for (auto _ : s) pass(prefetch);
    s.SetLabel(prefetch ? "software prefetch" : "hardware prefetch");
  });
}

void RegisterTriad(size_t n) {
  RegisterPerThreads("memory/triad/" + std::to_string(n), 3.0 * n * 4, [=](benchmark::State& s, int t) {
    Floats a(n), b(n), c(n);
    for (auto _ : s) {
      Split(n, t, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) a.p[i] = b.p[i] + 3.0f * c.p[i];
      });
      benchmark::DoNotOptimize(a.p);
    }
  });
}

const bool kRegistered = [] {
  RegisterCopy(size_t{64} << 20);   // 256 MiB: the softmax [32*2048, 2048] bytes
  RegisterCopy(size_t{16} << 20);   // 64 MiB: activations 16M, LayerNorm [2048,4096] is 8M
  RegisterCopy(size_t{8} << 20);
  RegisterCopy(size_t{512} << 10);  // LayerNorm [512, 1024]: 4 MiB moved, from L3
  RegisterCopy(size_t{256} << 10);  // L2-resident
  RegisterRmw(size_t{2} << 20);     // RoPE [512, 32, 128] in place
  // Reads of the weight sizes of decoding matmuls (4, 16, 64, 256 MiB).
  RegisterRead(size_t{1} << 20);
  RegisterRead(size_t{4} << 20);
  RegisterRead(size_t{16} << 20);
  RegisterRead(size_t{64} << 20);
  RegisterTriad(size_t{64} << 20);
  return true;
}();

}  // namespace
}  // namespace tfk_bench
