// The API around the kernels: errors (status, message naming the argument,
// nothing written), ISA selection, threads, the host's TBB arena, concurrent
// callers and the C++ layer.
#include <hwy/targets.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#include <tfk/tfk.h>
#include <tfk/tfk.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace tfk_test {
namespace {

constexpr float kSentinel = 42.5f;

// Runs `call` on fresh buffers; expects `status`, a message containing
// `needle`, and the output buffer untouched.
void ExpectError(tfk_status status, const std::string& needle,
                 const std::function<tfk_status(const float* x, float* y)>& call) {
  std::vector<float> x(256, 1.0f), y(256, kSentinel);
  EXPECT_EQ(call(x.data(), y.data()), status);
  EXPECT_NE(std::string(tfk_last_error()).find(needle), std::string::npos)
      << "message '" << tfk_last_error() << "' lacks '" << needle << "'";
  for (float v : y) ASSERT_EQ(v, kSentinel) << "output written on error";
}

const size_t kHuge = std::numeric_limits<size_t>::max() / 2;

TEST(Errors, Softmax) {
  auto sm = [](size_t rows, size_t cols, size_t ldx, size_t ldy, float scale, int mask,
               size_t q_len) {
    return [=](const float* x, float* y) {
      return tfk_softmax(rows, cols, x, ldx, y, ldy, scale, static_cast<tfk_mask>(mask), q_len);
    };
  };
  ExpectError(TFK_INVALID_ARGUMENT, "rows is 0", sm(0, 4, 4, 4, 1, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "cols is 0", sm(4, 0, 4, 4, 1, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "leading dimension of x (3) < cols (4)", sm(2, 4, 3, 4, 1, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "leading dimension of y", sm(2, 4, 4, 2, 1, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "scale", sm(2, 4, 4, 4, NAN, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "q_len is 0", sm(2, 4, 4, 4, 1, 1, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "not a multiple of q_len", sm(5, 4, 4, 4, 1, 1, 2));
  ExpectError(TFK_INVALID_ARGUMENT, "too large", sm(kHuge, 4, 4, 4, 1, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "overflows", sm(size_t{1} << 40, 4, size_t{1} << 40, 4, 1, 0, 0));
  ExpectError(TFK_INVALID_ARGUMENT, "x is NULL", [](const float*, float* y) {
    return tfk_softmax(1, 4, nullptr, 4, y, 4, 1, TFK_MASK_NONE, 0);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "y is NULL", [](const float* x, float*) {
    return tfk_softmax(1, 4, x, 4, nullptr, 4, 1, TFK_MASK_NONE, 0);
  });
  // Partial overlap (y = x + 1) is refused; exact in place is fine.
  std::vector<float> buf(64, 1.0f);
  EXPECT_EQ(tfk_softmax(2, 8, buf.data(), 8, buf.data() + 1, 8, 1, TFK_MASK_NONE, 0),
            TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("overlaps"), std::string::npos);
  EXPECT_EQ(buf[1], 1.0f);
  EXPECT_EQ(tfk_softmax(2, 8, buf.data(), 8, buf.data(), 8, 1, TFK_MASK_NONE, 0), TFK_SUCCESS);
  EXPECT_STREQ(tfk_last_error(), "");  // success clears the message
}

TEST(Errors, ActivationAndAdd) {
  ExpectError(TFK_INVALID_ARGUMENT, "leading dimension of x", [](const float* x, float* y) {
    return tfk_activate(TFK_ACT_RELU, 2, 4, x, 1, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "x is NULL", [](const float*, float* y) {
    return tfk_activate(TFK_ACT_GELU_ERF, 1, 4, nullptr, 4, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "b is NULL", [](const float* x, float* y) {
    return tfk_add(1, 4, x, 4, nullptr, 4, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "leading dimension of a", [](const float* x, float* y) {
    return tfk_add(2, 4, x, 3, x, 4, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "y overlaps b", [](const float* x, float* y) {
    return tfk_add(2, 4, x, 4, y + 2, 4, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "cols is 0", [](const float* x, float* y) {
    return tfk_add(2, 0, x, 4, x, 4, y, 4);
  });
  // Partial overlap of x and y (one buffer, y = x + 1): refused, as for
  // every kernel; nothing written.
  ExpectError(TFK_INVALID_ARGUMENT, "y overlaps x", [](const float*, float* y) {
    return tfk_activate(TFK_ACT_RELU, 2, 4, y, 4, y + 1, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "y overlaps x", [](const float*, float* y) {
    return tfk_activate(TFK_ACT_SILU, 2, 4, y, 8, y, 4);  // same pointer, other stride
  });
  ExpectError(TFK_INVALID_ARGUMENT, "y overlaps a", [](const float* x, float* y) {
    return tfk_add(2, 4, y + 3, 4, x, 4, y, 4);
  });
}

TEST(Errors, Norms) {
  ExpectError(TFK_INVALID_ARGUMENT, "eps", [](const float* x, float* y) {
    return tfk_layernorm(1, 4, x, 4, nullptr, nullptr, -1.0f, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "eps", [](const float* x, float* y) {
    return tfk_rmsnorm(1, 4, x, 4, nullptr, INFINITY, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "gamma overlaps y", [](const float* x, float* y) {
    return tfk_layernorm(1, 4, x, 4, y + 1, nullptr, 1e-5f, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "beta overlaps y", [](const float* x, float* y) {
    return tfk_layernorm(2, 4, x, 4, nullptr, y + 7, 1e-5f, y, 4);  // y's last element
  });
  ExpectError(TFK_INVALID_ARGUMENT, "gamma overlaps y", [](const float* x, float* y) {
    return tfk_rmsnorm(1, 4, x, 4, y + 3, 1e-5f, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "y overlaps x", [](const float*, float* y) {
    return tfk_rmsnorm(2, 4, y, 4, nullptr, 1e-5f, y + 4, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "rows is 0", [](const float* x, float* y) {
    return tfk_rmsnorm(0, 4, x, 4, nullptr, 1e-5f, y, 4);
  });
  ExpectError(TFK_INVALID_ARGUMENT, "leading dimension of y", [](const float* x, float* y) {
    return tfk_layernorm(2, 4, x, 4, nullptr, nullptr, 1e-5f, y, 3);
  });
}

TEST(Errors, Rope) {
  // RoPE writes x in place: check x stays untouched.
  auto rope = [](size_t tokens, size_t heads, size_t hd, size_t rd, int pairing, double base,
                 size_t ldx) {
    return [=](const float*, float* y) {
      return tfk_rope(tokens, heads, hd, rd, static_cast<tfk_rope_pairing>(pairing), base, y, ldx,
                      0, nullptr);
    };
  };
  ExpectError(TFK_INVALID_ARGUMENT, "rotary_dim (7) is odd", rope(1, 1, 8, 7, 1, 1e4, 8));
  ExpectError(TFK_INVALID_ARGUMENT, "rotary_dim (10) > head_dim (8)", rope(1, 1, 8, 10, 1, 1e4, 8));
  ExpectError(TFK_INVALID_ARGUMENT, "rotary_dim is 0", rope(1, 1, 8, 0, 1, 1e4, 8));
  // The per-token angle tables hold 1024 dims (tfk.h); 1024 itself is fine.
  ExpectError(TFK_INVALID_ARGUMENT, "rotary_dim (1026) > 1024", [](const float*, float*) {
    std::vector<float> x(1026, 1.0f);
    const tfk_status s = tfk_rope(1, 1, 1026, 1026, TFK_ROPE_HALF, 1e4, x.data(), 1026, 5, nullptr);
    for (float v : x) EXPECT_EQ(v, 1.0f);
    return s;
  });
  {
    std::vector<float> x(1024 + 2, 1.0f);
    EXPECT_EQ(tfk_rope(1, 1, 1026, 1024, TFK_ROPE_HALF, 1e4, x.data(), 1026, 5, nullptr),
              TFK_SUCCESS);
    EXPECT_NE(x[1], 1.0f);
    EXPECT_EQ(x[1024], 1.0f);  // beyond rotary_dim: untouched
  }
  ExpectError(TFK_INVALID_ARGUMENT, "base", rope(1, 1, 8, 8, 0, 1.0, 8));
  ExpectError(TFK_INVALID_ARGUMENT, "base", rope(1, 1, 8, 8, 0, NAN, 8));
  ExpectError(TFK_INVALID_ARGUMENT, "leading dimension of x (15) < cols (16)",
              rope(2, 2, 8, 8, 0, 1e4, 15));
  ExpectError(TFK_INVALID_ARGUMENT, "tokens is 0", rope(0, 2, 8, 8, 0, 1e4, 16));
  ExpectError(TFK_INVALID_ARGUMENT, "overflows",
              rope(1, size_t{1} << 40, size_t{1} << 40, 8, 0, 1e4, 16));
  ExpectError(TFK_INVALID_ARGUMENT, "x is NULL", [](const float*, float*) {
    return tfk_rope(1, 1, 8, 8, TFK_ROPE_HALF, 1e4, nullptr, 8, 0, nullptr);
  });
  // pos_start + t must not overflow (signed overflow is undefined); the last
  // position that fits is accepted.
  ExpectError(TFK_INVALID_ARGUMENT, "pos_start", [](const float*, float* y) {
    return tfk_rope(2, 1, 8, 8, TFK_ROPE_HALF, 1e4, y, 8, INT64_MAX, nullptr);
  });
  {
    std::vector<float> y(16, 1.0f);
    EXPECT_EQ(tfk_rope(2, 1, 8, 8, TFK_ROPE_HALF, 1e4, y.data(), 8, INT64_MAX - 1, nullptr),
              TFK_SUCCESS);
  }
  // Positions are read as int64_t.
  ExpectError(TFK_INVALID_ARGUMENT, "positions is not 8-byte aligned",
              [](const float* x, float* y) {
                return tfk_rope(1, 1, 8, 8, TFK_ROPE_HALF, 1e4, y, 8, 0,
                                reinterpret_cast<const int64_t*>(x + 1));
              });
  // Positions read while x is rotated must not share its bytes.
  ExpectError(TFK_INVALID_ARGUMENT, "positions overlaps x", [](const float*, float* y) {
    return tfk_rope(2, 1, 8, 8, TFK_ROPE_HALF, 1e4, y, 8, 0,
                    reinterpret_cast<const int64_t*>(y + 8));
  });
  // Only positions[1] shares bytes with x (its first two floats): the
  // extents are compared in bytes.
  ExpectError(TFK_INVALID_ARGUMENT, "positions overlaps x", [](const float*, float* y) {
    return tfk_rope(2, 1, 8, 8, TFK_ROPE_HALF, 1e4, y + 2, 8, 0,
                    reinterpret_cast<const int64_t*>(y));
  });
}

TEST(Errors, StatusStringsAndCppException) {
  EXPECT_STREQ(tfk_status_string(TFK_SUCCESS), "success");
  EXPECT_STREQ(tfk_status_string(TFK_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(tfk_status_string(TFK_UNSUPPORTED_ISA), "unsupported ISA");
  EXPECT_STREQ(tfk_status_string(TFK_OUT_OF_MEMORY), "out of memory");
  EXPECT_STREQ(tfk_status_string(TFK_INTERNAL_ERROR), "internal error");
  float x[4] = {1, 2, 3, 4};
  try {
    tfk::softmax(1, 4, x, x, 1.0f, TFK_MASK_NONE, 0, 2);
    FAIL() << "no exception";
  } catch (const tfk::error& e) {
    EXPECT_EQ(e.status(), TFK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("tfk_softmax: leading dimension of x"), std::string::npos);
  }
  EXPECT_THROW(tfk::set_max_isa("NOT_AN_ISA"), tfk::error);
  const std::string v = std::to_string(TFK_VERSION_MAJOR) + "." +
                        std::to_string(TFK_VERSION_MINOR) + "." +
                        std::to_string(TFK_VERSION_PATCH);
  EXPECT_EQ(v, tfk_version());
}

TEST(Isa, ListsCapsAndRefusals) {
  ASSERT_GE(tfk_isa_count(), 1u);
  EXPECT_EQ(tfk_isa_name(tfk_isa_count()), nullptr);
  const std::vector<std::string> supported = tfk::supported_isas();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(tfk::active_isa(), supported.front());  // best first
  for (const std::string& isa : supported) {
    tfk::scoped_max_isa cap(isa);
    EXPECT_EQ(tfk::active_isa(), isa);
    EXPECT_TRUE(tfk_isa_supported(isa.c_str()));
  }
  EXPECT_EQ(tfk::active_isa(), supported.front());
  // A scope restores the cap in force before it (an enclosing scope's, or
  // one set by tfk_set_max_isa or TFK_MAX_ISA), not "best".
  if (supported.size() >= 2) {
    const std::string lowest = supported.back(), next = supported[supported.size() - 2];
    tfk::set_max_isa(next);
    {
      tfk::scoped_max_isa outer(lowest);
      { tfk::scoped_max_isa inner(next); }
      EXPECT_EQ(tfk::active_isa(), lowest);
    }
    EXPECT_EQ(tfk::active_isa(), next);
    tfk::set_max_isa("best");
  }
  // Names in any case, and the AVX512 alias.
  for (const std::string& isa : supported) {
    std::string lower = isa, mixed = isa;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    mixed[0] = lower[0];
    for (const std::string& name : {lower, mixed}) {
      EXPECT_EQ(tfk_set_max_isa(name.c_str()), TFK_SUCCESS) << name;
      EXPECT_EQ(tfk::active_isa(), isa) << name;
      EXPECT_TRUE(tfk_isa_supported(name.c_str())) << name;
    }
  }
  if (tfk_isa_supported("AVX3")) {
    EXPECT_EQ(tfk_set_max_isa("avx512"), TFK_SUCCESS);
    EXPECT_EQ(tfk::active_isa(), "AVX3");
  }
  EXPECT_EQ(tfk_set_max_isa("best"), TFK_SUCCESS);
  EXPECT_EQ(tfk::active_isa(), supported.front());

  EXPECT_EQ(tfk_set_max_isa("PENTIUM"), TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("unknown ISA name 'PENTIUM'"), std::string::npos);
  // Known to Highway but not compiled into this build (SSE4 baseline):
  EXPECT_EQ(tfk_set_max_isa("SSSE3"), TFK_UNSUPPORTED_ISA);
  EXPECT_NE(std::string(tfk_last_error()).find("not compiled"), std::string::npos);
  // Every compiled ISA the CPU lacks is refused, and the cap is unchanged.
  for (const std::string& isa : tfk::compiled_isas()) {
    if (tfk_isa_supported(isa.c_str())) continue;
    EXPECT_EQ(tfk_set_max_isa(isa.c_str()), TFK_UNSUPPORTED_ISA);
    EXPECT_NE(std::string(tfk_last_error()).find("does not support"), std::string::npos);
    EXPECT_EQ(tfk::active_isa(), supported.front());
  }
}

// tfk's cap and its queries are its own: a host's Highway dispatch state
// (hwy::GetChosenTarget(), which Highway's own HWY_DYNAMIC_DISPATCH uses)
// is what the host left it.
TEST(Isa, LeavesTheHostsHighwayChoiceAlone) {
  hwy::ChosenTarget& host = hwy::GetChosenTarget();
  host.Update(HWY_SSE4);
  const size_t index = host.GetIndex();
  for (const std::string& isa : tfk::supported_isas()) {
    EXPECT_TRUE(tfk_isa_supported(isa.c_str()));
    EXPECT_EQ(tfk_set_max_isa(isa.c_str()), TFK_SUCCESS);
    float x[3] = {1, 2, 3}, y[3];
    EXPECT_EQ(tfk_softmax(1, 3, x, 3, y, 3, 1.0f, TFK_MASK_NONE, 0), TFK_SUCCESS);
  }
  EXPECT_EQ(tfk_set_max_isa("best"), TFK_SUCCESS);
  EXPECT_EQ(host.GetIndex(), index);
  host.Update(hwy::SupportedTargets());
}

// Run by ctest with TFK_MAX_ISA and TFK_NUM_THREADS set (tests/CMakeLists.txt).
// TFK_TEST_ISA and TFK_TEST_THREADS, where set, are the values expected
// instead of the variables' own, for values that are refused (reported on
// stderr and ignored): "best" (the best supported ISA), "arena" (the arena's
// concurrency).
// A host's static constructor may call tfk before tfk's own have run (with
// the static library, whose objects the link puts after the program's), so
// a getter there can be the first use of the ISA state, which reads
// TFK_MAX_ISA (and, refused, sets and clears a message): the message a
// failed call left must survive it. Recorded before main, checked below.
const std::string g_message_after_first_getter = [] {
  tfk_softmax(1, 1, nullptr, 1, nullptr, 1, 1.0f, TFK_MASK_NONE, 1);
  tfk_active_isa();
  return std::string(tfk_last_error());
}();

TEST(Environment, CapAndThreadsFromEnvironment) {
  const char* isa = std::getenv("TFK_MAX_ISA");
  const char* threads = std::getenv("TFK_NUM_THREADS");
  if (isa == nullptr || threads == nullptr) GTEST_SKIP() << "run by ctest with the variables set";
  // The getters that read the variables (this process's first tfk calls
  // after a failed one) leave the failed call's message as it is, a refused
  // variable included.
  EXPECT_EQ(tfk_softmax(1, 1, nullptr, 1, nullptr, 1, 1.0f, TFK_MASK_NONE, 1),
            TFK_INVALID_ARGUMENT);
  const std::string message = tfk_last_error();
  EXPECT_NE(tfk_active_isa(), nullptr);
  EXPECT_GT(tfk_get_num_threads(), 0);
  EXPECT_EQ(tfk_last_error(), message);
  EXPECT_EQ(g_message_after_first_getter, message);
  const char* expect_isa = std::getenv("TFK_TEST_ISA");
  if (expect_isa == nullptr) expect_isa = isa;
  EXPECT_EQ(tfk::active_isa(),
            std::string(expect_isa) == "best" ? tfk::supported_isas().front() : expect_isa);
  const char* expect = std::getenv("TFK_TEST_THREADS");
  if (expect == nullptr) expect = threads;
  // A call takes at most 1024 tasks, whatever was asked for.
  EXPECT_EQ(tfk::num_threads(), std::min(1024, std::string(expect) == "arena"
                                                   ? oneapi::tbb::this_task_arena::max_concurrency()
                                                   : std::atoi(expect)));
}

TEST(Threads, SetGetAndRefuseNegative) {
  EXPECT_EQ(tfk_set_num_threads(-1), TFK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tfk_last_error()).find("n (-1) is negative"), std::string::npos);
  tfk::set_num_threads(3);
  EXPECT_EQ(tfk::num_threads(), 3);
  tfk::set_num_threads(5000);  // more than a call's 1024 tasks
  EXPECT_EQ(tfk::num_threads(), 1024);
  tfk::set_num_threads(0);
  EXPECT_EQ(tfk::num_threads(), oneapi::tbb::this_task_arena::max_concurrency());
}

TEST(Threads, UsesTheHostArena) {
  const size_t rows = 512, cols = 2048;
  std::vector<float> x(rows * cols), y1(rows * cols), y2(rows * cols);
  FillUniform(x.data(), x.size(), -5, 5, 1);
  tfk::softmax(rows, cols, x.data(), y1.data());
  oneapi::tbb::task_arena arena(1);
  arena.execute([&] {
    EXPECT_EQ(tfk::num_threads(), 1);  // the host arena's concurrency
    tfk::softmax(rows, cols, x.data(), y2.data());
  });
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), x.size()));
}

// A host task group cancelled before tfk is called from one of its tasks (a
// sibling threw) must not cancel tfk's own tasks: the call does all its work
// or reports an error. Two threads and 2 MiB of traffic: several tasks.
TEST(Threads, RunsItsTasksInsideACancelledHostGroup) {
  const size_t rows = 64, cols = 4096;
  std::vector<float> x(rows * cols), y1(rows * cols), y2(rows * cols, kSentinel);
  FillUniform(x.data(), x.size(), -5, 5, 2);
  WithThreads(2, [&] {
    tfk::softmax(rows, cols, x.data(), y1.data());
    oneapi::tbb::task_group_context host;
    tfk_status status = TFK_INTERNAL_ERROR;
    oneapi::tbb::parallel_for(
        oneapi::tbb::blocked_range<int>(0, 1),
        [&](const oneapi::tbb::blocked_range<int>&) {
          host.cancel_group_execution();
          status = tfk_softmax(rows, cols, x.data(), cols, y2.data(), cols, 1.0f, TFK_MASK_NONE, 0);
        },
        host);
    EXPECT_EQ(status, TFK_SUCCESS);
  });
  EXPECT_TRUE(SameBits(y1.data(), y2.data(), x.size()));
}

// A tfk call made from a host's parallel loop waits for its own tasks only:
// a waiting thread that took the host's other tasks would run them inside
// the call, where a host task that locks what its caller holds (a session
// mutex) deadlocks, and one whose tfk call failed leaves its message behind
// the outer call's success. Each host task marks its thread busy around the
// call and counts the tasks that start on a busy thread. Long calls of two
// tasks (8 MiB of traffic) between short ones, 3072 host tasks on two
// threads (without the isolation, 1-3 of every 1024 ran nested).
TEST(Threads, CallsFromHostTasksRunNoHostTasksInside) {
  const size_t n = size_t{1} << 20;
  std::vector<float> x(n), y(2 * n);
  FillUniform(x.data(), n, -4, 4, 4);
  static thread_local bool busy = false;
  std::atomic<int> nested{0}, failures{0};
  WithThreads(2, [&] {
    oneapi::tbb::task_arena arena(2);
    arena.execute([&] {
      oneapi::tbb::parallel_for(
          oneapi::tbb::blocked_range<int>(0, 3072, 1),
          [&](const oneapi::tbb::blocked_range<int>& r) {
            for (int i = r.begin(); i != r.end(); ++i) {
              if (busy) nested.fetch_add(1);
              busy = true;
              const int slot = oneapi::tbb::this_task_arena::current_thread_index();
              float* out = y.data() + static_cast<size_t>(slot) * n;  // the thread's own
              if (i % 4 == 0) {
                tfk_softmax(0, 8, x.data(), 8, out, 8, 1.0f, TFK_MASK_NONE, 0);  // fails
              }
              // Odd tasks are short (8 floats, on the calling thread): plenty
              // of host tasks to take while a long one waits.
              const size_t len = i % 2 ? 8 : n;
              if (tfk_activate(TFK_ACT_GELU_ERF, 1, len, x.data(), len, out, len) != TFK_SUCCESS ||
                  tfk_last_error()[0] != '\0') {
                failures.fetch_add(1);
              }
              busy = false;
            }
          },
          oneapi::tbb::simple_partitioner());
    });
  });
  EXPECT_EQ(nested.load(), 0);
  EXPECT_EQ(failures.load(), 0);
}

TEST(Threads, ConcurrentCallersGetCorrectResults) {
  const size_t rows = 64, cols = 1000;
  std::vector<float> x(rows * cols);
  FillUniform(x.data(), x.size(), -4, 4, 2);
  std::vector<float> want_sm(x.size()), want_ln(x.size()), want_ge(x.size());
  tfk::softmax(rows, cols, x.data(), want_sm.data());
  tfk::layernorm(rows, cols, x.data(), nullptr, nullptr, 1e-5f, want_ln.data());
  tfk::activate(TFK_ACT_GELU_ERF, rows, cols, x.data(), want_ge.data());
  // A matmul whose tasks use per-thread scratch: x as A [64, 1000] times
  // B [1000, 640] (20 panels).
  const size_t mn = 640;
  std::vector<float> b(cols * mn), want_mm(rows * mn);
  FillUniform(b.data(), b.size(), -1, 1, 3);
  tfk::check(tfk_matmul(rows, mn, cols, 1, x.data(), cols, b.data(), mn, TFK_LAYOUT_KN, 0,
                        want_mm.data(), mn));
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> sm(x.size()), ln(x.size()), ge(x.size()), mm(want_mm.size());
      bool good = true;
      for (int it = 0; it < 20; ++it) {
        good &= tfk_softmax(rows, cols, x.data(), cols, sm.data(), cols, 1, TFK_MASK_NONE, 0) == 0;
        good &= tfk_layernorm(rows, cols, x.data(), cols, nullptr, nullptr, 1e-5f, ln.data(), cols) == 0;
        good &= tfk_activate(TFK_ACT_GELU_ERF, rows, cols, x.data(), cols, ge.data(), cols) == 0;
        good &= tfk_matmul(rows, mn, cols, 1, x.data(), cols, b.data(), mn, TFK_LAYOUT_KN, 0,
                           mm.data(), mn) == 0;
        good &= SameBits(sm.data(), want_sm.data(), x.size()) &&
                SameBits(ln.data(), want_ln.data(), x.size()) &&
                SameBits(ge.data(), want_ge.data(), x.size()) &&
                SameBits(mm.data(), want_mm.data(), mm.size());
      }
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

}  // namespace
}  // namespace tfk_test
