// Multi-head attention layer: contract in include/tfk/tfk.h (tfk_mha_*);
// design in docs/attention.md.
//
// forward = four kernel calls on the caller's workspace, no allocation:
//   1. QKV[n, (h + 2 h_kv) d_k] = X [Wq | Wk | Wv] + [bq | bk | bv]: one
//      packed projection, so X is read once and the three products share
//      its tiles; Q, K and V are column ranges of QKV (ld = its width);
//   2. RoPE in place on the Q and K ranges;
//   3. attention (tfk_attention, or append to the KV cache and attend to it)
//      writing O[n, h d_k], the heads side by side ("concat");
//   4. Y = R + O Wo + bo, the residual fused into the projection's store.

#include <math.h>
#include <stdint.h>

#include <new>

#include "lib/attention.h"
#include "lib/fpenv.h"
#include "lib/layer.h"
#include "lib/status.h"
#include "tfk/tfk.h"

struct tfk_mha {
  tfk_mha_config cfg;  // weight pointers cleared; head_dim, rope and scale resolved
  size_t q_cols, kv_cols, qkv_cols;
  tfk_linear* qkv = nullptr;
  tfk_linear* out = nullptr;
};

namespace {

using namespace tfk::detail;  // NOLINT

tfk_status Validate(const char* fn, tfk_mha_config& c) {
  TFK_RETURN_IF_ERROR(CheckSize(fn, "d_model", c.d_model));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n_heads", c.n_heads));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n_kv_heads", c.n_kv_heads));
  const bool derived = c.head_dim == 0;
  if (derived) {
    if (c.d_model % c.n_heads != 0) {
      return Fail(TFK_INVALID_ARGUMENT, fn,
                  "head_dim is 0 and d_model (%zu) is not a multiple of n_heads (%zu)",
                  c.d_model, c.n_heads);
    }
    c.head_dim = c.d_model / c.n_heads;
  }
  if (c.head_dim > tfk::kMaxHeadDim) {
    // A head_dim left 0 is named by what it came from.
    return Fail(TFK_INVALID_ARGUMENT, fn, "head_dim (%zu%s) > %zu", c.head_dim,
                derived ? " = d_model / n_heads" : "", tfk::kMaxHeadDim);
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n_heads (%zu) is not a multiple of n_kv_heads (%zu)",
                c.n_heads, c.n_kv_heads);
  }
  if (c.d_model > (size_t{1} << 24) || c.n_heads > (size_t{1} << 16)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "d_model (%zu) or n_heads (%zu) is too large",
                c.d_model, c.n_heads);
  }
  TFK_RETURN_IF_ERROR(CheckLayout(fn, c.layout));
  // The weights and biases are read as floats (copied side by side before
  // they are packed): non-null, 4-byte aligned, their extent addressable.
  const size_t q_cols = c.n_heads * c.head_dim, kv_cols = c.n_kv_heads * c.head_dim;
  TFK_RETURN_IF_ERROR(CheckFloats(fn, "wq", c.wq, c.d_model * q_cols));
  TFK_RETURN_IF_ERROR(CheckFloats(fn, "wk", c.wk, c.d_model * kv_cols));
  TFK_RETURN_IF_ERROR(CheckFloats(fn, "wv", c.wv, c.d_model * kv_cols));
  TFK_RETURN_IF_ERROR(CheckFloats(fn, "wo", c.wo, q_cols * c.d_model));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "bq", c.bq, q_cols));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "bk", c.bk, kv_cols));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "bv", c.bv, kv_cols));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "bo", c.bo, c.d_model));
  if (c.causal != 0 && c.causal != 1) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "causal (%d) is not 0 or 1", c.causal);
  }
  if (c.rope != 0 && c.rope != 1) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "rope (%d) is not 0 or 1", c.rope);
  }
  if (c.rope) {
    const int pairing = RawEnum(c.rope_pairing);
    if (pairing != TFK_ROPE_INTERLEAVED && pairing != TFK_ROPE_HALF) {
      return Fail(TFK_INVALID_ARGUMENT, fn, "rope_pairing (%d) is not a tfk_rope_pairing",
                  pairing);
    }
    if (c.rope_dim == 0) c.rope_dim = c.head_dim;
    if (c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim) {
      return Fail(TFK_INVALID_ARGUMENT, fn, "rope_dim (%zu) is odd or > head_dim (%zu)",
                  c.rope_dim, c.head_dim);
    }
    if (c.rope_base == 0) c.rope_base = 10000.0;
    if (!(c.rope_base > 1.0) || !isfinite(c.rope_base)) {
      return Fail(TFK_INVALID_ARGUMENT, fn, "rope_base (%g) is not a finite number > 1",
                  c.rope_base);
    }
  }
  if (!isfinite(c.scale)) return Fail(TFK_INVALID_ARGUMENT, fn, "scale (%g) is not finite", c.scale);
  return TFK_SUCCESS;
}

}  // namespace

