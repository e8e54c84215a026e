// A host with Highway code of its own that chose its targets (no AVX-512:
// hwy::DisableTargets) before it loads libtfk with dlopen: loading tfk must
// leave that choice as it was (lib/dispatch.cc, Supported). Not linked with
// tfk; argv[1] is the shared library. Exit status 0 on success.
#include <dlfcn.h>
#include <stdio.h>

#include "hwy/targets.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // Disable the best target the CPU has among those compiled here (lower
  // bits are better targets), if there is a second one to fall back to; the
  // host's first dispatch then chooses the next best.
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = supported & -supported;
  if (supported == best) {
    printf("one target only: nothing to disable\n");
    return 0;
  }
  hwy::DisableTargets(best);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  const size_t before = hwy::GetChosenTarget().GetIndex();
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  const size_t after = hwy::GetChosenTarget().GetIndex();
  printf("host's dispatch index before loading tfk %zu, after %zu\n", before, after);
  return before == after ? 0 : 1;
}
