// The caller's floating-point environment does not reach tfk's results: a
// host that flushes subnormals (FTZ/DAZ, as TensorFlow's threads and
// torch.set_flush_denormal do), rounds another way, or unmasks exceptions
// (feenableexcept while debugging) gets the same bits as one in the default
// environment, on every thread count, and its own environment back (the
// status flags it had raised included). A host's arena is covered too: TBB
// runs everything inside an arena (the delegate of execute, the tasks on its
// workers) in the environment of the thread that created it.
#include <fenv.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "oneapi/tbb/task_arena.h"
#include "test_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define TFK_TEST_X86 1
#else
#define TFK_TEST_X86 0
#endif

namespace tfk_test {
namespace {

// An environment a host may run in (ScopedMode sets it).
struct FpMode {
  const char* name;
  int round;     // FE_* rounding mode
  bool flush;    // x86: FTZ and DAZ
  int unmasked;  // FE_* exceptions that trap (glibc's feenableexcept)
};

constexpr FpMode kTraps = {"traps", FE_TONEAREST, false,
                           FE_INVALID | FE_DIVBYZERO | FE_OVERFLOW | FE_UNDERFLOW};
const FpMode kModes[] = {
    {"flush", FE_TONEAREST, true, 0},
    {"toward_zero", FE_TOWARDZERO, false, 0},
    {"upward", FE_UPWARD, false, 0},
    {"downward_flush", FE_DOWNWARD, true, 0},
    kTraps,
};

#if TFK_TEST_X86
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)
// MXCSR without its status flags (bits 0-5), which calls may raise.
unsigned ControlBits() { return _mm_getcsr() & ~0x3Fu; }
#endif

// Sets the calling thread's environment; the destructor restores the
// default one.
class ScopedMode {
 public:
  explicit ScopedMode(const FpMode& m) {
    fesetround(m.round);
#if TFK_TEST_X86
    if (m.flush) _mm_setcsr(_mm_getcsr() | kFtzDaz);
#endif
#ifdef __GLIBC__
    if (m.unmasked != 0) feenableexcept(m.unmasked);
#endif
  }
  ~ScopedMode() {
#ifdef __GLIBC__
    fedisableexcept(FE_ALL_EXCEPT);
#endif
#if TFK_TEST_X86
    _mm_setcsr(_mm_getcsr() & ~kFtzDaz);
#endif
    fesetround(FE_TONEAREST);
    feclearexcept(FE_ALL_EXCEPT);
  }
};

// Each kernel's output, by name.
using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;

// The names of the outputs whose bits differ ("" if none).
std::string Differing(const Outputs& got, const Outputs& want) {
  std::string names;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<float>& a = got[i].second;
    const std::vector<float>& b = want[i].second;
    if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
      names += want[i].first + " ";
    }
  }
  return names;
}

// Inputs whose results depend on the environment: subnormal inputs and
// results, values a rounding direction moves, and the special values that
// raise exceptions inside the kernels (a -inf score, NaN, overflow).
// Made in the default environment (the scaled copies would round otherwise
// under the caller's).
struct Case {
  size_t rows, cols;
  std::vector<float> x;
  std::vector<float> tiny;  // x * 1e-38: rows of subnormals
  std::vector<float> b;     // [kMatmulN, kMatmulN] weights for the matmul
  std::vector<float> w;     // weights of the block, any of them
};

// The matmul reads [rows, kMatmulN] of x (the subnormals' FMAs are slow).
constexpr size_t kMatmulN = 128;
// The block: d_model 64, 4 query and 2 KV heads of 16, a gated FFN of 128.
constexpr size_t kModel = 64, kFf = 128;

