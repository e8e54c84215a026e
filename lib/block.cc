// Transformer block (attention + FFN with residuals and norms): contract in
// include/tfk/tfk.h (tfk_block_*); design in docs/attention.md.
//
// Workspace: T[n, d_model], the caches' lengths (n int64_t) and the larger
// of the MHA's and the FFN's.
//   pre-LN:  T = N1(X); Y = X + MHA(T); T = N2(Y); Y = Y + FFN(T)
//   post-LN: T = X + MHA(X); Y = N1(T); T = Y + FFN(Y); Y = N2(T)
// Every residual add is fused into a projection's store; Y may be X.

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <new>
#include <vector>

#include "lib/fpenv.h"
#include "lib/layer.h"
#include "lib/status.h"
#include "tfk/tfk.h"

struct tfk_block {
  size_t d_model;
  bool post_ln;
  tfk_norm_kind norm;
  float eps;
  // Norm parameters, copied; empty = NULL.
  std::vector<float> g1, b1, g2, b2;
  tfk_mha* mha = nullptr;
  tfk_ffn* ffn = nullptr;
};

using namespace tfk::detail;  // NOLINT

namespace {

const float* OrNull(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// Y = norm(X) with the block's kind and the given parameters.
tfk_status Norm(const tfk_block* b, size_t n, const float* x, size_t ldx, const float* gamma,
                const float* beta, float* y, size_t ldy) {
  return b->norm == TFK_NORM_LAYER
             ? tfk_layernorm(n, b->d_model, x, ldx, gamma, beta, b->eps, y, ldy)
             : tfk_rmsnorm(n, b->d_model, x, ldx, gamma, b->eps, y, ldy);
}

// The larger of the MHA's and the FFN's workspace for n tokens; false if n
// is too large for either.
bool InnerBytes(const tfk_block* b, size_t n, size_t* bytes) {
  size_t m = 0, f = 0;
  if (tfk_mha_workspace_size(b->mha, n, &m) != TFK_SUCCESS ||
      tfk_ffn_workspace_size(b->ffn, n, &f) != TFK_SUCCESS) {
    return false;
  }
  *bytes = m > f ? m : f;
  return true;
}

// tfk_block_forward's checks of n, X, Y and the workspace (block not null).
// *need: the workspace bytes used.
tfk_status CheckBlockForward(const char* fn, const tfk_block* block, size_t n, const float* X,
                             size_t ldx, const float* Y, size_t ldy, const void* workspace,
                             size_t workspace_bytes, size_t* need) {
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  if (tfk_block_workspace_size(block, n, need) != TFK_SUCCESS) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) is too large", n);
  }
  TFK_RETURN_IF_ERROR(CheckForward(fn, n, block->d_model, X, ldx, Y, ldy, nullptr, 0, workspace,
                                   workspace_bytes, *need));
  if (n > INT32_MAX) {  // tfk_attention's limit, checked before the norm writes
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) exceeds 2^31 - 1", n);
  }
  return TFK_SUCCESS;
}

