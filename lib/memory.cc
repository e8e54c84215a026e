#include "lib/memory.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tfk {
namespace detail {

namespace {
struct CacheInfo {
  size_t bytes = 0;  // 0: unknown
  size_t cpus = 0;   // CPUs that share it, 0: unknown
};

// CPUs in a sysfs CPU list such as "0-3,8,10-11".
size_t CountCpuList(const char* list) {
  size_t count = 0;
  const char* p = list;
  while (*p != '\0' && *p != '\n') {
    char* end = nullptr;
    const unsigned long first = strtoul(p, &end, 10);
    if (end == p) return 0;
    unsigned long last = first;
    p = end;
    if (*p == '-') {
      last = strtoul(p + 1, &end, 10);
      if (end == p + 1 || last < first) return 0;
      p = end;
    }
    count += last - first + 1;
    if (*p == ',') ++p;
  }
  return count;
}

// The highest-level cache Linux reports for CPU 0 in sysfs: its size and
// how many CPUs share it. Inside a VM, glibc's sysconf(_SC_LEVEL3_CACHE_SIZE)
// can report the host's L3 from CPUID (64 MiB on one 2-core VM where sysfs
// shows the 8 MiB the VM is given), so sysfs comes first.
CacheInfo SysfsLastLevelCache() {
  CacheInfo best;
  size_t best_level = 0;
  for (int index = 0; index < 8; ++index) {
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
    FILE* f = fopen(path, "r");
    if (f == nullptr) break;
    unsigned level = 0;
    const bool have_level = fscanf(f, "%u", &level) == 1;
    fclose(f);
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    f = fopen(path, "r");
    if (f == nullptr) continue;
    unsigned long long value = 0;
    char unit = 0;
    const int got = fscanf(f, "%llu%c", &value, &unit);
    fclose(f);
    if (!have_level || got < 1 || level < best_level) continue;
    const unsigned long long scale = unit == 'K' ? 1ull << 10 : unit == 'M' ? 1ull << 20 : 1;
    best_level = level;
    best.bytes = static_cast<size_t>(value * scale);
    best.cpus = 0;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list",
             index);
    f = fopen(path, "r");
    if (f != nullptr) {
      char list[256];
      if (fgets(list, sizeof(list), f) != nullptr) best.cpus = CountCpuList(list);
      fclose(f);
    }
  }
  return best;
}

// A VM can be shown its host's whole last-level cache, of which its vCPUs
// get a share: one 2-vCPU Xeon VM (family 6 model 167) reports 480 MiB of
// L3, whose reads fall off between 64 and 256 MiB (26 -> 14 GB/s). No x86
// part has more than ~16 MiB of L3 per core (6-core X3D parts), so more
// than kMaxLlcPerCpu per CPU sharing it is taken as that much. There, against the 240 MiB that half
// the reported size gave, a 64 MiB threshold (this cap) ran the activations
// on 16 Mi floats 1.24-1.79x as fast (1 and 2 threads, two rounds each) and
// decoding attention on a 128 MiB bf16 cache 1.20-1.77x, and on a 64 MiB
// fp32 cache, now read as 4 streams, 3-9 % slower; the kernels whose sizes
// did not cross it the same within noise. A 16 MiB threshold cost softmax
// [8192, 512] 23-27 %, whose 32 MiB of input and output stay in that cache
// from call to call.
constexpr size_t kMaxLlcPerCpu = size_t{64} << 20;
}  // namespace

namespace {
// The size sysconf gives for a cache (name: _SC_LEVEL*_CACHE_SIZE), or
// `fallback` if it gives none.
size_t SysconfCacheBytes(int name, size_t fallback) {
  const long answer = name >= 0 ? sysconf(name) : -1;
  return answer > 0 ? static_cast<size_t>(answer) : fallback;
}

#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
constexpr int kL1dName = _SC_LEVEL1_DCACHE_SIZE, kL2Name = _SC_LEVEL2_CACHE_SIZE;
#else
constexpr int kL1dName = -1, kL2Name = -1;
#endif
}  // namespace

