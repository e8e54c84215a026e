// Activations: internal entries used by composite layers (lib/layer.cc).
// Public contracts: include/tfk/tfk.h (tfk_activate, tfk_add).
#ifndef TFK_LIB_ACTIVATION_H_
#define TFK_LIB_ACTIVATION_H_

#include <stddef.h>

namespace tfk {

// y[r, c] = act(g[r, c]) * u[r, c] over [rows, cols] on the active target; g
// and u have row stride ld, y has ldy and may be g. act is a tfk_activation
// other than TFK_ACT_NONE. Arguments are not validated.
void GatedActivation(int act, size_t rows, size_t cols, const float* g, const float* u,
                     size_t ld, float* y, size_t ldy);

}  // namespace tfk

#endif  // TFK_LIB_ACTIVATION_H_