Case MakeCase(size_t rows, size_t cols, uint32_t seed) {
  Case c;
  c.rows = rows;
  c.cols = cols;
  c.x.resize(rows * cols);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (size_t i = 0; i < c.x.size(); ++i) {
    switch (i % 11) {
      case 0: c.x[i] = u(rng) * 1e-39f; break;                    // subnormal
      case 1: c.x[i] = -13.0f - std::fabs(u(rng)) * 0.3f; break;  // GELU's result subnormal
      case 2: c.x[i] = u(rng) - 95.0f; break;                     // exp(x - max) subnormal
      default: c.x[i] = u(rng); break;
    }
  }
  c.tiny.resize(c.x.size());
  for (size_t i = 0; i < c.x.size(); ++i) c.tiny[i] = c.x[i] * 1e-38f;
  c.b.resize(kMatmulN * kMatmulN);
  for (size_t i = 0; i < c.b.size(); ++i) c.b[i] = c.x[(i * 7) % c.x.size()] * 0.25f;
  c.w.resize(kModel * kFf + 64);  // w3 starts 3 floats in
  for (size_t i = 0; i < c.w.size(); ++i) c.w[i] = c.x[(i * 13) % c.x.size()] * 0.125f;
  return c;
}

// A pre-LN block with RoPE, GQA and SwiGLU, created here: a prefill of
// rows - 1 tokens into a bf16 KV cache, then one decoding step.
void RunBlock(const Case& c, Outputs* out) {
  const float* w = c.w.data();
  tfk_block_config cfg = {};
  cfg.attn.d_model = kModel;
  cfg.attn.n_heads = 4;
  cfg.attn.n_kv_heads = 2;
  cfg.attn.layout = TFK_LAYOUT_NK;
  cfg.attn.wq = cfg.attn.wo = w;
  cfg.attn.wk = w + 64;
  cfg.attn.wv = w + 128;
  cfg.attn.bq = w + 7;
  cfg.attn.causal = 1;
  cfg.attn.rope = 1;
  cfg.attn.rope_pairing = TFK_ROPE_HALF;
  cfg.ffn.d_model = kModel;
  cfg.ffn.d_ff = kFf;
  cfg.ffn.act = TFK_ACT_SILU;
  cfg.ffn.gated = 1;
  cfg.ffn.layout = TFK_LAYOUT_NK;
  cfg.ffn.w1 = cfg.ffn.w2 = w;
  cfg.ffn.w3 = w + 3;
  cfg.norm = TFK_NORM_RMS;
  cfg.norm1_gamma = w + 11;
  cfg.eps = 1e-5f;
  tfk_block* block = nullptr;
  tfk_kv_cache* cache = nullptr;
  ASSERT_EQ(tfk_block_create(&block, &cfg), TFK_SUCCESS) << tfk_last_error();
  ASSERT_EQ(tfk_kv_cache_create(&cache, c.rows, 2, kModel / 4, TFK_DTYPE_BF16), TFK_SUCCESS);
  size_t bytes = 0;
  ASSERT_EQ(tfk_block_workspace_size(block, c.rows, &bytes), TFK_SUCCESS);
  std::vector<unsigned char> ws(bytes);
  std::vector<float> y(c.rows * kModel);
  EXPECT_EQ(tfk_block_forward(block, c.rows - 1, c.x.data(), c.cols, y.data(), kModel, cache,
                              ws.data(), bytes),
            TFK_SUCCESS);
  EXPECT_EQ(tfk_block_forward(block, 1, c.x.data() + (c.rows - 1) * c.cols, c.cols,
                              y.data() + (c.rows - 1) * kModel, kModel, cache, ws.data(), bytes),
            TFK_SUCCESS);
  out->emplace_back("block with a bf16 cache", y);
  tfk_kv_cache_destroy(cache);
  tfk_block_destroy(block);
}

