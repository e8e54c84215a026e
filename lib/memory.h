// Memory helpers shared by kernels: when to bypass the caches on stores, and
// a per-thread scratch buffer.
#ifndef TFK_LIB_MEMORY_H_
#define TFK_LIB_MEMORY_H_

#include <stddef.h>

namespace tfk {
namespace detail {

// Outputs at least this large are written with non-temporal (streaming)
// stores: the last-level cache size (sysconf), or 32 MiB if unknown. Such an
// output cannot stay in cache for its consumer anyway, and a streaming store
// skips the read-for-ownership a normal store does, so an out-of-place pass
// moves 2 bytes per byte written instead of 3. The environment variable
// TFK_STREAM_THRESHOLD (bytes) overrides it.
size_t StreamThresholdBytes();

// A 64-byte aligned buffer of at least n floats owned by the calling thread.
// Grows when asked for more (an allocation only the first time a thread sees
// a larger size), so kernels in steady state allocate nothing. Returns null
// if the allocation fails.
float* ThreadScratch(size_t n);

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_MEMORY_H_
