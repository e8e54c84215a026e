// tfk-ab's `copy` side: a copy of the bytes the kernel reads and writes, so
// that a kernel's rate is paired round by round with the rate of a copy of
// the same bytes, the limit of a kernel on inputs from memory (docs/
// benchmarks.md reads shares of it). It is bench_memory.cc's copy with
// streaming stores and the source prefetched 4 KiB ahead (its fastest way
// from 32 MiB up on the Xeons measured; tfk's row kernels write the same
// way past their threshold), split into `threads` equal parts in a TBB arena
// of that many threads. AVX-512 where the CPU has it, else SSE2.
#include <immintrin.h>
#include <stdint.h>

#include <memory>

#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/partitioner.h"
#include "oneapi/tbb/task_arena.h"
#include "tfk_ab.h"

namespace tfk_ab {
namespace {

constexpr size_t kAheadFloats = 1024;  // 4 KiB

__attribute__((target("avx512f"))) void CopyAvx512(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 64 != 0; ++i) dst[i] = src[i];
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i + kAheadFloats), _MM_HINT_T0);
    _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}

void CopySse2(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= n; i += 4) {
    if (i % 16 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(src + i + kAheadFloats), _MM_HINT_T0);
    _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}

}  // namespace

std::function<void()> CopyCall(const Problem& p, std::string* why) {
  if (p.kernel == Kernel::kAdd || p.kernel == Kernel::kLinear) {
    *why = "copy pairs with the kernels of one input and one output of the same size";
    return {};
  }
  const size_t n = p.rows * p.cols, threads = static_cast<size_t>(p.threads);
  const auto copy = __builtin_cpu_supports("avx512f") ? &CopyAvx512 : &CopySse2;
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
            copy(src + lo, dst + lo, hi - lo);
          },
          oneapi::tbb::static_partitioner());
    });
  };
}

}  // namespace tfk_ab