// One run of every kernel on the same inputs.
Outputs RunAll(const Case& c) {
  Outputs out;
  const size_t n = c.rows * c.cols;
  std::vector<float> y(n);
  auto keep = [&](const char* name) { out.emplace_back(name, y); };

  EXPECT_EQ(tfk_softmax(c.rows, c.cols, c.x.data(), c.cols, y.data(), c.cols, 1.0f,
                        TFK_MASK_CAUSAL, c.rows),
            TFK_SUCCESS);
  keep("softmax causal");
  // A row with a -inf score and one with a NaN: inf - inf and NaN compares.
  std::vector<float> special(c.x);
  special[1] = -std::numeric_limits<float>::infinity();
  special[c.cols + 2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(tfk_softmax(c.rows, c.cols, special.data(), c.cols, y.data(), c.cols, 1.0f,
                        TFK_MASK_NONE, 0),
            TFK_SUCCESS);
  keep("softmax -inf NaN");
  for (tfk_activation act : {TFK_ACT_RELU, TFK_ACT_GELU_ERF, TFK_ACT_GELU_TANH, TFK_ACT_SILU}) {
    EXPECT_EQ(tfk_activate(act, c.rows, c.cols, special.data(), c.cols, y.data(), c.cols),
              TFK_SUCCESS);
    keep(act == TFK_ACT_RELU        ? "relu"
         : act == TFK_ACT_GELU_ERF  ? "gelu_erf"
         : act == TFK_ACT_GELU_TANH ? "gelu_tanh"
                                    : "silu");
  }
  // Rows of subnormals: LayerNorm's tiny-statistic path.
  EXPECT_EQ(tfk_layernorm(c.rows, c.cols, c.tiny.data(), c.cols, nullptr, nullptr, 0.0f, y.data(),
                          c.cols),
            TFK_SUCCESS);
  keep("layernorm subnormal");
  EXPECT_EQ(tfk_layernorm(c.rows, c.cols, c.x.data(), c.cols, nullptr, nullptr, 1e-5f, y.data(),
                          c.cols),
            TFK_SUCCESS);
  keep("layernorm");
  EXPECT_EQ(tfk_rmsnorm(c.rows, c.cols, c.x.data(), c.cols, nullptr, 1e-5f, y.data(), c.cols),
            TFK_SUCCESS);
  keep("rmsnorm");
  EXPECT_EQ(tfk_add(c.rows, c.cols, c.x.data(), c.cols, c.tiny.data(), c.cols, y.data(), c.cols),
            TFK_SUCCESS);
  keep("add");
  y = c.x;
  EXPECT_EQ(tfk_rope(c.rows, 1, c.cols, c.cols, TFK_ROPE_HALF, 10000.0, y.data(), c.cols, 12345,
                     nullptr),
            TFK_SUCCESS);
  keep("rope");
  // Products subnormal where A holds its 1e-39s.
  std::vector<float> mm(c.rows * kMatmulN);
  EXPECT_EQ(tfk_matmul(c.rows, kMatmulN, kMatmulN, 1.0f, c.x.data(), c.cols, c.b.data(),
                       kMatmulN, TFK_LAYOUT_KN, 0.0f, mm.data(), kMatmulN),
            TFK_SUCCESS);
  out.emplace_back("matmul", mm);
  // Attention over the rows as q_len = kv_len tokens of one head.
  const size_t d = 32;
  std::vector<float> o(c.rows * d);
  EXPECT_EQ(tfk_attention(c.rows, c.rows, 1, 1, d, c.x.data(), c.cols, c.x.data() + 1, c.cols,
                          c.x.data() + 2, c.cols, o.data(), d, 0.0f, TFK_MASK_CAUSAL),
            TFK_SUCCESS);
  out.emplace_back("attention", o);
  RunBlock(c, &out);
  return out;
}

class FpEnvTest : public IsaTest {
 protected:
  void TearDown() override {
    tfk_set_num_threads(0);
    IsaTest::TearDown();
  }
};

// 96 x 1024 floats: past the per-task minimum (lib/threading.h), so two
// threads split every call.
TEST_P(FpEnvTest, CallerEnvironmentDoesNotChangeResults) {
  const Case c = MakeCase(96, 1024, 5);
  // The process's implicit arena is made here, in the default environment:
  // below, calls split into tasks run them in an arena whose environment
  // differs from the caller's.
  tfk_set_num_threads(2);
  RunAll(c);
  tfk_set_num_threads(1);
  const Outputs want = RunAll(c);
  for (const FpMode& m : kModes) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(testing::Message() << m.name << ", threads " << threads);
      tfk_set_num_threads(threads);
      Outputs got;
      bool same_env = true;
      {
        ScopedMode mode(m);
        const int round = fegetround();
#if TFK_TEST_X86
        const unsigned control = ControlBits();
#endif
        got = RunAll(c);
        same_env = fegetround() == round;
#if TFK_TEST_X86
        same_env = same_env && ControlBits() == control;
#endif
      }
      EXPECT_TRUE(same_env) << "the caller's environment was not restored";
      EXPECT_EQ(Differing(got, want), "");
    }
  }
}

