// Out of memory at every allocation a call makes, one at a time: the call
// returns TFK_OUT_OF_MEMORY with a message that starts with its name, a
// create leaves *out as it was, a forward leaves every KV cache at its
// length from before the call, and the same call run again without failure
// gives the bits of a call that never failed. The sanitizer build's leak
// checker sees what a failed create or call would leak.
//
// tfk's buffers (per-thread scratch, packed weights, caches) come from
// aligned_alloc, which this executable replaces with one that fails the
// k-th allocation of a thread armed for it. (Handles and the copies a
// create makes come from operator new and are not failed here.) Each
// attempt runs on a fresh thread, whose per-thread scratch is still empty,
// with tfk on one thread (the caller runs every task), so every attempt
// makes the same allocations in the same order as the first, clean one.
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {
thread_local bool t_armed = false;  // count (and fail) this thread's allocations
thread_local long t_count = 0;      // allocations made while armed
thread_local long t_fail_at = -1;   // the allocation to fail, or -1
// Called at each armed allocation before it is made or failed.
thread_local void (*t_observe)(void*, long) = nullptr;
thread_local void* t_observe_ctx = nullptr;
}  // namespace

extern "C" void* aligned_alloc(size_t alignment, size_t size) {
  if (t_armed) {
    const long i = t_count++;
    if (t_observe != nullptr) t_observe(t_observe_ctx, i);
    if (i == t_fail_at) return nullptr;
  }
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}