// The block on checked arguments, in the first `need` bytes of workspace:
// the n tokens are one sequence (caches null; cache or none) or one token of
// each of n sequences (caches[i]).
tfk_status BlockForward(const char* fn, const tfk_block* block, size_t n, const float* X,
                        size_t ldx, float* Y, size_t ldy, tfk_kv_cache* cache,
                        tfk_kv_cache* const* caches, void* workspace, size_t need) {
  const size_t d = block->d_model;
  WorkspaceCarver carve(workspace);
  float* t = carve.Take(n * d);
  // The caches' lengths before the call (int64_t, 2 floats each), to cut
  // them back if a later step fails.
  int64_t* lengths = reinterpret_cast<int64_t*>(carve.Take(2 * n));
  const size_t count = caches != nullptr ? n : cache != nullptr ? 1 : 0;
  tfk_kv_cache* const* list = caches != nullptr ? caches : &cache;
  for (size_t i = 0; i < count; ++i) {
    size_t length = 0;
    tfk_kv_cache_info(list[i], &length, nullptr, nullptr);
    lengths[i] = static_cast<int64_t>(length);
  }
  void* inner = carve.Take(0);
  const size_t inner_bytes = need - WorkspaceBytes({n * d, 2 * n});  // InnerBytes(block, n)
  const auto mha = [&](const float* x, size_t ldx_, float* y, size_t ldy_, const float* r,
                       size_t ldr) {
    return caches != nullptr ? tfk_mha_forward_batch(block->mha, n, x, ldx_, y, ldy_, r, ldr,
                                                     caches, inner, inner_bytes)
                             : tfk_mha_forward(block->mha, n, x, ldx_, y, ldy_, r, ldr, cache,
                                               inner, inner_bytes);
  };
  const float *g1 = OrNull(block->g1), *b1 = OrNull(block->b1);
  const float *g2 = OrNull(block->g2), *b2 = OrNull(block->b2);
  tfk_status s;
  if (!block->post_ln) {
    s = Norm(block, n, X, ldx, g1, b1, t, d);
    if (s == TFK_SUCCESS) s = mha(t, d, Y, ldy, X, ldx);
    if (s == TFK_SUCCESS) s = Norm(block, n, Y, ldy, g2, b2, t, d);
    if (s == TFK_SUCCESS) {
      s = tfk_ffn_forward(block->ffn, n, t, d, Y, ldy, Y, ldy, inner, inner_bytes);
    }
  } else {
    s = mha(X, ldx, t, d, X, ldx);
    if (s == TFK_SUCCESS) s = Norm(block, n, t, d, g1, b1, Y, ldy);
    if (s == TFK_SUCCESS) {
      s = tfk_ffn_forward(block->ffn, n, Y, ldy, t, d, Y, ldy, inner, inner_bytes);
    }
    if (s == TFK_SUCCESS) s = Norm(block, n, t, d, g2, b2, Y, ldy);
  }
  // Out of memory after the attention appended: the caches keep their lengths.
  if (s != TFK_SUCCESS) return FailRestoringCaches(s, fn, list, lengths, count);
  return TFK_SUCCESS;
}

// A public forward (fn): checks everything, the cache or (batch) the
// batch's caches included, before anything is written, then runs.
tfk_status BlockCall(const char* fn, const tfk_block* block, size_t n, const float* X,
                     size_t ldx, float* Y, size_t ldy, tfk_kv_cache* cache, bool batch,
                     tfk_kv_cache* const* caches, void* workspace, size_t workspace_bytes) {
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "block", block));
  size_t need = 0;
  TFK_RETURN_IF_ERROR(
      CheckBlockForward(fn, block, n, X, ldx, Y, ldy, workspace, workspace_bytes, &need));
  size_t kv_heads = 0, head_dim = 0, len = 0;
  MhaCacheShape(block->mha, &kv_heads, &head_dim);
  if (batch) {
    TFK_RETURN_IF_ERROR(CheckBatchCaches(fn, caches, n, kv_heads, head_dim, Y, block->d_model,
                                         ldy, workspace, need));
  } else if (cache != nullptr) {
    TFK_RETURN_IF_ERROR(CheckCache(fn, cache, kv_heads, head_dim, n, &len));
  }
  return BlockForward(fn, block, n, X, ldx, Y, ldy, cache, caches, workspace, need);
}

}  // namespace