size_t L1dCacheBytes() {
  static const size_t bytes = SysconfCacheBytes(kL1dName, size_t{32} << 10);
  return bytes;
}

size_t L2CacheBytes() {
  static const size_t bytes = SysconfCacheBytes(kL2Name, size_t{512} << 10);
  return bytes;
}

size_t StreamThresholdBytes() {
  static const size_t threshold = [] {
    // TFK_STREAM_THRESHOLD (bytes) overrides; tests use it to exercise the
    // streaming paths on small data.
    // Digits only: strtoull would take "-1" as its largest value, and clamp
    // what overflows to it, either turning streaming off for good.
    const char* env = getenv("TFK_STREAM_THRESHOLD");
    if (env != nullptr && env[0] != '\0') {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = strtoull(env, &end, 10);
      if (isdigit(static_cast<unsigned char>(env[0])) && *end == '\0' && errno == 0 &&
          v <= SIZE_MAX) {
        return static_cast<size_t>(v);
      }
      fprintf(stderr, "tfk: ignoring TFK_STREAM_THRESHOLD=%s (want a number of bytes)\n", env);
    }
    CacheInfo llc = SysfsLastLevelCache();
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (llc.bytes == 0) {
      const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
      llc.bytes = l3 > 0 ? static_cast<size_t>(l3) : 0;
      llc.cpus = 0;
    }
#endif
    if (llc.bytes == 0) return size_t{16} << 20;
    if (llc.cpus == 0) {
      const long online = sysconf(_SC_NPROCESSORS_ONLN);
      llc.cpus = online > 0 ? static_cast<size_t>(online) : 1;
    }
    if (llc.bytes / llc.cpus > kMaxLlcPerCpu) llc.bytes = kMaxLlcPerCpu * llc.cpus;
    return llc.bytes / 2;
  }();
  return threshold;
}

namespace {
// TFK_... = 0 or 1 from the environment, else the default.
bool EnvBool(const char* name, bool default_value) {
  const char* env = getenv(name);
  if (env != nullptr && env[0] != '\0') {
    if (env[0] == '0' && env[1] == '\0') return false;
    if (env[0] == '1' && env[1] == '\0') return true;
    fprintf(stderr, "tfk: ignoring %s=%s (want 0 or 1)\n", name, env);
  }
  return default_value;
}

bool AmdWithAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // in case tfk is called from a static constructor
  return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}
}  // namespace

bool DecodeSpreadPrefetch() {
  static const bool prefetch = EnvBool("TFK_DECODE_PREFETCH", !AmdWithAvx512());
  return prefetch;
}

bool StreamSharedPackedA() {
  static const bool stream = EnvBool("TFK_STREAM_PACKED_A", AmdWithAvx512());
  return stream;
}

bool PackAPerTask() {
  static const bool per_task = EnvBool("TFK_PACK_A_PER_TASK", true);
  return per_task;
}

bool DecodeNextLongPanel() {
  static const bool next = EnvBool("TFK_DECODE_NEXT_PANEL", AmdWithAvx512());
  return next;
}

bool DecodePrefetchToL1() {
  static const bool l1 = EnvBool("TFK_DECODE_PREFETCH_L1", !AmdWithAvx512());
  return l1;
}

bool HugePages() {
  static const bool huge = EnvBool("TFK_HUGE_PAGES", true);
  return huge;
}

void* AllocateLarge(size_t bytes) {
  if (bytes > SIZE_MAX - kHugePageBytes) return nullptr;
  if (bytes < kHugePageBytes || !HugePages()) return aligned_alloc(64, (bytes + 63) / 64 * 64);
  // aligned_alloc wants a multiple of the alignment; the pages past `bytes`
  // are never touched, so they take no memory.
  void* p = aligned_alloc(kHugePageBytes, (bytes + kHugePageBytes - 1) / kHugePageBytes *
                                              kHugePageBytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: a kernel without transparent huge pages refuses it (EINVAL)
  // and the buffer keeps 4 KiB pages, as does any range it finds no free
  // 2 MiB for.
  if (p != nullptr) (void)madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  return p;
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
