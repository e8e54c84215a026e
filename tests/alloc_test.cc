// No allocation in steady state: a second identical call allocates nothing
// (tfk.h: per-thread scratch "allocated on a thread's first use and reused
// after"; tfk_linear_forward: "a thread that has run a call of this M with
// as many threads allocates nothing for it again"). tfk allocates its
// buffers with aligned_alloc, which this executable replaces with a
// counting one (the library's calls bind to it, shared or static), on every
// supported ISA, on one thread.
#include <stdlib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "test_util.h"

namespace {
std::atomic<long> g_allocs{0};
}  // namespace

extern "C" void* aligned_alloc(size_t alignment, size_t size) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}

namespace tfk_test {
namespace {

class AllocTest : public IsaTest {};

// Runs `call` once to warm up, then again, and expects no allocation in the
// second run.
void ExpectNoAllocOnRepeat(const char* what, const std::function<void()>& call) {
  call();
  const long before = g_allocs.load();
  call();
  EXPECT_EQ(g_allocs.load() - before, 0) << what << " allocated on a repeated call";
}

TEST_P(AllocTest, RepeatedCallsAllocateNothing) {
  // The counter sees the library's allocations: a cache allocates K and V.
  const long before_cache = g_allocs.load();
  tfk::kv_cache cache(1600, 4, 64);
  ASSERT_GE(g_allocs.load() - before_cache, 2) << "aligned_alloc is not interposed";

  WithThreads(1, [&] {
    // Packed linear: k-blocked (K = 700 > one k-block), decoding rows (M =
    // 1, 8: split tiles with partial sums) and the unpacked matmul.
    const std::vector<float> w(4096 * 300, 0.01f), x(64 * 4096, 0.5f);
    std::vector<float> y(64 * 4096);
    const tfk::linear lin(700, 300, w.data());
    const tfk::linear dec(4096, 256, w.data());
    for (size_t m : {64, 8, 1}) {
      ExpectNoAllocOnRepeat("tfk_linear_forward K = 700", [&] { lin.forward(m, x.data(), y.data()); });
      ExpectNoAllocOnRepeat("tfk_linear_forward K = 4096", [&] { dec.forward(m, x.data(), y.data()); });
    }
    ExpectNoAllocOnRepeat("tfk_matmul", [&] {
      tfk::matmul(64, 300, 700, x.data(), w.data(), y.data());
    });
    // Attention: decoding split over keys (partial states merged after the
    // loop), causal prefill, and the cache's attention.
    const std::vector<float> kv(1600 * 4 * 64, 0.25f), q(64 * 4 * 64, 0.5f);
    std::vector<float> o(64 * 4 * 64);
    ExpectNoAllocOnRepeat("tfk_attention, decoding", [&] {
      tfk::attention(1, 1500, 4, 4, 64, q.data(), kv.data(), kv.data(), o.data());
    });
    ExpectNoAllocOnRepeat("tfk_attention, prefill", [&] {
      tfk::attention(64, 600, 4, 4, 64, q.data(), kv.data(), kv.data(), o.data(), TFK_MASK_CAUSAL);
    });
    cache.append(1500, kv.data(), kv.data());
    ExpectNoAllocOnRepeat("tfk_kv_cache_attention", [&] {
      cache.attention(1, 4, q.data(), o.data());
    });
    // Row kernels.
    ExpectNoAllocOnRepeat("tfk_softmax", [&] { tfk::softmax(64, 4096, x.data(), y.data()); });
    ExpectNoAllocOnRepeat("tfk_layernorm", [&] {
      tfk::layernorm(64, 4096, x.data(), nullptr, nullptr, 1e-5f, y.data());
    });
  });
}

TFK_INSTANTIATE_FOR_EACH_ISA(AllocTest);

}  // namespace
}  // namespace tfk_test
