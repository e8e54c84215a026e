// KV cache: storage, append (with bf16 rounding) and attention over it.
// Contract: include/tfk/tfk.h (tfk_kv_cache_*); design: docs/attention.md.
//
// Storage is per KV head, [n_kv_heads][capacity][head_dim], so one head's
// keys (and values) are one sequential stream for the decoding kernel, which
// reads them at memory bandwidth. Elements are float or bf16 (uint16_t).

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <new>

#include "lib/attention.h"
#include "lib/fpenv.h"
#include "lib/memory.h"
#include "lib/status.h"
#include "lib/threading.h"
#include "tfk/tfk.h"

struct tfk_kv_cache {
  size_t capacity, n_kv_heads, head_dim, length;
  bool bf16;
  void* k;
  void* v;
  size_t ElemBytes() const { return bf16 ? 2 : 4; }
  size_t ArrayBytes() const { return n_kv_heads * capacity * head_dim * ElemBytes(); }
};

namespace tfk {
namespace {

// Copies `tokens` rows of one of K or V into the cache at row `first`.
void AppendRows(tfk_kv_cache* c, void* dst, size_t first, size_t tokens, const float* src,
                size_t ld) {
  const size_t dh = c->head_dim;
  detail::ParallelFor(tokens * c->n_kv_heads, dh * 8, [&](size_t begin, size_t end) {
    for (size_t item = begin; item < end; ++item) {
      const size_t t = item / c->n_kv_heads, g = item % c->n_kv_heads;
      const float* s = src + t * ld + g * dh;
      const size_t row = g * c->capacity + first + t;
      if (c->bf16) {
        uint16_t* out = static_cast<uint16_t*>(dst) + row * dh;
        for (size_t i = 0; i < dh; ++i) out[i] = FloatToBf16(s[i]);
      } else {
        memcpy(static_cast<float*>(dst) + row * dh, s, dh * sizeof(float));
      }
    }
  });
}

}  // namespace

void KvCacheShape(const tfk_kv_cache* cache, size_t* n_kv_heads, size_t* head_dim) {
  *n_kv_heads = cache->n_kv_heads;
  *head_dim = cache->head_dim;
}
}  // namespace tfk

