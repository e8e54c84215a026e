#include "lib/dispatch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include <atomic>
#include <mutex>

#include "lib/status.h"
#include "tfk/tfk.h"

namespace tfk {
namespace detail {
namespace {

// Targets compiled into this build, best (lowest bit) first.
constexpr int64_t kCompiled = HWY_TARGETS;

int64_t LowestBit(int64_t bits) { return bits & -bits; }

size_t CountBits(int64_t bits) {
  size_t n = 0;
  for (; bits != 0; bits &= bits - 1) ++n;
  return n;
}

// Asked of Highway once, when the library is loaded: hwy::SupportedTargets()
// also sets the process-wide hwy::GetChosenTarget() (it calls Update with
// every target the CPU has), which is the host's, not ours. So the host's
// state is put back right after:
// - a host that had chosen (tfk loaded later, with dlopen) gets its choice
//   back: Update with what SupportedTargets returns, the CPU's targets less
//   those the host disabled (hwy::DisableTargets), as Highway's own
//   dispatch computes it;
// - otherwise the choice is unset again (DeInit), so that Highway's first
//   dispatch makes it, honouring any target the host disables before then
//   (or disabled already: set, the choice would have ignored that).
// After that tfk leaves the host's choice alone (tests/api_test.cc,
// Isa.LeavesTheHostsHighwayChoiceAlone; tests/dlopen_host.cc).
int64_t Supported() {
  static const int64_t supported = [] {
    hwy::ChosenTarget& host = hwy::GetChosenTarget();
    const bool host_chose = host.IsInitialized();
    const int64_t targets = hwy::SupportedTargets();
    if (host_chose) {
      host.Update(targets);
    } else {
      host.DeInit();
    }
    return targets & kCompiled;
  }();
  return supported;
}
const int64_t kSupportedAtLoad = Supported();

// Parses an ISA name; 0 for "no cap", -1 if unknown. Names that Highway knows
// but this build did not compile are returned too (checked by the caller).
int64_t ParseIsa(const char* name) {
  if (name == nullptr || name[0] == '\0' || strcasecmp(name, "best") == 0) return 0;
  if (strcasecmp(name, "AVX512") == 0) return HWY_AVX3;
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t target = int64_t{1} << bit;
    const char* known = hwy::TargetName(target);
    if (known != nullptr && strcasecmp(known, "Unknown") != 0 &&
        strcasecmp(known, name) == 0) {
      return target;
    }
  }
  return -1;
}

class IsaState {
 public:
  // Built when the library is loaded (kStateAtLoad), or at the first call
  // that needs it if that comes first (another library's static
  // initialiser): that may be a getter, so the thread's message is kept.
  IsaState() {
    const KeptError kept;
    const char* env = getenv("TFK_MAX_ISA");
    if (SetCap(env) != TFK_SUCCESS) {
      // A library cannot fail at load time; say why the request is ignored.
      // (tfk_last_error() is the message SetCap just set.)
      fprintf(stderr, "tfk: ignoring TFK_MAX_ISA=%s: %s\n", env, tfk_last_error());
      ClearError();
      SetCap(nullptr);
    }
  }

  tfk_status SetCap(const char* name) {
    const char* fn = "tfk_set_max_isa";
    const int64_t target = ParseIsa(name);
    if (target < 0) {
      return Fail(TFK_INVALID_ARGUMENT, fn, "unknown ISA name '%s'", name);
    }
    if (target != 0 && (target & kCompiled) == 0) {
      return Fail(TFK_UNSUPPORTED_ISA, fn, "ISA %s is not compiled into this build",
                  hwy::TargetName(target));
    }
    if (target != 0 && (target & Supported()) == 0) {
      return Fail(TFK_UNSUPPORTED_ISA, fn, "this CPU does not support ISA %s",
                  hwy::TargetName(target));
    }
    // Keep the supported targets no better than `target` (better = lower bit).
    const int64_t allowed = target == 0 ? Supported() : Supported() & ~(target - 1);
    std::lock_guard<std::mutex> lock(mutex_);
    chosen_.Update(allowed);
    active_.store(LowestBit(allowed), std::memory_order_relaxed);
    return TFK_SUCCESS;
  }

  size_t Index() const { return chosen_.GetIndex(); }
  int64_t Active() const { return active_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  hwy::ChosenTarget chosen_;  // ours, not hwy::GetChosenTarget()
  std::atomic<int64_t> active_{0};
};

IsaState& State() {
  static IsaState state;
  return state;
}
// TFK_MAX_ISA is read, and a refused value reported, when the library loads.
IsaState& kStateAtLoad = State();

// The n-th compiled target, best first.
int64_t NthCompiled(size_t i) {
  int64_t bits = kCompiled;
  for (; bits != 0 && i != 0; --i) bits &= bits - 1;
  return LowestBit(bits);
}

}  // namespace

size_t DispatchIndex() { return State().Index(); }

}  // namespace detail
}  // namespace tfk

extern "C" {

TFK_API size_t tfk_isa_count(void) {
  return tfk::detail::CountBits(tfk::detail::kCompiled);
}

TFK_API const char* tfk_isa_name(size_t i) {
  if (i >= tfk_isa_count()) return nullptr;
  return hwy::TargetName(tfk::detail::NthCompiled(i));
}

TFK_API int tfk_isa_supported(const char* name) {
  const int64_t target = tfk::detail::ParseIsa(name);
  return target > 0 && (target & tfk::detail::Supported()) != 0;
}

TFK_API tfk_status tfk_set_max_isa(const char* name) {
  tfk::detail::ClearError();
  return tfk::detail::State().SetCap(name);
}

TFK_API const char* tfk_active_isa(void) {
  return hwy::TargetName(tfk::detail::State().Active());
}

}  // extern "C"