namespace tfk {
namespace detail {
void MhaCacheShape(const tfk_mha* mha, size_t* n_kv_heads, size_t* head_dim) {
  *n_kv_heads = mha->cfg.n_kv_heads;
  *head_dim = mha->cfg.head_dim;
}

}  // namespace detail
}  // namespace tfk

namespace {

// A forward's checks of n, X, Y, R and the workspace (mha not null).
tfk_status CheckMhaForward(const char* fn, const tfk_mha* mha, size_t n, const float* X,
                           size_t ldx, const float* Y, size_t ldy, const float* R, size_t ldr,
                           const void* workspace, size_t workspace_bytes) {
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  size_t need = 0;
  if (tfk_mha_workspace_size(mha, n, &need) != TFK_SUCCESS) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) is too large", n);
  }
  TFK_RETURN_IF_ERROR(CheckForward(fn, n, mha->cfg.d_model, X, ldx, Y, ldy, R, ldr, workspace,
                                   workspace_bytes, need));
  if (n > INT32_MAX) {  // tfk_attention's limit, checked before anything is written
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) exceeds 2^31 - 1", n);
  }
  return TFK_SUCCESS;
}

// The forward on checked arguments, in tfk_mha_workspace_size(n) bytes of
// workspace: the n tokens are one sequence (caches null; cache, at length
// p0, or none) or one token of each of n sequences (caches[i]). Fails (as
// fn) only for memory, with every cache cut back to its length.
tfk_status MhaForward(const char* fn, const tfk_mha* mha, size_t n, const float* X, size_t ldx,
                      float* Y, size_t ldy, const float* R, size_t ldr, tfk_kv_cache* cache,
                      size_t p0, tfk_kv_cache* const* caches, void* workspace) {
  const tfk_mha_config& c = mha->cfg;
  WorkspaceCarver ws(workspace);
  float* qkv = ws.Take(n * mha->qkv_cols);
  float* o = ws.Take(n * mha->q_cols);
  // A batch's positions: each cache's length before the call (int64_t, 2
  // floats each), for RoPE and to cut the caches back on failure.
  int64_t* pos = reinterpret_cast<int64_t*>(ws.Take(2 * n));
  if (caches != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      size_t length = 0;
      tfk_kv_cache_info(caches[i], &length, nullptr, nullptr);
      pos[i] = static_cast<int64_t>(length);
    }
  }
  const size_t ld = mha->qkv_cols;
  float* q = qkv;
  float* k = qkv + mha->q_cols;
  float* v = k + mha->kv_cols;
  const tfk_mask mask = c.causal ? TFK_MASK_CAUSAL : TFK_MASK_NONE;
  // Kernel calls on validated arguments; they can fail only for memory (or,
  // for the cache, if it does not match: checked first by its own call).
  tfk_status s = tfk_linear_forward(mha->qkv, n, X, ldx, qkv, ld, nullptr, 0);
  if (s == TFK_SUCCESS && c.rope) {
    const int64_t start = static_cast<int64_t>(p0);
    const int64_t* positions = caches != nullptr ? pos : nullptr;
    s = tfk_rope(n, c.n_heads, c.head_dim, c.rope_dim, c.rope_pairing, c.rope_base, q, ld, start,
                 positions);
    if (s == TFK_SUCCESS) {
      s = tfk_rope(n, c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_pairing, c.rope_base, k, ld,
                   start, positions);
    }
  }
  if (s == TFK_SUCCESS) {
    if (caches != nullptr) {
      // Token i is the next of sequence i: appended to its cache, it attends
      // to that cache alone. Each attention call spreads its heads (and, for
      // long caches, its keys) over the threads.
      for (size_t i = 0; i < n && s == TFK_SUCCESS; ++i) {
        s = tfk_kv_cache_append(caches[i], 1, k + i * ld, ld, v + i * ld, ld);
      }
      for (size_t i = 0; i < n && s == TFK_SUCCESS; ++i) {
        s = tfk_kv_cache_attention(caches[i], 1, c.n_heads, q + i * ld, ld, o + i * mha->q_cols,
                                   mha->q_cols, c.scale, mask);
      }
    } else if (cache != nullptr) {
      s = tfk_kv_cache_append(cache, n, k, ld, v, ld);
      if (s == TFK_SUCCESS) {
        s = tfk_kv_cache_attention(cache, n, c.n_heads, q, ld, o, mha->q_cols, c.scale, mask);
      }
    } else {
      s = tfk_attention(n, n, c.n_heads, c.n_kv_heads, c.head_dim, q, ld, k, ld, v, ld, o,
                        mha->q_cols, c.scale, mask);
    }
  }
  if (s == TFK_SUCCESS) s = tfk_linear_forward(mha->out, n, o, mha->q_cols, Y, ldy, R, ldr);
  // Out of memory after an append: the caches keep their lengths.
  if (s != TFK_SUCCESS) {
    return caches != nullptr ? FailRestoringCaches(s, fn, caches, pos, n)
                             : FailRestoringCache(s, fn, cache, p0);
  }
  return TFK_SUCCESS;
}