extern "C" {

TFK_API tfk_status tfk_kv_cache_create(tfk_kv_cache** out, size_t capacity, size_t n_kv_heads,
                                       size_t head_dim, tfk_dtype dtype) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_kv_cache_create";
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "out", out));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "capacity", capacity));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n_kv_heads", n_kv_heads));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "head_dim", head_dim));
  if (head_dim > tfk::kMaxHeadDim) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "head_dim (%zu) > %zu", head_dim, tfk::kMaxHeadDim);
  }
  if (RawEnum(dtype) != TFK_DTYPE_F32 && RawEnum(dtype) != TFK_DTYPE_BF16) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "dtype (%d) is not a tfk_dtype", RawEnum(dtype));
  }
  if (capacity > INT32_MAX || n_kv_heads > (SIZE_MAX / 8 / head_dim) / capacity) {
    return Fail(TFK_INVALID_ARGUMENT, fn,
                "capacity (%zu) x n_kv_heads (%zu) x head_dim (%zu) is too large", capacity,
                n_kv_heads, head_dim);
  }
  tfk_kv_cache* c = new (std::nothrow) tfk_kv_cache{};
  if (c == nullptr) return Fail(TFK_OUT_OF_MEMORY, fn, "no memory for the cache");
  c->capacity = capacity, c->n_kv_heads = n_kv_heads, c->head_dim = head_dim;
  c->bf16 = dtype == TFK_DTYPE_BF16;
  const size_t bytes = (c->ArrayBytes() + 63) / 64 * 64;
  c->k = AllocateLarge(bytes);
  if (c->k != nullptr) c->v = AllocateLarge(bytes);
  if (c->k == nullptr || c->v == nullptr) {
    tfk_kv_cache_destroy(c);
    return Fail(TFK_OUT_OF_MEMORY, fn, "cannot allocate 2 x %zu bytes", bytes);
  }
  *out = c;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_kv_cache_append(tfk_kv_cache* cache, size_t tokens, const float* K,
                                       size_t ldk, const float* V, size_t ldv) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_kv_cache_append";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "cache", cache));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "tokens", tokens));
  const size_t cols = cache->n_kv_heads * cache->head_dim;
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "K", K, tokens, cols, ldk));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "V", V, tokens, cols, ldv));
  if (tokens > cache->capacity - cache->length) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "length (%zu) + tokens (%zu) > capacity (%zu)",
                cache->length, tokens, cache->capacity);
  }
  tfk::AppendRows(cache, cache->k, cache->length, tokens, K, ldk);
  tfk::AppendRows(cache, cache->v, cache->length, tokens, V, ldv);
  cache->length += tokens;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_kv_cache_attention(const tfk_kv_cache* cache, size_t q_len,
                                          size_t n_heads, const float* Q, size_t ldq, float* O,
                                          size_t ldo, float scale, tfk_mask mask) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_kv_cache_attention";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "cache", cache));
  if (cache->length == 0) return Fail(TFK_INVALID_ARGUMENT, fn, "the cache is empty");
  TFK_RETURN_IF_ERROR(CheckSize(fn, "q_len", q_len));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n_heads", n_heads));
  if (n_heads % cache->n_kv_heads != 0) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n_heads (%zu) is not a multiple of n_kv_heads (%zu)",
                n_heads, cache->n_kv_heads);
  }
  if (q_len > INT32_MAX || n_heads > SIZE_MAX / 256 / cache->head_dim) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "q_len (%zu) or n_heads (%zu) is too large", q_len,
                n_heads);
  }
  const size_t cols = n_heads * cache->head_dim;
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "Q", Q, q_len, cols, ldq));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "O", O, q_len, cols, ldo));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "Q", Q, ldq, "O", O, ldo, q_len, cols));
  if (!isfinite(scale)) return Fail(TFK_INVALID_ARGUMENT, fn, "scale (%g) is not finite", scale);
  if (RawEnum(mask) != TFK_MASK_NONE && RawEnum(mask) != TFK_MASK_CAUSAL) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "mask (%d) is not a tfk_mask", RawEnum(mask));
  }
  tfk::AttentionArgs a{};
  a.q_len = q_len, a.kv_len = cache->length, a.n_heads = n_heads;
  a.n_kv_heads = cache->n_kv_heads, a.head_dim = cache->head_dim;
  a.scale = scale == 0.0f ? 1.0f / sqrtf(static_cast<float>(cache->head_dim)) : scale;
  a.causal = mask == TFK_MASK_CAUSAL;
  a.q = Q, a.ldq = ldq, a.o = O, a.ldo = ldo;
  a.k = cache->k, a.v = cache->v;
  a.ldk = a.ldv = cache->head_dim;
  a.k_head_stride = a.v_head_stride = cache->capacity * cache->head_dim;
  a.kv_bf16 = cache->bf16;
  if (!tfk::RunAttention(a)) return Fail(TFK_OUT_OF_MEMORY, fn, "scratch allocation failed");
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_kv_cache_truncate(tfk_kv_cache* cache, size_t length) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_kv_cache_truncate";
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "cache", cache));
  if (length > cache->length) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "length (%zu) > current length (%zu)", length,
                cache->length);
  }
  cache->length = length;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_kv_cache_info(const tfk_kv_cache* cache, size_t* length,
                                     size_t* capacity, size_t* bytes) {
  using namespace tfk::detail;  // NOLINT
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull("tfk_kv_cache_info", "cache", cache));
  if (length) *length = cache->length;
  if (capacity) *capacity = cache->capacity;
  if (bytes) *bytes = 2 * cache->ArrayBytes();
  return TFK_SUCCESS;
}

TFK_API void tfk_kv_cache_destroy(tfk_kv_cache* cache) {
  if (cache == nullptr) return;
  free(cache->k);
  free(cache->v);
  delete cache;
}

}  // extern "C"
