// RoPE: target-independent arguments and angle preparation.
// Contract of the public entry: include/tfk/tfk.h (tfk_rope).
#ifndef TFK_LIB_ROPE_H_
#define TFK_LIB_ROPE_H_

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tfk/tfk.h"

namespace tfk {

// Pairs per head are kept in stack tables: rotary_dim <= kMaxRotaryDim.
constexpr size_t kMaxRotaryDim = 1024;

struct RopeArgs {
  size_t tokens, heads, head_dim, rotary_dim;
  tfk_rope_pairing pairing;
  double base;
  float* x;
  size_t ldx;
  int64_t pos_start;
  const int64_t* positions;  // or null
};

inline int64_t RopePosition(const RopeArgs& a, size_t t) {
  return a.positions ? a.positions[t] : a.pos_start + static_cast<int64_t>(t);
}

// inv_freq[i] = base^(-2i / rotary_dim), i < rotary_dim / 2, in double.
inline void RopeInverseFrequencies(double base, size_t rotary_dim, double* inv_freq) {
  const double log_base = log(base);
  for (size_t i = 0; i < rotary_dim / 2; ++i) {
    inv_freq[i] = exp(-2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim) * log_base);
  }
}

// r[i] = (p * inv_freq[i]) reduced to [-pi, pi] in double (Cody-Waite with
// 2 pi split in two doubles), then rounded to float: the float sin/cos that
// follow see |r| <= pi whatever the position, so their error does not grow
// with p (Highway 1.0.3's Sin/Cos are only valid for |x| <= 39000).
inline void RopeReducedAngles(int64_t p, const double* inv_freq, size_t pairs, float* r) {
  const double kTwoPiHi = 6.283185307179586;
  const double kTwoPiLo = 2.4492935982947064e-16;
  const double kInvTwoPi = 0.15915494309189535;
  const double pd = static_cast<double>(p);
  for (size_t i = 0; i < pairs; ++i) {
    const double a = pd * inv_freq[i];
    const double k = nearbyint(a * kInvTwoPi);
    r[i] = static_cast<float>((a - k * kTwoPiHi) - k * kTwoPiLo);
  }
}

}  // namespace tfk

#endif  // TFK_LIB_ROPE_H_