extern "C" {

TFK_API tfk_status tfk_block_create(tfk_block** out, const tfk_block_config* config) {
  const char* fn = "tfk_block_create";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "out", out));
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "config", config));
  const tfk_block_config& c = *config;
  if (c.ffn.d_model != c.attn.d_model) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "ffn.d_model (%zu) != attn.d_model (%zu)",
                c.ffn.d_model, c.attn.d_model);
  }
  if (c.post_ln != 0 && c.post_ln != 1) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "post_ln (%d) is not 0 or 1", c.post_ln);
  }
  if (RawEnum(c.norm) != TFK_NORM_LAYER && RawEnum(c.norm) != TFK_NORM_RMS) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "norm (%d) is not a tfk_norm_kind", RawEnum(c.norm));
  }
  if (!(c.eps >= 0.0f) || !isfinite(c.eps)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "eps (%g) is not finite and >= 0", c.eps);
  }
  tfk_block* b = new (std::nothrow) tfk_block{};
  if (b == nullptr) return Fail(TFK_OUT_OF_MEMORY, fn, "no memory for the handle");
  b->d_model = c.attn.d_model, b->post_ln = c.post_ln == 1, b->norm = c.norm, b->eps = c.eps;
  // The MHA and FFN creates validate d_model (and name it) before the norm
  // parameters, d_model floats each, are copied.
  tfk_status s = tfk_mha_create(&b->mha, &c.attn);
  if (s == TFK_SUCCESS) s = tfk_ffn_create(&b->ffn, &c.ffn);
  if (s != TFK_SUCCESS) {
    // The inner create named its argument ("tfk_mha_create: n_heads ...").
    const tfk_status st = FailFrom(s, fn);
    tfk_block_destroy(b);
    return st;
  }
  const size_t d = c.attn.d_model;
  s = CheckOptionalFloats(fn, "norm1_gamma", c.norm1_gamma, d);
  if (s == TFK_SUCCESS) s = CheckOptionalFloats(fn, "norm2_gamma", c.norm2_gamma, d);
  if (s == TFK_SUCCESS && c.norm == TFK_NORM_LAYER) {
    s = CheckOptionalFloats(fn, "norm1_beta", c.norm1_beta, d);
    if (s == TFK_SUCCESS) s = CheckOptionalFloats(fn, "norm2_beta", c.norm2_beta, d);
  }
  if (s != TFK_SUCCESS) {
    tfk_block_destroy(b);
    return s;
  }
  try {
    const auto copy = [&](const float* p, std::vector<float>& v) {
      if (p) v.assign(p, p + c.attn.d_model);
    };
    copy(c.norm1_gamma, b->g1);
    copy(c.norm2_gamma, b->g2);
    if (c.norm == TFK_NORM_LAYER) {
      copy(c.norm1_beta, b->b1);
      copy(c.norm2_beta, b->b2);
    }
  } catch (const std::bad_alloc&) {
    tfk_block_destroy(b);
    return Fail(TFK_OUT_OF_MEMORY, fn, "no memory for the norm parameters");
  }
  *out = b;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_block_workspace_size(const tfk_block* block, size_t n, size_t* bytes) {
  const char* fn = "tfk_block_workspace_size";
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "block", block));
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "bytes", bytes));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  size_t inner = 0;
  // Each part stays below SIZE_MAX / 4 (as the MHA's and the FFN's own), so
  // their sum does not wrap.
  if (n > (SIZE_MAX / 16) / block->d_model || !InnerBytes(block, n, &inner)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) is too large", n);
  }
  *bytes = WorkspaceBytes({n * block->d_model, 2 * n}) + inner;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_block_forward(const tfk_block* block, size_t n, const float* X,
                                     size_t ldx, float* Y, size_t ldy, tfk_kv_cache* cache,
                                     void* workspace, size_t workspace_bytes) {
  return BlockCall("tfk_block_forward", block, n, X, ldx, Y, ldy, cache, false, nullptr,
                   workspace, workspace_bytes);
}

TFK_API tfk_status tfk_block_forward_batch(const tfk_block* block, size_t n, const float* X,
                                           size_t ldx, float* Y, size_t ldy,
                                           tfk_kv_cache* const* caches, void* workspace,
                                           size_t workspace_bytes) {
  return BlockCall("tfk_block_forward_batch", block, n, X, ldx, Y, ldy, nullptr, true, caches,
                   workspace, workspace_bytes);
}

TFK_API void tfk_block_destroy(tfk_block* block) {
  if (block == nullptr) return;
  tfk_mha_destroy(block->mha);
  tfk_ffn_destroy(block->ffn);
  delete block;
}

}  // extern "C"
