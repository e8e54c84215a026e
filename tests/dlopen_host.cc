// A host with Highway code of its own that disabled a target
// (hwy::DisableTargets) before it loads libtfk with dlopen: loading tfk must
// leave the host's choice as it was (lib/dispatch.cc, Supported), whether
// the host had dispatched already ("chosen": its chosen target is set) or
// not yet ("unchosen": Highway's first dispatch will choose, honouring the
// disabled target). Not linked with tfk; argv[1] is the shared library,
// argv[2] the case. Exit status 0 on success.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "hwy/targets.h"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const bool chosen = strcmp(argv[2], "chosen") == 0;
  if (!chosen && strcmp(argv[2], "unchosen") != 0) return 2;
  // Disable the best target the CPU has among those compiled here (lower
  // bits are better targets), if there is a second one to fall back to; the
  // host's first dispatch then chooses the next best.
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = supported & -supported;
  if (supported == best) {
    printf("one target only: nothing to disable\n");
    return 0;
  }
  hwy::DisableTargets(best);  // leaves the chosen target unset
  if (chosen) hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  const bool set_before = hwy::GetChosenTarget().IsInitialized();
  const size_t before = hwy::GetChosenTarget().GetIndex();
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  const bool set_after = hwy::GetChosenTarget().IsInitialized();
  const size_t after = hwy::GetChosenTarget().GetIndex();
  printf("host's chosen target before loading tfk: %s, index %zu; after: %s, index %zu\n",
         set_before ? "set" : "unset", before, set_after ? "set" : "unset", after);
  return set_before == chosen && set_after == set_before && before == after ? 0 : 1;
}
