// tfk's floating-point environment: round to nearest, subnormals kept (no
// flush to zero, no denormals-are-zero), every exception masked. Each public
// entry that takes floats or computes opens an FpEnvScope first thing, and
// so do each dispatched kernel call (TFK_DISPATCH) and each parallel loop
// and its tasks (ParallelForImpl), whatever the thread's own environment;
// the thread gets its environment back afterwards.
//
// Why: the kernels' error bounds and special values (docs/numerics.md) are
// derived for that environment. Rounding by the 1.5 2^23 trick
// (lib/exp-inl.h) needs round to nearest; GELU's and LayerNorm's subnormal
// ranges need subnormals; the kernels raise exceptions on purpose (a -inf
// score, NaN lanes, overflow past a clamp), and the argument checks compare
// NaNs, which a host that unmasked exceptions (feenableexcept while
// debugging) would take as SIGFPE. And results must not depend on how a call
// is split: TBB runs a loop's tasks, on its workers and on the waiting
// caller, in the environment its arena captured when it was created (or the
// loop's context captured: tfk's), so a host flushing subnormals on its
// own thread got other bits from a call small enough to stay on that thread
// than from one split into tasks.
//
// Cost on x86-64: a read of MXCSR (a few cycles) per scope; it is written
// only where it differs, and then restored.
#ifndef TFK_LIB_FPENV_H_
#define TFK_LIB_FPENV_H_

// 64-bit x86 only: 32-bit x86 code computes scalars on the x87 unit too,
// whose control word the fenv path below covers.
#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define TFK_FPENV_MXCSR 1
#else
#include <fenv.h>
#define TFK_FPENV_MXCSR 0
#endif

namespace tfk {
namespace detail {

class FpEnvScope {
 public:
#if TFK_FPENV_MXCSR
  // MXCSR: status flags in bits 0-5, the rest controls: DAZ (6), exception
  // masks (7-12), rounding (13-14), FTZ (15). 0x1F80 is the power-on value:
  // all masked, round to nearest, no FTZ or DAZ. The controls are the
  // caller's again on return; the status flags raised meanwhile stay raised.
  static constexpr unsigned kFlags = 0x3Fu, kTfkControl = 0x1F80u;
  FpEnvScope() : saved_(_mm_getcsr()) {
    if ((saved_ & ~kFlags) != kTfkControl) _mm_setcsr(kTfkControl | (saved_ & kFlags));
  }
  ~FpEnvScope() {
    if ((saved_ & ~kFlags) != kTfkControl) _mm_setcsr((saved_ & ~kFlags) | (_mm_getcsr() & kFlags));
  }

 private:
  unsigned saved_;
#else
  // Elsewhere C's default environment is tfk's (on AArch64 glibc: FPCR with
  // FZ, DN and the trap enables clear, round to nearest), set for the call
  // and swapped back after it: the flags it raised are dropped (setting them
  // again could trap where traps are enabled, as on PowerPC).
  FpEnvScope() {
    fegetenv(&saved_);
    fesetenv(FE_DFL_ENV);
  }
  ~FpEnvScope() { fesetenv(&saved_); }

 private:
  fenv_t saved_;
#endif
  FpEnvScope(const FpEnvScope&) = delete;
  FpEnvScope& operator=(const FpEnvScope&) = delete;
};

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_FPENV_H_
