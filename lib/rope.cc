// Rotary position embedding, in place: public entry and per-target body.
// Contract: include/tfk/tfk.h (tfk_rope); numerics: docs/numerics.md.
//
// Per token, the rotary_dim/2 angles are reduced in double precision
// (lib/rope.h), their cos and sin computed once with SIMD and shared by all
// heads, then every head's pairs are rotated:
//   half-split:  x[i] ' = x[i] c - x[i+h] s,   x[i+h]' = x[i] s + x[i+h] c
//   interleaved: x' = x * (c, c) + swap(x) * (-s, s) over lane pairs.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "lib/fpenv.h"
#include "lib/rope.h"
#include "lib/threading.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// c[i] = cos(r[i]), s[i] = sin(r[i]) for i < n.
HWY_INLINE void CosSin(const float* r, size_t n, float* c, float* s) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, r + i);
    hn::StoreU(hn::Cos(d, v), d, c + i);
    hn::StoreU(hn::Sin(d, v), d, s + i);
  }
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) {
    const auto v = hn::LoadU(d1, r + i);
    hn::StoreU(hn::Cos(d1, v), d1, c + i);
    hn::StoreU(hn::Sin(d1, v), d1, s + i);
  }
}

template <class D>
HWY_INLINE void RotateHalf(D d, float* x, size_t i, size_t half, const float* c,
                           const float* s) {
  const auto a = hn::LoadU(d, x + i);
  const auto b = hn::LoadU(d, x + half + i);
  const auto vc = hn::LoadU(d, c + i);
  const auto vs = hn::LoadU(d, s + i);
  hn::StoreU(hn::MulSub(a, vc, hn::Mul(b, vs)), d, x + i);
  hn::StoreU(hn::MulAdd(a, vs, hn::Mul(b, vc)), d, x + half + i);
}

// One head, half-split pairing: pairs (i, i + half).
HWY_INLINE void RopeHeadHalf(float* x, size_t half, const float* c, const float* s) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= half; i += N) RotateHalf(d, x, i, half, c, s);
  for (; i < half; ++i) RotateHalf(hn::CappedTag<float, 1>(), x, i, half, c, s);
}

// One head, interleaved pairing over rd = 2 * pairs elements. cc holds
// (c0, c0, c1, c1, ...) and ss (-s0, s0, -s1, s1, ...).
HWY_INLINE void RopeHeadInterleaved(float* x, size_t rd, const float* cc, const float* ss) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= rd; i += N) {
    const auto v = hn::LoadU(d, x + i);
    const auto swapped = hn::Reverse2(d, v);
    hn::StoreU(hn::MulAdd(v, hn::LoadU(d, cc + i), hn::Mul(swapped, hn::LoadU(d, ss + i))), d,
               x + i);
  }
  for (; i < rd; i += 2) {  // the same arithmetic, one pair at a time
    const float x0 = x[i], x1 = x[i + 1];
    x[i] = fmaf(x0, cc[i], x1 * ss[i]);
    x[i + 1] = fmaf(x1, cc[i + 1], x0 * ss[i + 1]);
  }
}

void RopeTokens(const RopeArgs& a) {
  const size_t pairs = a.rotary_dim / 2;
  const size_t bytes_per_token = a.heads * a.rotary_dim * 2 * sizeof(float);
  detail::ParallelFor(a.tokens, bytes_per_token, [&](size_t begin, size_t end) HWY_ATTR {
    double inv_freq[kMaxRotaryDim / 2];
    float r[kMaxRotaryDim / 2], c[kMaxRotaryDim / 2], s[kMaxRotaryDim / 2];
    float cc[kMaxRotaryDim], ss[kMaxRotaryDim];
    RopeInverseFrequencies(a.base, a.rotary_dim, inv_freq);
    for (size_t t = begin; t < end; ++t) {
      RopeReducedAngles(RopePosition(a, t), inv_freq, pairs, r);
      CosSin(r, pairs, c, s);
      float* row = a.x + t * a.ldx;
      if (a.pairing == TFK_ROPE_HALF) {
        for (size_t h = 0; h < a.heads; ++h) RopeHeadHalf(row + h * a.head_dim, pairs, c, s);
      } else {
        for (size_t i = 0; i < pairs; ++i) {
          cc[2 * i] = cc[2 * i + 1] = c[i];
          ss[2 * i] = -s[i];
          ss[2 * i + 1] = s[i];
        }
        for (size_t h = 0; h < a.heads; ++h) {
          RopeHeadInterleaved(row + h * a.head_dim, a.rotary_dim, cc, ss);
        }
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <stdint.h>

#include "lib/dispatch.h"
#include "lib/status.h"

namespace tfk {
HWY_EXPORT(RopeTokens);
}  // namespace tfk

extern "C" TFK_API tfk_status tfk_rope(size_t tokens, size_t heads, size_t head_dim,
                                       size_t rotary_dim, tfk_rope_pairing pairing, double base,
                                       float* x, size_t ldx, int64_t pos_start,
                                       const int64_t* positions) {
  using namespace tfk::detail;  // NOLINT
  const char* fn = "tfk_rope";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckSize(fn, "tokens", tokens));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "heads", heads));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "head_dim", head_dim));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "rotary_dim", rotary_dim));
  if (rotary_dim % 2 != 0) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "rotary_dim (%zu) is odd", rotary_dim);
  }
  if (rotary_dim > head_dim) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "rotary_dim (%zu) > head_dim (%zu)", rotary_dim,
                head_dim);
  }
  if (rotary_dim > tfk::kMaxRotaryDim) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "rotary_dim (%zu) > %zu", rotary_dim,
                tfk::kMaxRotaryDim);
  }
  if (RawEnum(pairing) != TFK_ROPE_INTERLEAVED && RawEnum(pairing) != TFK_ROPE_HALF) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "pairing (%d) is not a tfk_rope_pairing",
                RawEnum(pairing));
  }
  if (!(base > 1.0) || !isfinite(base)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "base (%g) is not finite and > 1", base);
  }
  if (head_dim > SIZE_MAX / heads) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "heads * head_dim overflows");
  }
  TFK_RETURN_IF_ERROR(CheckSize(fn, "heads * head_dim", heads * head_dim));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "x", x, tokens, heads * head_dim, ldx));
  if (positions == nullptr && pos_start > 0 &&
      static_cast<uint64_t>(tokens - 1) > static_cast<uint64_t>(INT64_MAX - pos_start)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "pos_start (%lld) + tokens - 1 overflows int64_t",
                static_cast<long long>(pos_start));
  }
  if (positions != nullptr) {
    TFK_RETURN_IF_ERROR(CheckAligned(fn, "positions", positions, alignof(int64_t)));
    // Tasks read positions[t] while others rotate x: they must not share bytes.
    if (BytesOverlap(positions, tokens * sizeof(int64_t), x,
                     ((tokens - 1) * ldx + heads * head_dim) * sizeof(float))) {
      return Fail(TFK_INVALID_ARGUMENT, fn, "positions overlaps x");
    }
  }
  const tfk::RopeArgs args{tokens, heads, head_dim, rotary_dim, pairing, base,
                           x, ldx, pos_start, positions};
  TFK_DISPATCH(tfk::RopeTokens)(args);
  return TFK_SUCCESS;
}
#endif  // HWY_ONCE
