// Position-wise feed-forward layer: contract in include/tfk/tfk.h
// (tfk_ffn_*); design in docs/attention.md.
//
// Plain:  H = act(X W1 + b1)   one projection, act fused into its store;
//         Y = R + H W2 + b2    residual fused into the second's store.
// Gated:  G = X [W1 | W3] + [b1 | b3]   one fused projection [n, 2 d_ff];
//         H = act(G_1) * G_3            in place over G_1;
//         Y = R + H W2 + b2.

#include <stdint.h>

#include <new>

#include "lib/activation.h"
#include "lib/fpenv.h"
#include "lib/layer.h"
#include "lib/status.h"
#include "tfk/tfk.h"

struct tfk_ffn {
  size_t d_model, d_ff;
  tfk_activation act;
  bool gated;
  tfk_linear* up = nullptr;    // [W1] or [W1 | W3]
  tfk_linear* down = nullptr;  // W2
  size_t HiddenCols() const { return gated ? 2 * d_ff : d_ff; }
};

using namespace tfk::detail;  // NOLINT

extern "C" {

TFK_API tfk_status tfk_ffn_create(tfk_ffn** out, const tfk_ffn_config* config) {
  const char* fn = "tfk_ffn_create";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "out", out));
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "config", config));
  const tfk_ffn_config& c = *config;
  TFK_RETURN_IF_ERROR(CheckSize(fn, "d_model", c.d_model));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "d_ff", c.d_ff));
  if (c.d_model > (size_t{1} << 24) || c.d_ff > (size_t{1} << 24)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "d_model (%zu) or d_ff (%zu) is too large", c.d_model,
                c.d_ff);
  }
  const int act = RawEnum(c.act);
  if (act != TFK_ACT_RELU && act != TFK_ACT_GELU_ERF && act != TFK_ACT_GELU_TANH &&
      act != TFK_ACT_SILU) {
    return Fail(TFK_INVALID_ARGUMENT, fn,
                "act (%d) is not TFK_ACT_RELU, TFK_ACT_GELU_ERF, TFK_ACT_GELU_TANH or "
                "TFK_ACT_SILU",
                act);
  }
  if (c.gated != 0 && c.gated != 1) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "gated (%d) is not 0 or 1", c.gated);
  }
  TFK_RETURN_IF_ERROR(CheckLayout(fn, c.layout));
  // Read as floats (copied before they are packed): non-null, 4-byte
  // aligned, their extent addressable.
  TFK_RETURN_IF_ERROR(CheckFloats(fn, "w1", c.w1, c.d_model * c.d_ff));
  TFK_RETURN_IF_ERROR(CheckFloats(fn, "w2", c.w2, c.d_ff * c.d_model));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "b1", c.b1, c.d_ff));
  TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "b2", c.b2, c.d_model));
  if (c.gated) {
    TFK_RETURN_IF_ERROR(CheckFloats(fn, "w3", c.w3, c.d_model * c.d_ff));
    TFK_RETURN_IF_ERROR(CheckOptionalFloats(fn, "b3", c.b3, c.d_ff));
  }
  tfk_ffn* f = new (std::nothrow) tfk_ffn{};
  if (f == nullptr) return Fail(TFK_OUT_OF_MEMORY, fn, "no memory for the handle");
  f->d_model = c.d_model, f->d_ff = c.d_ff, f->act = c.act, f->gated = c.gated == 1;
  tfk_status s =
      c.gated ? CreateFusedLinear(fn, c.layout, c.d_model, {{c.w1, c.b1, c.d_ff}, {c.w3, c.b3, c.d_ff}},
                                  TFK_ACT_NONE, &f->up)
              : CreateFusedLinear(fn, c.layout, c.d_model, {{c.w1, c.b1, c.d_ff}}, c.act, &f->up);
  if (s == TFK_SUCCESS) {
    s = CreateFusedLinear(fn, c.layout, c.d_ff, {{c.w2, c.b2, c.d_model}}, TFK_ACT_NONE, &f->down);
  }
  if (s != TFK_SUCCESS) {
    tfk_ffn_destroy(f);
    return s;
  }
  *out = f;
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_ffn_workspace_size(const tfk_ffn* ffn, size_t n, size_t* bytes) {
  const char* fn = "tfk_ffn_workspace_size";
  ClearError();
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "ffn", ffn));
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "bytes", bytes));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  if (n > (SIZE_MAX / 16) / ffn->HiddenCols()) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) is too large", n);
  }
  *bytes = WorkspaceBytes({n * ffn->HiddenCols()});
  return TFK_SUCCESS;
}

TFK_API tfk_status tfk_ffn_forward(const tfk_ffn* ffn, size_t n, const float* X, size_t ldx,
                                   float* Y, size_t ldy, const float* R, size_t ldr,
                                   void* workspace, size_t workspace_bytes) {
  const char* fn = "tfk_ffn_forward";
  ClearError();
  const tfk::detail::FpEnvScope fp_env;  // tfk's FP environment from here on (lib/fpenv.h)
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, "ffn", ffn));
  TFK_RETURN_IF_ERROR(CheckSize(fn, "n", n));
  size_t need = 0;
  if (tfk_ffn_workspace_size(ffn, n, &need) != TFK_SUCCESS) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "n (%zu) is too large", n);
  }
  TFK_RETURN_IF_ERROR(
      CheckForward(fn, n, ffn->d_model, X, ldx, Y, ldy, R, ldr, workspace, workspace_bytes, need));
  WorkspaceCarver ws(workspace);
  const size_t ld = ffn->HiddenCols();
  float* h = ws.Take(n * ld);
  tfk_status s = tfk_linear_forward(ffn->up, n, X, ldx, h, ld, nullptr, 0);
  if (s == TFK_SUCCESS && ffn->gated) {
    tfk::GatedActivation(ffn->act, n, ffn->d_ff, h, h + ffn->d_ff, ld, h, ld);
  }
  if (s == TFK_SUCCESS) s = tfk_linear_forward(ffn->down, n, h, ld, Y, ldy, R, ldr);
  if (s != TFK_SUCCESS) return FailFrom(s, fn);
  return TFK_SUCCESS;
}

TFK_API void tfk_ffn_destroy(tfk_ffn* ffn) {
  if (ffn == nullptr) return;
  tfk_linear_destroy(ffn->up);
  tfk_linear_destroy(ffn->down);
  delete ffn;
}

}  // extern "C"