// A flag the caller had raised is still raised after a call split into
// tasks (which raise no flags of their own here: ReLU of finite values),
// also where the caller's environment differs from the arena's. TBB, left
// to switch the caller to the arena's environment while it waited, wrote
// the caller's back with the flags cleared.
TEST_P(FpEnvTest, CallerFlagsSurviveASplitCall) {
  std::vector<float> x(96 * 1024), y(x.size());
  FillUniform(x.data(), x.size(), -4.0f, 4.0f, 7);
  tfk_set_num_threads(2);
  ASSERT_EQ(tfk_activate(TFK_ACT_RELU, 96, 1024, x.data(), 1024, y.data(), 1024), TFK_SUCCESS);
  for (const FpMode& m : kModes) {
    if (m.unmasked != 0) continue;  // raising the flag would trap
    SCOPED_TRACE(m.name);
    bool kept = false;
    {
      ScopedMode mode(m);
      feraiseexcept(FE_DIVBYZERO);
      ASSERT_EQ(tfk_activate(TFK_ACT_RELU, 96, 1024, x.data(), 1024, y.data(), 1024),
                TFK_SUCCESS);
      kept = fetestexcept(FE_DIVBYZERO) != 0;
    }
    EXPECT_TRUE(kept);
  }
}

#if TFK_TEST_X86
// A host arena created in another environment: TBB runs everything in it in
// that environment (the delegate of execute as well as the tasks on its
// workers) unless tfk sets its own.
TEST_P(FpEnvTest, ArenaCreatedInAnotherEnvironment) {
  const Case c = MakeCase(96, 1024, 6);
  tfk_set_num_threads(1);
  const Outputs want = RunAll(c);
  for (const FpMode& m : kModes) {
    SCOPED_TRACE(m.name);
    oneapi::tbb::task_arena arena(2);
    {
      ScopedMode mode(m);
      arena.initialize();
    }
    tfk_set_num_threads(2);
    for (int rep = 0; rep < 3; ++rep) {
      Outputs got;
      arena.execute([&] { got = RunAll(c); });
      EXPECT_EQ(Differing(got, want), "") << "rep " << rep;
    }
  }
}
#endif

// Where the caller traps invalid operations, the checks of NaN arguments
// (ordered compares, which raise invalid on a NaN) still refuse with a
// status.
TEST(FpEnv, NonFiniteArgumentsRefusedWhereExceptionsTrap) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(64, 1.0f), y(64, 2.0f);
  ScopedMode mode(kTraps);
  EXPECT_EQ(tfk_softmax(1, 8, x.data(), 8, y.data(), 8, nan, TFK_MASK_NONE, 0),
            TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_layernorm(1, 8, x.data(), 8, nullptr, nullptr, nan, y.data(), 8),
            TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_rmsnorm(1, 8, x.data(), 8, nullptr, nan, y.data(), 8), TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_rope(1, 1, 8, 8, TFK_ROPE_HALF, std::nan(""), y.data(), 8, 0, nullptr),
            TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_attention(1, 1, 1, 1, 8, x.data(), 8, x.data(), 8, x.data(), 8, y.data(), 8, nan,
                          TFK_MASK_NONE),
            TFK_INVALID_ARGUMENT);
  EXPECT_EQ(tfk_matmul(1, 8, 8, nan, x.data(), 8, x.data(), 8, TFK_LAYOUT_KN, 0.0f, y.data(), 8),
            TFK_INVALID_ARGUMENT);
  tfk_mha_config cfg = {};
  cfg.d_model = 8;
  cfg.n_heads = cfg.n_kv_heads = 1;
  cfg.wq = cfg.wk = cfg.wv = cfg.wo = x.data();
  cfg.scale = nan;
  tfk_mha* mha = nullptr;
  EXPECT_EQ(tfk_mha_create(&mha, &cfg), TFK_INVALID_ARGUMENT);
  cfg.scale = 0.0f;
  cfg.rope = 1;
  cfg.rope_base = std::nan("");
  EXPECT_EQ(tfk_mha_create(&mha, &cfg), TFK_INVALID_ARGUMENT);
  EXPECT_EQ(mha, nullptr);
  for (float v : y) ASSERT_EQ(v, 2.0f) << "written";
}

TFK_INSTANTIATE_FOR_EACH_ISA(FpEnvTest);

}  // namespace
}  // namespace tfk_test
