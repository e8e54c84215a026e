// Activations and residual add: public entries and their per-target bodies.
// Contracts: include/tfk/tfk.h; numerics: lib/activation-inl.h, docs/numerics.md.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/activation.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <type_traits>

#include "hwy/highway.h"
#include "lib/activation-inl.h"
#include "lib/activation.h"
#include "lib/elementwise-inl.h"
#include "lib/fpenv.h"
#include "lib/memory.h"
#include "lib/threading.h"
#include "tfk/tfk.h"

HWY_BEFORE_NAMESPACE();
namespace tfk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Unary ops: op(d, x) on one vector, op.N<K>(d, x) on K vectors in place;
// rows go kVectors vectors a step (UnaryRow). Measured on AVX2 here, 256 Ki
// floats, one thread, against whole formulas one vector after another:
// ReLU +12 % with 4, GELU-tanh +40 % with 4, SiLU +27 % with 4, GELU-erf
// +5 % with 2 (with 3 or 4 its ~10 live vectors each spill out of AVX2's 16
// registers: no gain).
struct ReluOp {
  static constexpr size_t kVectors = 4;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const { return Relu(d, x); }
  template <size_t K, class D, class V>
  HWY_INLINE void N(D d, V* x) const {
#pragma GCC unroll 4
    for (size_t k = 0; k < K; ++k) x[k] = Relu(d, x[k]);
  }
};
struct GeluErfOp {
  static constexpr size_t kVectors = 2;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const { return GeluErf(d, x); }
  template <size_t K, class D, class V>
  HWY_INLINE void N(D d, V* x) const { GeluErfN<K>(d, x); }
};
struct GeluTanhOp {
  static constexpr size_t kVectors = 4;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const { return GeluTanh(d, x); }
  template <size_t K, class D, class V>
  HWY_INLINE void N(D d, V* x) const { GeluTanhN<K>(d, x); }
};
struct SiluOp {
  static constexpr size_t kVectors = 4;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const { return Silu(d, x); }
  template <size_t K, class D, class V>
  HWY_INLINE void N(D d, V* x) const { SiluN<K>(d, x); }
};
struct AddOp {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Add(a, b); }
};

template <bool kStream, class Op>
void ActivateWith(size_t rows, size_t cols, const float* x, size_t ldx, float* y,
                  size_t ldy) {
  ForEachRowSegment<kStream>(rows, cols, ldx, ldy, 2 * sizeof(float),
                             [&](size_t ox, size_t oy, size_t n) HWY_ATTR {
                               UnaryRow<kStream>(x + ox, y + oy, n, Op());
                             });
}

template <class Op>
void ActivateWith(size_t rows, size_t cols, const float* x, size_t ldx, float* y,
                  size_t ldy) {
  const size_t out = rows * cols * sizeof(float);
  if (detail::StreamOutput(x == y ? 0 : out, out)) {
    ActivateWith<true, Op>(rows, cols, x, ldx, y, ldy);
  } else {
    ActivateWith<false, Op>(rows, cols, x, ldx, y, ldy);
  }
}

void Activate(int act, size_t rows, size_t cols, const float* x, size_t ldx,
              float* y, size_t ldy) {
  switch (act) {
    case TFK_ACT_RELU: return ActivateWith<ReluOp>(rows, cols, x, ldx, y, ldy);
    case TFK_ACT_GELU_ERF: return ActivateWith<GeluErfOp>(rows, cols, x, ldx, y, ldy);
    case TFK_ACT_GELU_TANH: return ActivateWith<GeluTanhOp>(rows, cols, x, ldx, y, ldy);
    case TFK_ACT_SILU: return ActivateWith<SiluOp>(rows, cols, x, ldx, y, ldy);
  }
}

void AddRows(size_t rows, size_t cols, const float* a, size_t lda, const float* b,
             size_t ldb, float* y, size_t ldy) {
  const size_t out = rows * cols * sizeof(float);
  const bool stream = detail::StreamOutput((a == y ? 0 : out) + (b == y || b == a ? 0 : out), out);
  if (lda == ldb) {  // a and b share offsets: flat blocks when dense
    const auto run = [&](auto stream_tag) HWY_ATTR {
      constexpr bool kStream = decltype(stream_tag)::value;
      ForEachRowSegment<kStream>(rows, cols, lda, ldy, 3 * sizeof(float),
                                 [&](size_t oa, size_t oy, size_t n) HWY_ATTR {
                                   BinaryRow<kStream>(a + oa, b + oa, y + oy, n, AddOp());
                                 });
    };
    return stream ? run(std::true_type()) : run(std::false_type());
  }
  detail::ParallelFor(rows, cols * 3 * sizeof(float), [&](size_t begin, size_t end) HWY_ATTR {
    for (size_t r = begin; r < end; ++r) {
      BinaryRow<false>(a + r * lda, b + r * ldb, y + r * ldy, cols, AddOp());
    }
  });
}

