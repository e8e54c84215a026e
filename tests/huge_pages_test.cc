// Packed weights and KV caches of 2 MiB and more lie on memory advised as
// transparent huge pages (lib/memory.h, AllocateLarge): while they live, the
// process's mappings that /proc/self/smaps flags `hg` (MADV_HUGEPAGE) span
// at least their whole 2 MiB pages more than before; smaller buffers are
// not advised; and with TFK_HUGE_PAGES=0 (the huge_pages_test.off entry)
// none is. The flag is the advice itself: whether the kernel then finds
// free 2 MiB pages for it does not change it, so the test cannot pass or
// fail by the machine's memory.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

namespace tfk_test {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

// Bytes of the process's mappings flagged `hg`; false if smaps is missing.
bool AdvisedBytes(size_t* bytes) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == nullptr) return false;
  char line[512];
  size_t size = 0, total = 0;
  while (fgets(line, sizeof(line), f) != nullptr) {
    unsigned long start = 0, end = 0;
    if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      size = end - start;
    } else if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " hg") != nullptr) {
      total += size;
    }
  }
  fclose(f);
  *bytes = total;
  return true;
}

bool Advising() {
  const char* env = getenv("TFK_HUGE_PAGES");
  return env == nullptr || strcmp(env, "0") != 0;
}

TEST(HugePages, LargePackedWeightsAndKvCaches) {
  FILE* thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (thp == nullptr) GTEST_SKIP() << "this kernel has no transparent huge pages";
  fclose(thp);
  size_t before = 0;
  if (!AdvisedBytes(&before)) GTEST_SKIP() << "no /proc/self/smaps";

  // 256 KiB of packed weights: not advised.
  const size_t small = 256;
  std::vector<float> w(small * small, 0.5f);
  tfk_linear* small_layer = nullptr;
  ASSERT_EQ(tfk_linear_create(&small_layer, small, small, w.data(), small, TFK_LAYOUT_KN,
                              nullptr, TFK_ACT_NONE),
            TFK_SUCCESS);
  size_t after_small = 0;
  ASSERT_TRUE(AdvisedBytes(&after_small));
  EXPECT_EQ(after_small, before);

  // 5 MiB of packed weights (K = 1280, N = 1024): two whole 2 MiB pages; a
  // cache of 2 x 4 MiB (1024 tokens x 8 heads x 128 floats).
  const size_t K = 1280, N = 1024;
  w.assign(K * N, 0.25f);
  tfk_linear* layer = nullptr;
  ASSERT_EQ(tfk_linear_create(&layer, K, N, w.data(), N, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE),
            TFK_SUCCESS);
  tfk_kv_cache* cache = nullptr;
  ASSERT_EQ(tfk_kv_cache_create(&cache, 1024, 8, 128, TFK_DTYPE_F32), TFK_SUCCESS);
  size_t after = 0;
  ASSERT_TRUE(AdvisedBytes(&after));
  if (Advising()) {
    EXPECT_GE(after, before + (K * N * sizeof(float)) / kHuge * kHuge + 2 * (size_t{4} << 20));
  } else {
    EXPECT_EQ(after, before);
  }
  // The buffers work as any other: a forward over the packed weights.
  std::vector<float> x(K, 1.0f), y(N, 0.0f);
  ASSERT_EQ(tfk_linear_forward(layer, 1, x.data(), K, y.data(), N, nullptr, 0), TFK_SUCCESS);
  EXPECT_EQ(y[0], 0.25f * K);
  EXPECT_EQ(y[N - 1], 0.25f * K);
  tfk_kv_cache_destroy(cache);
  tfk_linear_destroy(layer);
  tfk_linear_destroy(small_layer);
}

}  // namespace
}  // namespace tfk_test
