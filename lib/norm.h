// LayerNorm / RMSNorm: target-independent arguments and the double-precision
// scalar row path used when a finite row overflows the float statistics.
// Contracts of the public entries: include/tfk/tfk.h.
#ifndef TFK_LIB_NORM_H_
#define TFK_LIB_NORM_H_

#include <stddef.h>

namespace tfk {

struct NormArgs {
  size_t rows, cols;
  const float* x;
  size_t ldx;
  float* y;
  size_t ldy;
  const float* gamma;  // [cols] or null
  const float* beta;   // [cols] or null (LayerNorm only)
  float eps;
};

bool RowIsFinite(const float* x, size_t n);
void LayerNormRowF64(const float* x, float* y, size_t n, const float* gamma,
                     const float* beta, float eps);
void RmsNormRowF64(const float* x, float* y, size_t n, const float* gamma, float eps);

}  // namespace tfk

#endif  // TFK_LIB_NORM_H_
