// tfk's floating-point environment: round to nearest, subnormals kept (no
// flush to zero, no denormals-are-zero), every exception masked. Each kernel
// call runs in it on the calling thread (TFK_DISPATCH) and in every task on a
// worker (ParallelForImpl), whatever the thread's own environment, and gives
// the thread its environment back afterwards.
//
// Why: the kernels' error bounds and special values (docs/numerics.md) are
// derived for that environment. Rounding by the 1.5 2^23 trick
// (lib/exp-inl.h) needs round to nearest; GELU's and LayerNorm's subnormal
// ranges need subnormals; the kernels raise exceptions on purpose (a -inf
// score, NaN lanes, overflow past a clamp), which a host that unmasked them
// (feenableexcept while debugging) would take as SIGFPE. And results must
// not depend on the thread count: a host that flushes subnormals on its own
// thread (TensorFlow's threads, torch.set_flush_denormal) while TBB's
// workers run in the environment of the thread that created their arena
// would get rows that differ with the thread that computed them.
//
// Cost: reading the control register (a few cycles) per call and per task;
// it is written only where it differs, and then restored.
#ifndef TFK_LIB_FPENV_H_
#define TFK_LIB_FPENV_H_

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
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
  // all masked, round to nearest, no FTZ or DAZ. The status flags a call
  // raises stay raised (as for any floating-point code); the controls are
  // the caller's again on return.
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
  // FZ, DN and the trap enables clear, round to nearest), set for the call;
  // on return the caller's, with the flags the call raised added (set, not
  // raised: a trap the caller enabled does not fire).
  FpEnvScope() {
    fegetenv(&saved_);
    fesetenv(FE_DFL_ENV);
  }
  ~FpEnvScope() {
    fexcept_t flags;
    fegetexceptflag(&flags, FE_ALL_EXCEPT);
    const int raised = fetestexcept(FE_ALL_EXCEPT);
    fesetenv(&saved_);
    if (raised != 0) fesetexceptflag(&flags, raised);
  }

 private:
  fenv_t saved_;
#endif
  FpEnvScope(const FpEnvScope&) = delete;
  FpEnvScope& operator=(const FpEnvScope&) = delete;
};

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_FPENV_H_
