// Shared test helpers: the per-ISA fixture, buffers with chosen misalignment,
// random fills and ulp arithmetic. Tests use only the public API; the ISA is
// chosen through tfk_set_max_isa, so each kernel is checked on every target
// compiled in and supported by this CPU, through the same dispatch users get.
#ifndef TFK_TESTS_TEST_UTIL_H_
#define TFK_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <tfk/tfk.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tfk_test {

constexpr double kEps = 1.0 / (1 << 24);  // float unit roundoff, 2^-24

// Parameter: ISA name. SetUp caps tfk at it; TearDown removes the cap.
class IsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(tfk_set_max_isa(GetParam().c_str()), TFK_SUCCESS) << tfk_last_error();
    ASSERT_EQ(tfk::active_isa(), GetParam());
  }
  void TearDown() override { tfk_set_max_isa(nullptr); }
};

inline std::string IsaParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

#define TFK_INSTANTIATE_FOR_EACH_ISA(Fixture)                                    \
  INSTANTIATE_TEST_SUITE_P(Isa, Fixture, ::testing::ValuesIn(tfk::supported_isas()), \
                           ::tfk_test::IsaParamName)

// Sizes around every vector length (4, 8, 16 floats), primes and a large one.
inline std::vector<size_t> AwkwardSizes() {
  std::vector<size_t> sizes;
  for (size_t n = 1; n <= 33; ++n) sizes.push_back(n);
  for (size_t n : {37, 61, 97, 127, 251, 509, 1021, 4096}) sizes.push_back(n);
  return sizes;
}

// A float buffer whose data() is `misalign` floats past a 64-byte boundary,
// surrounded by guard values so out-of-bounds writes are seen.
class Buffer {
 public:
  static constexpr size_t kGuard = 32;
  Buffer(size_t n, size_t misalign = 0) : n_(n), off_(kGuard + misalign) {
    raw_.assign(n + 2 * kGuard + 16 + 64, kGuardValue);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(raw_.data());
    base_ = (64 - addr % 64) % 64 / sizeof(float);
  }
  float* data() { return raw_.data() + base_ + off_; }
  const float* data() const { return raw_.data() + base_ + off_; }
  float& operator[](size_t i) { return data()[i]; }
  float operator[](size_t i) const { return data()[i]; }
  size_t size() const { return n_; }
  bool GuardsIntact() const {
    for (size_t i = 0; i < raw_.size(); ++i) {
      const size_t rel = i - base_ - off_;  // wraps for i < base_ + off_
      if (i >= base_ + off_ && rel < n_) continue;
      if (std::memcmp(&raw_[i], &kGuardValue, sizeof(float)) != 0) return false;
    }
    return true;
  }
  // GuardsIntact, and the padding of each of `rows` rows (columns [cols, ld))
  // still holds the guard value, for an output the test has not written:
  // a kernel writing past a row's end inside the buffer shows here.
  bool GuardsIntact(size_t rows, size_t cols, size_t ld) const {
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = cols; j < ld; ++j) {
        if (std::memcmp(&data()[r * ld + j], &kGuardValue, sizeof(float)) != 0) return false;
      }
    }
    return GuardsIntact();
  }

 private:
  static constexpr float kGuardValue = -12345.678f;
  size_t n_, off_, base_ = 0;
  std::vector<float> raw_;
};

inline void FillUniform(float* p, size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < n; ++i) p[i] = dist(rng);
}

// Distance in units in the last place between two floats (same sign
// convention as their bit patterns; NaN handled by callers).
inline int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

inline bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// True if the padding of each of `rows` rows (columns [cols, ld)) of `now`
// still holds what `before` (the same layout, saved before the call) held:
// a kernel writing past a row's end inside the buffer is caught here, where
// Buffer's guards see only the ends of the whole buffer.
inline bool PaddingIntact(const float* now, const float* before, size_t rows, size_t cols,
                          size_t ld) {
  for (size_t r = 0; r < rows; ++r) {
    if (!SameBits(now + r * ld + cols, before + r * ld + cols, ld - cols)) return false;
  }
  return true;
}

// True where the active ISA has FMA (x86's AVX targets; the others' bounds
// assume a separate multiply and add, the looser case).
inline bool ActiveIsaHasFma() { return tfk::active_isa().rfind("AVX", 0) == 0; }

// Floats a vector of the active ISA (x86: AVX3* 16, AVX2 8, SSE4 4), for
// tests that place values at a kernel's vector or segment boundaries.
inline size_t ActiveLanes() {
  const std::string isa = tfk::active_isa();
  return isa.rfind("AVX3", 0) == 0 ? 16 : isa == "AVX2" ? 8 : 4;
}

// The caches' lengths, in order.
inline std::vector<size_t> CacheLengths(const std::vector<tfk_kv_cache*>& caches) {
  std::vector<size_t> lengths;
  for (tfk_kv_cache* c : caches) {
    size_t len = 0;
    tfk::check(tfk_kv_cache_info(c, &len, nullptr, nullptr));
    lengths.push_back(len);
  }
  return lengths;
}

// Runs f() with tfk split into n tasks, then restores the default (0).
template <class F>
void WithThreads(int n, const F& f) {
  tfk::set_num_threads(n);
  f();
  tfk::set_num_threads(0);
}

}  // namespace tfk_test

#endif  // TFK_TESTS_TEST_UTIL_H_
