// A parallel call whose first task allocation fails inside oneTBB: TBB
// throws std::bad_alloc, which must not leave a C entry point. The call
// still succeeds, each chunk of its work done exactly once, with the bits of
// a call on one thread (lib/threading.cc, ParallelForImpl).
//
// TBB allocates a parallel loop's tasks through tbb::detail::r1::allocate,
// which this executable replaces with one that throws at the k-th call
// while armed and otherwise hands the call to TBB's own. Every allocation
// the calling thread makes before the loop spawns its first task is failed
// in turn: the root task, and the first split's task and join node. (A
// failure after a spawn is lost inside TBB 2021.8, whose waiting thread
// then never wakes: lib/threading.cc.) r1::spawn is replaced as well, to
// see where the first spawn comes.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "oneapi/tbb/detail/_small_object_pool.h"
#include "oneapi/tbb/detail/_task.h"
#include "oneapi/tbb/task_arena.h"
#include "test_util.h"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<bool> g_spawned{false};
std::atomic<long> g_count{0};     // allocations made while armed, before a spawn
std::atomic<long> g_fail_at{-1};  // the allocation that throws, or -1
std::atomic<long> g_thrown{0};

void CountOrThrow() {
  if (!g_armed.load() || g_spawned.load()) return;
  if (g_count.fetch_add(1) == g_fail_at.load()) {
    g_thrown.fetch_add(1);
    throw std::bad_alloc();
  }
}

template <class Fn>
Fn Real(const char* mangled) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, mangled));
}
}  // namespace

namespace tbb {
namespace detail {
namespace r1 {
void* __TBB_EXPORTED_FUNC allocate(d1::small_object_pool*& pool, std::size_t bytes) {
  using Fn = void* (*)(d1::small_object_pool*&, std::size_t);
  static const Fn real = Real<Fn>("_ZN3tbb6detail2r18allocateERPNS0_2d117small_object_poolEm");
  CountOrThrow();
  return real(pool, bytes);
}
void* __TBB_EXPORTED_FUNC allocate(d1::small_object_pool*& pool, std::size_t bytes,
                                   const d1::execution_data& ed) {
  using Fn = void* (*)(d1::small_object_pool*&, std::size_t, const d1::execution_data&);
  static const Fn real = Real<Fn>(
      "_ZN3tbb6detail2r18allocateERPNS0_2d117small_"
      "object_poolEmRKNS2_14execution_dataE");
  CountOrThrow();
  return real(pool, bytes, ed);
}
void __TBB_EXPORTED_FUNC spawn(d1::task& t, d1::task_group_context& ctx) {
  using Fn = void (*)(d1::task&, d1::task_group_context&);
  static const Fn real =
      Real<Fn>("_ZN3tbb6detail2r15spawnERNS0_2d14taskERNS2_18task_group_contextE");
  if (g_armed.load()) g_spawned = true;
  real(t, ctx);
}
void __TBB_EXPORTED_FUNC spawn(d1::task& t, d1::task_group_context& ctx, d1::slot_id id) {
  using Fn = void (*)(d1::task&, d1::task_group_context&, d1::slot_id);
  static const Fn real =
      Real<Fn>("_ZN3tbb6detail2r15spawnERNS0_2d14taskERNS2_18task_group_contextEt");
  if (g_armed.load()) g_spawned = true;
  real(t, ctx, id);
}
}  // namespace r1
}  // namespace detail
}  // namespace tbb

namespace tfk_test {
namespace {

struct Counted {
  tfk_status status;
  long allocs;  // before the first spawn
  bool spawned;
};

// Runs call() with TBB's allocation fail_at throwing (-1: none).
Counted RunArmed(long fail_at, tfk_status (*call)(void*), void* ctx) {
  // Two threads, whatever the machine has: with one, TBB would not split.
  oneapi::tbb::task_arena arena(2);
  arena.initialize();
  g_count = 0, g_thrown = 0, g_fail_at = fail_at, g_spawned = false, g_armed = true;
  const tfk_status s = arena.execute([&] { return call(ctx); });
  g_armed = false;
  return {s, g_count.load(), g_spawned.load()};
}

class ThreadingTest : public IsaTest {
 protected:
  void SetUp() override {
    IsaTest::SetUp();
    // 8 tasks, split by TBB into as many pieces as the arena has threads.
    ASSERT_EQ(tfk_set_num_threads(8), TFK_SUCCESS);
  }
  void TearDown() override {
    tfk_set_num_threads(0);
    IsaTest::TearDown();
  }

