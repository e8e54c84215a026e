// Helpers shared by the composite layers: lib/layer.h.
#include "lib/layer.h"

#include <stdio.h>
#include <string.h>

#include <new>

#include "lib/attention.h"
#include "lib/status.h"

namespace tfk {
namespace detail {

tfk_status CreateFusedLinear(const char* fn, tfk_layout layout, size_t K,
                             std::initializer_list<WeightPart> parts, tfk_activation act,
                             tfk_linear** out) {
  size_t N = 0;
  bool any_bias = false;
  for (const WeightPart& p : parts) {
    N += p.n;
    any_bias |= p.bias != nullptr;
  }
  std::vector<float> w, bias;
  try {
    w.resize(K * N);
    if (any_bias) bias.assign(N, 0.0f);
  } catch (const std::bad_alloc&) {
    return Fail(TFK_OUT_OF_MEMORY, fn, "cannot allocate %zu x %zu fused weights", K, N);
  }
  size_t col = 0;
  for (const WeightPart& p : parts) {
    if (layout == TFK_LAYOUT_KN) {  // [K, N]: the part's columns
      for (size_t k = 0; k < K; ++k) memcpy(&w[k * N + col], p.w + k * p.n, p.n * sizeof(float));
    } else {  // [N, K]: the part's rows
      memcpy(&w[col * K], p.w, p.n * K * sizeof(float));
    }
    if (p.bias) memcpy(&bias[col], p.bias, p.n * sizeof(float));
    col += p.n;
  }
  const tfk_status s = tfk_linear_create(out, K, N, w.data(), layout == TFK_LAYOUT_KN ? N : K,
                                         layout, any_bias ? bias.data() : nullptr, act);
  if (s != TFK_SUCCESS) return FailFrom(s, fn);
  return TFK_SUCCESS;
}

size_t WorkspaceBytes(std::initializer_list<size_t> floats) {
  size_t bytes = 64;
  for (size_t n : floats) bytes += (n * sizeof(float) + 63) / 64 * 64;
  return bytes;
}

tfk_status CheckForward(const char* fn, size_t n, size_t cols, const float* X, size_t ldx,
                        const float* Y, size_t ldy, const float* R, size_t ldr,
                        const void* workspace, size_t workspace_bytes, size_t need) {
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "X", X, n, cols, ldx));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "Y", Y, n, cols, ldy));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "X", X, ldx, "Y", Y, ldy, n, cols));
  if (R != nullptr) {
    TFK_RETURN_IF_ERROR(CheckMatrix(fn, "R", R, n, cols, ldr));
    TFK_RETURN_IF_ERROR(CheckAliasing(fn, "R", R, ldr, "Y", Y, ldy, n, cols));
  }
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "workspace", workspace));
  if (workspace_bytes < need) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "workspace_bytes (%zu) < the %zu needed for n = %zu",
                workspace_bytes, need, n);
  }
  const auto extent = [&](size_t ld) { return ((n - 1) * ld + cols) * sizeof(float); };
  if (BytesOverlap(workspace, need, X, extent(ldx)) || BytesOverlap(workspace, need, Y, extent(ldy)) ||
      (R != nullptr && BytesOverlap(workspace, need, R, extent(ldr)))) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "workspace overlaps X, Y or R");
  }
  return TFK_SUCCESS;
}

tfk_status FailRestoringCache(tfk_status s, const char* fn, tfk_kv_cache* cache,
                              size_t length) {
  const int64_t len = static_cast<int64_t>(length);
  return FailRestoringCaches(s, fn, &cache, &len, cache != nullptr ? 1 : 0);
}

tfk_status FailRestoringCaches(tfk_status s, const char* fn, tfk_kv_cache* const* caches,
                               const int64_t* lengths, size_t n) {
  char inner[512];
  snprintf(inner, sizeof(inner), "%s", tfk_last_error());
  for (size_t i = 0; i < n; ++i) tfk_kv_cache_truncate(caches[i], static_cast<size_t>(lengths[i]));
  return Fail(s, fn, "%s", inner);
}

tfk_status CheckLayout(const char* fn, const tfk_layout& layout) {
  const int l = RawEnum(layout);
  if (l == TFK_LAYOUT_KN || l == TFK_LAYOUT_NK) return TFK_SUCCESS;
  return Fail(TFK_INVALID_ARGUMENT, fn, "layout (%d) is not a tfk_layout", l);
}

tfk_status CheckCache(const char* fn, const tfk_kv_cache* cache, size_t n_kv_heads,
                      size_t head_dim, size_t n, size_t* length) {
  size_t kv_heads = 0, dim = 0, capacity = 0;
  KvCacheShape(cache, &kv_heads, &dim);
  if (kv_heads != n_kv_heads || dim != head_dim) {
    return Fail(TFK_INVALID_ARGUMENT, fn,
                "the cache holds %zu KV heads of %zu, the layer %zu of %zu", kv_heads, dim,
                n_kv_heads, head_dim);
  }
  tfk_kv_cache_info(cache, length, &capacity, nullptr);
  if (n > capacity - *length) {
    return Fail(TFK_INVALID_ARGUMENT, fn,
                "the cache (length %zu, capacity %zu) has no room for %zu tokens", *length,
                capacity, n);
  }
  return TFK_SUCCESS;
}

tfk_status CheckBatchCaches(const char* fn, tfk_kv_cache* const* caches, size_t n,
                            size_t n_kv_heads, size_t head_dim, const float* Y, size_t cols,
                            size_t ldy, const void* workspace, size_t ws_bytes) {
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "caches", caches));
  TFK_RETURN_IF_ERROR(CheckAligned(fn, "caches", caches, alignof(tfk_kv_cache*)));
  // The array is read until the attention has run, after Y and the
  // workspace are first written.
  const size_t array_bytes = n * sizeof(tfk_kv_cache*);
  if (BytesOverlap(caches, array_bytes, Y, ((n - 1) * ldy + cols) * sizeof(float))) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "the caches array overlaps Y");
  }
  if (BytesOverlap(caches, array_bytes, workspace, ws_bytes)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "the caches array overlaps the workspace");
  }
  for (size_t i = 0; i < n; ++i) {
    if (caches[i] == nullptr) return Fail(TFK_INVALID_ARGUMENT, fn, "caches[%zu] is NULL", i);
    size_t length = 0;
    if (CheckCache(fn, caches[i], n_kv_heads, head_dim, 1, &length) != TFK_SUCCESS) {
      char inner[512];  // "fn: the cache ..." -> "fn: caches[i]: the cache ..."
      const char* msg = tfk_last_error();
      const size_t skip = strlen(fn) + 2;
      snprintf(inner, sizeof(inner), "%s", strlen(msg) > skip ? msg + skip : msg);
      return Fail(TFK_INVALID_ARGUMENT, fn, "caches[%zu]: %s", i, inner);
    }
  }
  // A cache given twice would take two tokens of one step as one sequence.
  // Pairwise: no memory to sort in (nothing is written before the checks
  // pass), and n^2 / 2 compares are far below the step's own work (n tokens
  // through every weight).
  for (size_t i = 1; i < n; ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (caches[i] == caches[j]) {
        return Fail(TFK_INVALID_ARGUMENT, fn, "caches[%zu] and caches[%zu] are the same cache", j,
                    i);
      }
    }
  }
  return TFK_SUCCESS;
}

}  // namespace detail
}  // namespace tfk
