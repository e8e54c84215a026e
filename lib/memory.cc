#include "lib/memory.h"

#include <stdlib.h>
#include <unistd.h>

namespace tfk {
namespace detail {

size_t StreamThresholdBytes() {
  static const size_t threshold = [] {
    // TFK_STREAM_THRESHOLD (bytes) overrides; tests use it to exercise the
    // streaming paths on small data.
    if (const char* env = getenv("TFK_STREAM_THRESHOLD")) {
      char* end = nullptr;
      const unsigned long long v = strtoull(env, &end, 10);
      if (end != env && *end == '\0') return static_cast<size_t>(v);
    }
    long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
  }();
  return threshold;
}

namespace {
struct Scratch {
  float* data = nullptr;
  size_t size = 0;
  ~Scratch() { free(data); }
};
thread_local Scratch t_scratch;
}  // namespace

float* ThreadScratch(size_t n) {
  Scratch& s = t_scratch;
  if (n > s.size) {
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    void* p = aligned_alloc(64, bytes);
    if (p == nullptr) return nullptr;
    free(s.data);
    s.data = static_cast<float*>(p);
    s.size = bytes / sizeof(float);
  }
  return s.data;
}

}  // namespace detail
}  // namespace tfk
