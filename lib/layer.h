// Helpers shared by the composite layers (lib/mha.cc, lib/ffn.cc,
// lib/block.cc): fusing weights at create, carving the caller's workspace,
// and validating a forward call's operands.
#ifndef TFK_LIB_LAYER_H_
#define TFK_LIB_LAYER_H_

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>
#include <vector>

#include "tfk/tfk.h"

namespace tfk {
namespace detail {

// One projection's weights: [K, n] (KN) or [n, K] (NK), dense; bias [n] or
// null.
struct WeightPart {
  const float* w;
  const float* bias;
  size_t n;
};

// Creates one packed linear layer computing all parts side by side
// (columns of part 0, then part 1, ...), with activation act. Fails with a
// message naming fn if memory runs out.
tfk_status CreateFusedLinear(const char* fn, tfk_layout layout, size_t K,
                             std::initializer_list<WeightPart> parts, tfk_activation act,
                             tfk_linear** out);

// Bytes of a workspace holding buffers of the given float counts, each
// 64-byte aligned (plus slack for aligning an arbitrary base pointer).
size_t WorkspaceBytes(std::initializer_list<size_t> floats);

// Hands out 64-byte aligned float buffers from a workspace, in the order
// WorkspaceBytes counted them.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base)
      : p_((reinterpret_cast<uintptr_t>(base) + 63) / 64 * 64) {}
  float* Take(size_t floats) {
    float* r = reinterpret_cast<float*>(p_);
    p_ += (floats * sizeof(float) + 63) / 64 * 64;
    return r;
  }

 private:
  uintptr_t p_;
};

// Validates a forward's X, Y, R ([n, cols], R optional) and workspace: Y may
// be X or R exactly, the workspace (at least `need` bytes) overlaps none.
tfk_status CheckForward(const char* fn, size_t n, size_t cols, const float* X, size_t ldx,
                        const float* Y, size_t ldy, const float* R, size_t ldr,
                        const void* workspace, size_t workspace_bytes, size_t need);

// tfk_status of a layout argument.
// By reference: an invalid value is read as an int (RawEnum), never as the enum.
tfk_status CheckLayout(const char* fn, const tfk_layout& layout);

// Checks that cache (not null) holds n_kv_heads x head_dim per token and has
// room for n more tokens; sets *length to its current length.
tfk_status CheckCache(const char* fn, const tfk_kv_cache* cache, size_t n_kv_heads,
                      size_t head_dim, size_t n, size_t* length);

// Checks a batch's caches: caches not null and clear of what the call
// writes (Y, [n, cols] with ld ldy, and the first ws_bytes of the
// workspace), each caches[i] not null, of n_kv_heads x head_dim, with room
// for one token, and no cache twice.
tfk_status CheckBatchCaches(const char* fn, tfk_kv_cache* const* caches, size_t n,
                            size_t n_kv_heads, size_t head_dim, const float* Y, size_t cols,
                            size_t ldy, const void* workspace, size_t ws_bytes);

// Fails a forward call (fn) that failed inside with status s (out of memory,
// possibly after appending to cache, which may be null): the cache is cut
// back to `length`, its length before the call, so that the caller can run
// the same tokens again (from its own copy of them if the call was in place:
// Y may already hold partial results), and the inner message is kept behind fn's name
// (as FailFrom; the truncation would clear it).
tfk_status FailRestoringCache(tfk_status s, const char* fn, tfk_kv_cache* cache, size_t length);

// FailRestoringCache for a batch: caches[i] is cut back to lengths[i].
tfk_status FailRestoringCaches(tfk_status s, const char* fn, tfk_kv_cache* const* caches,
                               const int64_t* lengths, size_t n);

// The KV heads and head_dim of a layer (lib/mha.cc), for the block's checks.
void MhaCacheShape(const tfk_mha* mha, size_t* n_kv_heads, size_t* head_dim);

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_LAYER_H_
