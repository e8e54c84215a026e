// The loops of the machine's limits: see limit_loops.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/limit_loops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stdint.h>

#include "hwy/cache_control.h"
#include "hwy/highway.h"

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

// Ways 1 and 2 of the copy (limit_loops.h), whole vectors; plain stores for
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

// The FMA loop (limit_loops.h): independent chains held in registers.
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
#include <cstring>

#include "limit_loops.h"

namespace tfk_bench {
HWY_EXPORT(ReadRange);
HWY_EXPORT(CopyRange);
HWY_EXPORT(ScaleRange);
HWY_EXPORT(TriadRange);
HWY_EXPORT(FmaLoop);

uint32_t ReadRange(const float* data, size_t lo, size_t hi, bool prefetch) {
  return HWY_DYNAMIC_DISPATCH(ReadRange)(data, lo, hi, prefetch);
}
void CopyRange(const float* src, float* dst, size_t lo, size_t hi, int way) {
  if (way == 0) {
    std::memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
  } else {
    HWY_DYNAMIC_DISPATCH(CopyRange)(src, dst, lo, hi, way);
  }
}
void ScaleRange(float* a, size_t lo, size_t hi) { HWY_DYNAMIC_DISPATCH(ScaleRange)(a, lo, hi); }
void TriadRange(float* a, const float* b, const float* c, size_t lo, size_t hi, int way) {
  HWY_DYNAMIC_DISPATCH(TriadRange)(a, b, c, lo, hi, way);
}

int64_t SupportedTarget(const char* name) {
  // Listed best first: x86's better targets have the lower bits.
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (name == nullptr || std::strcmp(hwy::TargetName(target), name) == 0) return target;
  }
  return 0;
}

namespace {
// This target's entry in an HWY_EXPORT table.
size_t TableIndex(int64_t target) {
  hwy::ChosenTarget chosen;
  chosen.Update(target);
  return chosen.GetIndex();
}
}  // namespace

LoopFn FmaLoopFor(int64_t target) { return HWY_DISPATCH_TABLE(FmaLoop)[TableIndex(target)]; }
void CopyPart(int64_t target, const float* src, float* dst, size_t n, size_t part, size_t parts,
              int way) {
  const size_t lo = n * part / parts / 16 * 16;
  const size_t hi = part + 1 == parts ? n : n * (part + 1) / parts / 16 * 16;
  if (way == 0) {
    std::memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
  } else {
    HWY_DISPATCH_TABLE(CopyRange)[TableIndex(target)](src, dst, lo, hi, way);
  }
}

}  // namespace tfk_bench
#endif  // HWY_ONCE