// y = act(g) * u, the gated FFN's hidden layer (SwiGLU, GeGLU): act's bound
// plus one rounding. g and u share the row stride ld; y may be g.
template <class Act>
struct GatedOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V g, V u) const { return hn::Mul(Act()(d, g), u); }
};

template <class Act>
void GatedWith(size_t rows, size_t cols, const float* g, const float* u, size_t ld, float* y,
               size_t ldy) {
  detail::ParallelFor(rows, cols * 3 * sizeof(float), [&](size_t begin, size_t end) HWY_ATTR {
    for (size_t r = begin; r < end; ++r) {
      BinaryRow<false>(g + r * ld, u + r * ld, y + r * ldy, cols, GatedOp<Act>());
    }
  });
}

void GatedRows(int act, size_t rows, size_t cols, const float* g, const float* u, size_t ld,
               float* y, size_t ldy) {
  switch (act) {
    case TFK_ACT_RELU: return GatedWith<ReluOp>(rows, cols, g, u, ld, y, ldy);
    case TFK_ACT_GELU_ERF: return GatedWith<GeluErfOp>(rows, cols, g, u, ld, y, ldy);
    case TFK_ACT_GELU_TANH: return GatedWith<GeluTanhOp>(rows, cols, g, u, ld, y, ldy);
    case TFK_ACT_SILU: return GatedWith<SiluOp>(rows, cols, g, u, ld, y, ldy);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tfk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "lib/dispatch.h"
#include "lib/status.h"

namespace tfk {
HWY_EXPORT(Activate);
HWY_EXPORT(AddRows);
HWY_EXPORT(GatedRows);

void GatedActivation(int act, size_t rows, size_t cols, const float* g, const float* u,
                     size_t ld, float* y, size_t ldy) {
  TFK_DISPATCH(GatedRows)(act, rows, cols, g, u, ld, y, ldy);
}
}  // namespace tfk

using tfk::detail::CheckAliasing;
using tfk::detail::CheckMatrix;
using tfk::detail::CheckSize;

extern "C" {

TFK_API tfk_status tfk_activate(tfk_activation act, size_t rows, size_t cols,
                                const float* x, size_t ldx, float* y, size_t ldy) {
  const char* fn = "tfk_activate";
  tfk::detail::ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  const int a = tfk::detail::RawEnum(act);
  if (a != TFK_ACT_RELU && a != TFK_ACT_GELU_ERF && a != TFK_ACT_GELU_TANH && a != TFK_ACT_SILU) {
    return tfk::detail::Fail(TFK_INVALID_ARGUMENT, fn,
                             "act (%d) is not TFK_ACT_RELU, TFK_ACT_GELU_ERF, "
                             "TFK_ACT_GELU_TANH or TFK_ACT_SILU",
                             a);
  }
  TFK_RETURN_IF_ERROR(CheckSize(fn, "rows", rows));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "cols", cols));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "x", x, rows, cols, ldx));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "y", y, rows, cols, ldy));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "x", x, ldx, "y", y, ldy, rows, cols));
  TFK_DISPATCH(tfk::Activate)(act, rows, cols, x, ldx, y, ldy);
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_add(size_t rows, size_t cols, const float* a, size_t lda,
                           const float* b, size_t ldb, float* y, size_t ldy) {
  const char* fn = "tfk_add";
  tfk::detail::ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckSize(fn, "rows", rows));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "cols", cols));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "a", a, rows, cols, lda));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "b", b, rows, cols, ldb));
  TFK_RETURN_IF_ERROR(CheckMatrix(fn, "y", y, rows, cols, ldy));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "a", a, lda, "y", y, ldy, rows, cols));
  TFK_RETURN_IF_ERROR(CheckAliasing(fn, "b", b, ldb, "y", y, ldy, rows, cols));
  TFK_DISPATCH(tfk::AddRows)(rows, cols, a, lda, b, ldb, y, ldy);
  return TFK_SUCCESS;
}

}  // extern "C"
#endif  // HWY_ONCE