namespace tfk_test {
namespace {

struct Attempt {
  tfk_status status = TFK_SUCCESS;
  long allocs = 0;
  std::string error;
};

// Runs call() on a fresh thread with its allocation fail_at failing (-1:
// none); observe(ctx, i), if given, runs at each allocation i.
Attempt RunOnFreshThread(long fail_at, const std::function<tfk_status()>& call,
                         void (*observe)(void*, long) = nullptr, void* ctx = nullptr) {
  Attempt a;
  std::thread t([&] {
    t_observe = observe, t_observe_ctx = ctx;
    t_fail_at = fail_at, t_count = 0, t_armed = true;
    a.status = call();
    t_armed = false;
    a.allocs = t_count;
    a.error = tfk_last_error();
  });
  t.join();
  return a;
}

// Fails each allocation of call() in turn and expects fn's out-of-memory
// error; after() then checks what the failure left, and reset() puts back
// what a call changes (it runs before each attempt, the clean one first).
void FailEachAllocation(const char* fn, const std::function<tfk_status()>& call,
                        const std::function<void()>& reset, const std::function<void()>& after) {
  reset();
  const Attempt clean = RunOnFreshThread(-1, call);
  ASSERT_EQ(clean.status, TFK_SUCCESS) << clean.error;
  EXPECT_GT(clean.allocs, 0) << fn << " allocated nothing on a fresh thread: nothing to fail";
  for (long k = 0; k < clean.allocs; ++k) {
    SCOPED_TRACE(testing::Message() << fn << ", allocation " << k << " of " << clean.allocs
                                    << " failed");
    reset();
    const Attempt a = RunOnFreshThread(k, call);
    EXPECT_EQ(a.status, TFK_OUT_OF_MEMORY) << a.error;
    EXPECT_EQ(a.error.rfind(std::string(fn) + ": ", 0), 0u) << a.error;
    EXPECT_EQ(a.allocs, k + 1) << "allocated again after a failed allocation";
    after();
  }
}

// A kernel call that fails at each allocation in turn, then, run again on a
// fresh thread, writes out's bits of a call on this thread.
void KernelFailsCleanly(const char* fn, const std::function<tfk_status()>& call,
                        std::vector<float>& out) {
  ASSERT_EQ(call(), TFK_SUCCESS) << tfk_last_error();
  const std::vector<float> want = out;
  FailEachAllocation(fn, call, [] {}, [] {});
  std::fill(out.begin(), out.end(), 0.0f);
  ASSERT_EQ(RunOnFreshThread(-1, call).status, TFK_SUCCESS);
  EXPECT_TRUE(SameBits(want.data(), out.data(), out.size())) << fn << ": a retry differs";
}

std::vector<float> Rand(size_t n, float scale, uint32_t seed) {
  std::vector<float> v(n);
  FillUniform(v.data(), n, -scale, scale, seed);
  return v;
}

// A small decoder block: d_model 32, 4 query heads on 2 KV heads of 8,
// RoPE, biases, a SwiGLU FFN of 64, pre-LN RMSNorm.
constexpr size_t kD = 32, kHeads = 4, kKvHeads = 2, kHeadDim = 8, kFf = 64;

struct Weights {
  std::vector<float> wq = Rand(kD * kD, 0.2f, 1), wk = Rand(kD * kD / 2, 0.2f, 2);
  std::vector<float> wv = Rand(kD * kD / 2, 0.2f, 3), wo = Rand(kD * kD, 0.2f, 4);
  std::vector<float> bq = Rand(kD, 0.1f, 5), bk = Rand(kD / 2, 0.1f, 6);
  std::vector<float> bv = Rand(kD / 2, 0.1f, 7), bo = Rand(kD, 0.1f, 8);
  std::vector<float> w1 = Rand(kD * kFf, 0.2f, 9), w3 = Rand(kD * kFf, 0.2f, 10);
  std::vector<float> w2 = Rand(kFf * kD, 0.2f, 11), g = Rand(kD, 1.0f, 12);
  tfk_block_config cfg{};
  Weights() {
    tfk_mha_config& a = cfg.attn;
    a.d_model = kD, a.n_heads = kHeads, a.n_kv_heads = kKvHeads, a.head_dim = kHeadDim;
    a.layout = TFK_LAYOUT_KN;
    a.wq = wq.data(), a.wk = wk.data(), a.wv = wv.data(), a.wo = wo.data();
    a.bq = bq.data(), a.bk = bk.data(), a.bv = bv.data(), a.bo = bo.data();
    a.causal = 1, a.rope = 1, a.rope_pairing = TFK_ROPE_HALF;
    tfk_ffn_config& f = cfg.ffn;
    f.d_model = kD, f.d_ff = kFf, f.act = TFK_ACT_SILU, f.gated = 1, f.layout = TFK_LAYOUT_KN;
    f.w1 = w1.data(), f.w3 = w3.data(), f.w2 = w2.data();
    cfg.norm = TFK_NORM_RMS, cfg.norm1_gamma = g.data(), cfg.norm2_gamma = g.data();
    cfg.eps = 1e-6f;
  }
};

class OomTest : public IsaTest {};

// A failed create returns the error and leaves *out alone (and, under the
// sanitizers, frees what it had allocated).
TEST_P(OomTest, CreatesReportEveryFailedAllocation) {
  const Weights w;
  tfk_linear* const kUntouched = reinterpret_cast<tfk_linear*>(alignof(tfk_linear*) * 3);
  const auto creates = [&](const char* fn, const std::function<tfk_status(void**)>& create,
                           const std::function<void(void*)>& destroy) {
    void* out = kUntouched;
    FailEachAllocation(
        fn,
        [&] {
          const tfk_status s = create(&out);
          if (s == TFK_SUCCESS) destroy(out), out = kUntouched;
          return s;
        },
        [] {}, [&] { EXPECT_EQ(out, static_cast<void*>(kUntouched)); });
  };
  creates(
      "tfk_linear_create",
      [&](void** out) {
        return tfk_linear_create(reinterpret_cast<tfk_linear**>(out), kD, kD, w.wq.data(), kD,
                                 TFK_LAYOUT_KN, w.bq.data(), TFK_ACT_NONE);
      },
      [](void* p) { tfk_linear_destroy(static_cast<tfk_linear*>(p)); });
  creates(
      "tfk_kv_cache_create",
      [&](void** out) {
        return tfk_kv_cache_create(reinterpret_cast<tfk_kv_cache**>(out), 16, kKvHeads, kHeadDim,
                                   TFK_DTYPE_BF16);
      },
      [](void* p) { tfk_kv_cache_destroy(static_cast<tfk_kv_cache*>(p)); });
  creates(
      "tfk_mha_create",
      [&](void** out) { return tfk_mha_create(reinterpret_cast<tfk_mha**>(out), &w.cfg.attn); },
      [](void* p) { tfk_mha_destroy(static_cast<tfk_mha*>(p)); });
  creates(
      "tfk_ffn_create",
      [&](void** out) { return tfk_ffn_create(reinterpret_cast<tfk_ffn**>(out), &w.cfg.ffn); },
      [](void* p) { tfk_ffn_destroy(static_cast<tfk_ffn*>(p)); });
  creates(
      "tfk_block_create",
      [&](void** out) { return tfk_block_create(reinterpret_cast<tfk_block**>(out), &w.cfg); },
      [](void* p) { tfk_block_destroy(static_cast<tfk_block*>(p)); });
}

// Kernels that take scratch memory: the packed and unpacked matmul (packed
// A at M = 64), attention split over keys (partial states) and prefill.
TEST_P(OomTest, KernelsReportEveryFailedAllocation) {
  WithThreads(1, [&] {
    const size_t M = 64, K = 700, N = 300;
    const auto A = Rand(M * K, 1.0f, 20), B = Rand(K * N, 1.0f, 21);
    std::vector<float> C(M * N);
    const tfk::linear lin(K, N, B.data());
    KernelFailsCleanly("tfk_linear_forward", [&] {
      return tfk_linear_forward(lin.get(), M, A.data(), K, C.data(), N, nullptr, 0);
    }, C);
    KernelFailsCleanly("tfk_matmul", [&] {
      return tfk_matmul(M, N, K, 1.0f, A.data(), K, B.data(), N, TFK_LAYOUT_KN, 0.0f, C.data(),
                        N);
    }, C);
    const size_t kv = 1500, heads = 4, dh = 64;
    const auto Q = Rand(64 * heads * dh, 1.0f, 22), KV = Rand(kv * heads * dh, 1.0f, 23);
    for (size_t q_len : {1, 64}) {
      SCOPED_TRACE(testing::Message() << "q_len " << q_len);
      std::vector<float> O(q_len * heads * dh);
      KernelFailsCleanly("tfk_attention", [&] {
        return tfk_attention(q_len, kv, heads, heads, dh, Q.data(), heads * dh, KV.data(),
                             heads * dh, KV.data(), heads * dh, O.data(), heads * dh, 0.0f,
                             TFK_MASK_CAUSAL);
      }, O);
    }
  });
}

// Caches of the batch's sequences: lengths 1 .. 300 (past 256 keys
// decoding splits the keys and merges partial states, which take memory).
std::vector<tfk_kv_cache*> MakeCaches(size_t n, tfk_dtype dtype) {
  std::vector<tfk_kv_cache*> caches(n);
  const auto kv = Rand(300 * kKvHeads * kHeadDim, 1.0f, 30);
  for (size_t i = 0; i < n; ++i) {
    tfk::check(tfk_kv_cache_create(&caches[i], 320, kKvHeads, kHeadDim, dtype));
    const size_t len = i == 0 ? 300 : 1 + (37 * i) % 280;
    tfk::check(tfk_kv_cache_append(caches[i], len, kv.data(), kD / 2, kv.data(), kD / 2));
  }
  return caches;
}

// The layers' forwards with KV caches: one sequence of 1 and of 3 tokens,
// and a batch of 5 sequences, through the MHA and the block. Allocations
// happen after the new tokens were appended (the test checks that some
// failures come there), so each failure must cut the caches back.
TEST_P(OomTest, ForwardsKeepTheCachesOnEveryFailedAllocation) {
  const Weights w;
  const tfk::block block(w.cfg);
  const tfk::mha mha(w.cfg.attn);
  for (tfk_dtype dtype : {TFK_DTYPE_F32, TFK_DTYPE_BF16}) {
    for (int kind = 0; kind < 6; ++kind) {
      const bool is_block = kind % 2 == 1, batch = kind >= 4;
      const size_t n = batch ? 5 : kind >= 2 ? 3 : 1;
      const char* fn = is_block ? (batch ? "tfk_block_forward_batch" : "tfk_block_forward")
                                : (batch ? "tfk_mha_forward_batch" : "tfk_mha_forward");
      SCOPED_TRACE(testing::Message() << fn << " n " << n << " dtype " << dtype);
      auto caches = MakeCaches(batch ? n : 1, dtype);
      const auto before = CacheLengths(caches);
      size_t bytes = 0;
      tfk::check(is_block ? tfk_block_workspace_size(block.get(), n, &bytes)
                          : tfk_mha_workspace_size(mha.get(), n, &bytes));
      std::vector<char> ws(bytes);
      const auto X = Rand(n * kD, 1.0f, 40), R = Rand(n * kD, 1.0f, 41);
      std::vector<float> Y(n * kD);
      const auto call = [&] {
        if (is_block) {
          return batch ? tfk_block_forward_batch(block.get(), n, X.data(), kD, Y.data(), kD,
                                                 caches.data(), ws.data(), bytes)
                       : tfk_block_forward(block.get(), n, X.data(), kD, Y.data(), kD,
                                           caches[0], ws.data(), bytes);
        }
        return batch ? tfk_mha_forward_batch(mha.get(), n, X.data(), kD, Y.data(), kD, R.data(),
                                             kD, caches.data(), ws.data(), bytes)
                     : tfk_mha_forward(mha.get(), n, X.data(), kD, Y.data(), kD, R.data(), kD,
                                       caches[0], ws.data(), bytes);
      };
      WithThreads(1, [&] {
        const auto restore = [&] {
          for (size_t i = 0; i < caches.size(); ++i) {
            tfk::check(tfk_kv_cache_truncate(caches[i], before[i]));
          }
        };
        // A clean call's result, and at which allocations the caches had
        // grown (recorded by an observer of the allocations).
        struct Seen {
          const std::vector<tfk_kv_cache*>* caches;
          const std::vector<size_t>* before;
          std::vector<bool> grown;
        } seen{&caches, &before, {}};
        const auto observe = [](void* ctx, long) {
          Seen& s = *static_cast<Seen*>(ctx);
          size_t len = 0;
          tfk_kv_cache_info((*s.caches)[0], &len, nullptr, nullptr);
          s.grown.push_back(len != (*s.before)[0]);
        };
        ASSERT_EQ(RunOnFreshThread(-1, call, observe, &seen).status, TFK_SUCCESS);
        const std::vector<float> want = Y;
        size_t after_append = 0;
        for (bool g : seen.grown) after_append += g ? 1 : 0;
        EXPECT_GT(after_append, 0u) << "no allocation after the append: the cut-back is untested";
        FailEachAllocation(fn, call, restore, [&] { EXPECT_EQ(CacheLengths(caches), before); });
        restore();
        std::fill(Y.begin(), Y.end(), 0.0f);
        ASSERT_EQ(RunOnFreshThread(-1, call).status, TFK_SUCCESS);
        EXPECT_TRUE(SameBits(want.data(), Y.data(), Y.size())) << "a retry differs";
        std::vector<size_t> grown = before;
        for (size_t& len : grown) ++len;
        if (!batch) grown[0] += n - 1;
        EXPECT_EQ(CacheLengths(caches), grown);
      });
      for (tfk_kv_cache* c : caches) tfk_kv_cache_destroy(c);
    }
  }
}

TFK_INSTANTIATE_FOR_EACH_ISA(OomTest);

}  // namespace
}  // namespace tfk_test