// A public forward (fn): checks everything, the cache or (batch) the
// batch's caches included, before anything is written, then runs.
tfk_status MhaCall(const char* fn, const tfk_mha* mha, size_t n, const float* X, size_t ldx,
                   float* Y, size_t ldy, const float* R, size_t ldr, tfk_kv_cache* cache,
                   bool batch, tfk_kv_cache* const* caches, void* workspace,
                   size_t workspace_bytes) {
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "mha", mha));
  TFK_RETURN_IF_ERROR(CheckMhaForward(fn, mha, n, X, ldx, Y, ldy, R, ldr, workspace,
                                      workspace_bytes));
  const size_t kv_heads = mha->cfg.n_kv_heads, head_dim = mha->cfg.head_dim;
  size_t p0 = 0;
  if (batch) {
    size_t need = 0;
    tfk_mha_workspace_size(mha, n, &need);  // checked by CheckMhaForward
    TFK_RETURN_IF_ERROR(CheckBatchCaches(fn, caches, n, kv_heads, head_dim, Y, mha->cfg.d_model,
                                         ldy, workspace, need));
  } else if (cache != nullptr) {
    TFK_RETURN_IF_ERROR(CheckCache(fn, cache, kv_heads, head_dim, n, &p0));
  }
  return MhaForward(fn, mha, n, X, ldx, Y, ldy, R, ldr, cache, p0, caches, workspace);
}

}  // namespace

extern "C" {

TFK_API tfk_status tfk_mha_create(tfk_mha** out, const tfk_mha_config* config) {
  const char* fn = "tfk_mha_create";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "out", out));
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "config", config));
  tfk_mha_config c = *config;
  TFK_RETURN_IF_ERROR(Validate(fn, c));
  tfk_mha* m = new (std::nothrow) tfk_mha{};
  if (m == nullptr) return Fail(TFK_OUT_OF_MEMORY, fn, "no memory for the handle");
  m->q_cols = c.n_heads * c.head_dim;
  m->kv_cols = c.n_kv_heads * c.head_dim;
  m->qkv_cols = m->q_cols + 2 * m->kv_cols;
  tfk_status s = CreateFusedLinear(fn, c.layout, c.d_model,
                                   {{c.wq, c.bq, m->q_cols}, {c.wk, c.bk, m->kv_cols},
                                    {c.wv, c.bv, m->kv_cols}},
                                   TFK_ACT_NONE, &m->qkv);
  if (s == TFK_SUCCESS) {
    s = CreateFusedLinear(fn, c.layout, m->q_cols, {{c.wo, c.bo, c.d_model}}, TFK_ACT_NONE,
                          &m->out);
  }
  if (s != TFK_SUCCESS) {
    tfk_mha_destroy(m);
    return s;
  }
  c.wq = c.wk = c.wv = c.wo = c.bq = c.bk = c.bv = c.bo = nullptr;  // not kept
  m->cfg = c;
  *out = m;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_mha_workspace_size(const tfk_mha* mha, size_t n, size_t* bytes) {
  const char* fn = "tfk_mha_workspace_size";
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "mha", mha));
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "bytes", bytes));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  if (n > (SIZE_MAX / 16) / (mha->qkv_cols + mha->q_cols)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) is too large", n);
  }
  *bytes = WorkspaceBytes({n * mha->qkv_cols, n * mha->q_cols, 2 * n});
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_mha_forward(const tfk_mha* mha, size_t n, const float* X, size_t ldx,
                                   float* Y, size_t ldy, const float* R, size_t ldr,
                                   tfk_kv_cache* cache, void* workspace, size_t workspace_bytes) {
  return MhaCall("tfk_mha_forward", mha, n, X, ldx, Y, ldy, R, ldr, cache, false, nullptr,
                 workspace, workspace_bytes);
}

TFK_API tfk_status tfk_mha_forward_batch(const tfk_mha* mha, size_t n, const float* X, size_t ldx,
                                         float* Y, size_t ldy, const float* R, size_t ldr,
                                         tfk_kv_cache* const* caches, void* workspace,
                                         size_t workspace_bytes) {
  return MhaCall("tfk_mha_forward_batch", mha, n, X, ldx, Y, ldy, R, ldr, nullptr, true, caches,
                 workspace, workspace_bytes);
}

TFK_API void tfk_mha_destroy(tfk_mha* mha) {
  if (mha == nullptr) return;
  tfk_linear_destroy(mha->qkv);
  tfk_linear_destroy(mha->out);
  delete mha;
}

}  // extern "C"