  // want: what call() writes on one thread (into out, from what reset()
  // puts back). Then each TBB allocation of an 8-task call before its first
  // spawn throws in turn.
  void ExpectEachFailureCompletes(const char* what, tfk_status (*call)(void*), void* ctx,
                                  const std::function<void()>& reset, const float* out, size_t n) {
    SCOPED_TRACE(what);
    ASSERT_EQ(tfk_set_num_threads(1), TFK_SUCCESS);
    reset();
    ASSERT_EQ(call(ctx), TFK_SUCCESS) << tfk_last_error();
    const std::vector<float> want(out, out + n);
    ASSERT_EQ(tfk_set_num_threads(8), TFK_SUCCESS);
    reset();
    const Counted clean = RunArmed(-1, call, ctx);
    ASSERT_EQ(clean.status, TFK_SUCCESS) << tfk_last_error();
    ASSERT_TRUE(SameBits(want.data(), out, n));
    ASSERT_TRUE(clean.spawned) << "the call was not split into tasks: nothing to fail";
    ASSERT_GE(clean.allocs, 1);
    for (long k = 0; k < clean.allocs; ++k) {
      SCOPED_TRACE("TBB allocation " + std::to_string(k) + " of " + std::to_string(clean.allocs) +
                   " throws");
      reset();
      const Counted c = RunArmed(k, call, ctx);
      EXPECT_EQ(g_thrown.load(), 1);
      EXPECT_EQ(c.status, TFK_SUCCESS) << tfk_last_error();
      EXPECT_TRUE(SameBits(want.data(), out, n)) << "a chunk was skipped or run twice";
    }
  }
};

// y += b in place: a chunk run twice adds b twice, one skipped leaves y.
TEST_P(ThreadingTest, FailedTaskAllocationStillRunsEachChunkOnce) {
  struct Add {
    size_t rows = 512, cols = 1024;  // 2 MiB: 8 tasks of 64 rows
    std::vector<float> y = std::vector<float>(rows * cols), b = std::vector<float>(rows * cols);
  } add;
  for (size_t i = 0; i < add.b.size(); ++i) add.b[i] = static_cast<float>(i % 1000) + 0.5f;
  ExpectEachFailureCompletes(
      "add",
      [](void* p) {
        Add& a = *static_cast<Add*>(p);
        return tfk_add(a.rows, a.cols, a.y.data(), a.cols, a.b.data(), a.cols, a.y.data(), a.cols);
      },
      &add,
      [&] {
        for (size_t i = 0; i < add.y.size(); ++i) add.y[i] = static_cast<float>(i % 4096);
      },
      add.y.data(), add.y.size());

  // The matmul's tiles: C = A B + C (beta 1), so a tile run twice differs.
  struct Mm {
    size_t m = 256, k = 64, n = 512;
    std::vector<float> a, b, c;
  } mm;
  mm.a.resize(mm.m * mm.k);
  mm.b.resize(mm.k * mm.n);
  mm.c.resize(mm.m * mm.n);
  FillUniform(mm.a.data(), mm.a.size(), -1.0f, 1.0f, 1);
  FillUniform(mm.b.data(), mm.b.size(), -1.0f, 1.0f, 2);
  ExpectEachFailureCompletes(
      "matmul",
      [](void* p) {
        Mm& q = *static_cast<Mm*>(p);
        return tfk_matmul(q.m, q.n, q.k, 1.0f, q.a.data(), q.k, q.b.data(), q.n, TFK_LAYOUT_KN,
                          1.0f, q.c.data(), q.n);
      },
      &mm, [&] { std::fill(mm.c.begin(), mm.c.end(), 1.0f); }, mm.c.data(), mm.c.size());
}

TFK_INSTANTIATE_FOR_EACH_ISA(ThreadingTest);

}  // namespace
}  // namespace tfk_test
