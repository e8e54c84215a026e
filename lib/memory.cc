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
thread_local Scratch t_call;
thread_local bool t_call_busy = false;

float* Grow(Scratch& s, size_t n) {
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

float* AlignedFloats(size_t n) {
  return static_cast<float*>(aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
}
}  // namespace

float* ThreadScratch(size_t n) { return Grow(t_scratch, n); }

CallBuffer::CallBuffer(size_t n) {
  if (!t_call_busy) {
    data_ = Grow(t_call, n);
    t_call_busy = data_ != nullptr;
  } else {
    data_ = AlignedFloats(n);
    owned_ = true;
  }
}

CallBuffer::~CallBuffer() {
  if (owned_) {
    free(data_);
  } else if (data_ != nullptr) {
    t_call_busy = false;
  }
}

}  // namespace detail
}  // namespace tfk
