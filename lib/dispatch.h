// Run-time choice of the SIMD target, local to tfk.
//
// Highway's HWY_DYNAMIC_DISPATCH indexes each exported table with the
// process-wide hwy::GetChosenTarget(); capping that (SetSupportedTargetsForTest)
// would change every other Highway user in the host process. tfk keeps its own
// hwy::ChosenTarget instead and indexes the same tables with it. Each public
// entry point dispatches once per call with TFK_DISPATCH(F)(args...), and the
// target code it lands in calls its helpers directly (no further dispatch).
// The call runs in tfk's floating-point environment (lib/fpenv.h).
//
// Every translation unit of tfk, its tests and benchmarks is compiled with the
// same target macros (CMake target tfk_hwy_config), so all tables agree on the
// index of each target.
#ifndef TFK_LIB_DISPATCH_H_
#define TFK_LIB_DISPATCH_H_

#include <stddef.h>

#include <utility>

#include "hwy/highway.h"
#include "lib/fpenv.h"

namespace tfk {
namespace detail {

// Index into every HWY_EXPORT table for the active (capped) target.
size_t DispatchIndex();

// A dispatched call runs in tfk's floating-point environment (lib/fpenv.h).
template <class F>
struct InTfkFpEnv {
  F f;
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    FpEnvScope scope;
    return f(std::forward<Args>(args)...);
  }
};
template <class F>
InTfkFpEnv(F) -> InTfkFpEnv<F>;

}  // namespace detail
}  // namespace tfk

#define TFK_DISPATCH(FUNC)   \
  ::tfk::detail::InTfkFpEnv{ \
      HWY_DISPATCH_TABLE(FUNC)[::tfk::detail::DispatchIndex()]}

#endif  // TFK_LIB_DISPATCH_H_
