// Softmax: target-independent arguments and masking rule.
// Contract of the public entry: include/tfk/tfk.h (tfk_softmax).
#ifndef TFK_LIB_SOFTMAX_H_
#define TFK_LIB_SOFTMAX_H_

#include <stddef.h>

#include "tfk/tfk.h"

namespace tfk {

struct SoftmaxArgs {
  size_t rows, cols;
  const float* x;
  size_t ldx;
  float* y;
  size_t ldy;
  float scale;
  tfk_mask mask;
  size_t q_len;  // rows per causal block
};

// Number of leading columns row r sees: all of them, or under the causal
// mask (bottom-right aligned) the j <= cols - q_len + (r % q_len).
inline size_t SoftmaxValidCols(tfk_mask mask, size_t q_len, size_t cols, size_t r) {
  if (mask != TFK_MASK_CAUSAL) return cols;
  const size_t i = r % q_len;
  if (cols + i + 1 <= q_len) return 0;
  const size_t n = cols + i + 1 - q_len;
  return n < cols ? n : cols;
}

}  // namespace tfk

#endif  // TFK_LIB_SOFTMAX_H_
