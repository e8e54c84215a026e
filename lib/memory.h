// Memory helpers shared by kernels: when to bypass the caches on stores, and
// a per-thread scratch buffer.
#ifndef TFK_LIB_MEMORY_H_
#define TFK_LIB_MEMORY_H_

#include <stddef.h>

namespace tfk {
namespace detail {

// The size past which a call writes its output with non-temporal
// (streaming) stores: half the last-level cache (sysfs, else sysconf; at
// most 64 MiB per CPU sharing it, which a VM shown its host's L3 would
// exceed; 16 MiB if unknown). A streaming store skips the read-for-ownership
// a normal store does: an out-of-place pass moves 2 bytes per byte written
// instead of 3. Decoding attention reads K and V at least this large as 4
// streams. The environment variable TFK_STREAM_THRESHOLD (bytes) overrides
// it.
size_t StreamThresholdBytes();

// Whether a call writes its output with streaming stores (activations,
// tfk_add, the norms): the bytes it reads from buffers other than its output
// and the bytes it writes together reach StreamThresholdBytes(). They had
// compared the output alone, which left calls of 32-63 MiB of output and as
// much input on ordinary stores although their data did not stay in the
// cache between calls: one Xeon (family 6 model 207, 2 vCPUs shown 260 MiB
// of L3, so a 64 MiB threshold), medians of per-round ratios over 21-41
// rounds, 1 / 2 threads: ReLU on 8 Mi floats +46 / +37 %, tfk_add on 8 Mi
// and 6 Mi floats +96 / +76 % and +52 / +42 %, LayerNorm [2048, 4096] +38 /
// +37 %, RMSNorm +63 / +73 %; GELU-erf (bound by its arithmetic) the same;
// calls that stayed under the threshold (LayerNorm [1536, 4096], RMSNorm
// [1024, 4096]) or were past it either way (ReLU on 16 Mi floats) the same.
// Softmax keeps comparing its output alone (lib/softmax.cc): counted with
// its input, [16384, 512] streamed lost 9 / 19 %.
inline bool StreamOutput(size_t in_bytes, size_t out_bytes) {
  const size_t threshold = StreamThresholdBytes();  // in + out may pass SIZE_MAX
  return out_bytes >= threshold || in_bytes >= threshold - out_bytes;
}

// The L1 data cache and the L2 cache of one core in bytes (sysconf; 32 and
// 512 KiB if unknown).
size_t L1dCacheBytes();
size_t L2CacheBytes();

// Whether decoding's one-query tiles, which read K and V from memory as 4
// interleaved streams (lib/attention-inl.h, `spread`), also ask for lines
// ahead in software. Not on AMD cores with AVX-512 (Zen 4 and later), where
// the hardware prefetchers alone did better: one Zen 4 core, 1 query x 32
// heads against a KV cache of 8192 / 2048 tokens, medians of per-round
// ratios over 21 rounds: fp32 +18 / +24 %, bf16 +14 / +16 %; two threads
// +11-24 %. Elsewhere the prefetches were measured to help (docs/attention.md)
// and stay. The environment variable TFK_DECODE_PREFETCH (0 or 1) overrides.
bool DecodeSpreadPrefetch();

// Whether the matmul's packed A, where a call's tasks share a piece of it
// (fewer M chunks than tasks, as at M = 64 on two threads), is written with
// streaming stores (lib/matmul-inl.h, PackATileTransposed). Yes on AMD
// cores with AVX-512 (Zen 4 and later; packed A is AVX-512 only): stored in
// place there, each line, read by both cores in the previous call, had
// first to be taken back from the other core (two Zen 4 cores, M = 64, K =
// 4096, N = 1024 +3 to +20 % streamed). No elsewhere: on a Xeon (family 6
// model 167) the pieces read back from memory cost more than the transfer,
// two threads, medians of per-round ratios over 15-21 rounds, unstreamed:
// M = 64, K = 4096, N = 1024 +4.6-4.8 %; M = 64, K = 1024, N = 4096 +3.3 %;
// M = 130, K = N = 1024 +5.2 %; M = 256, K = N = 4096 +2.8 %. The
// environment variable TFK_STREAM_PACKED_A (0 or 1) overrides.
bool StreamSharedPackedA();

// Whether the AVX-512 matmul's tasks pack A each for themselves where they
// are at most two to an M chunk (lib/matmul.cc, Gemm), rather than into one
// buffer all the call's tasks read. Yes unless the environment variable
// TFK_PACK_A_PER_TASK is 0 (the tests run both).
bool PackAPerTask();

// Whether a decoding matmul tile of at most 4 rows that runs as the call's
// only task prefetches the next panel of packed weights while it reads its
// own, where panels are long (more than kShortPanelK k-steps; lib/matmul.cc,
// GemmPlan::next_panel). Yes on AMD cores with AVX-512, where it was
// measured to help (one Zen 4 core, K = N = 4096, M = 4: +6-22 %). No
// elsewhere: on a Xeon (family 6 model 167), K = N = 4096, one thread,
// medians of per-round ratios in both orders, without it: M = 2 / 3 / 4
// +12 / +42 / +30 % with weights read from memory (4 layers of 64 MiB
// called in turn), M = 3 / 4 +8 / +10 % with one layer's weights partly
// cached; K = 4096, N = 1024, M = 4 +28 %; AVX2's M = 2 / 3 +35 / -2 %
// from memory. (With more rows the results were mixed there, so they keep
// it: from memory M = 5-14 gained 1-14 % without it, but with cached
// weights M = 8 / 10 lost 20 / 17 %.) Since these runs, AVX-512's tiles of
// 2-12 rows read several panels at once (lib/matmul-inl.h) and prefetch no
// next panel; the choice now concerns the panels left over by them and
// AVX2's tiles. The environment variable TFK_DECODE_NEXT_PANEL (0 or 1)
// overrides.
bool DecodeNextLongPanel();

// Whether the AVX-512 decoding tiles of 2-12 rows that read several panels
// at once (lib/matmul-inl.h, TileRowPanels) prefetch their panels into L1
// (prefetcht0) rather than into L2 only (prefetcht1). Into L1 except on
// AMD cores with AVX-512, where the one-panel decoding tile had measured L2
// faster (one Zen 4 core, K = N = 4096: M = 8 +19-25 %, M = 4 +18 %). On a
// Xeon (family 6 model 167), medians of per-round ratios of two library
// copies over 11 rounds, into L1 8 k-steps ahead against into L2 24-36
// k-steps ahead (lib/matmul-inl.h, kRowPanelsPrefetchL1): K = N = 4096,
// weights from memory (4 layers of 64 MiB in turn), M = 2 / 4 / 6 / 8 / 12
// +4 / +8 / +6 / +11 / +2 %, two threads +3 / +8 / +10 / +13 / +5 %; one
// layer, in L3, M = 8 0 / -11 %; K = N = 1024 (in cache) M = 4 +2 / +6 %,
// M = 12 -4 / -2 %. The environment variable TFK_DECODE_PREFETCH_L1 (0 or
// 1) overrides.
bool DecodePrefetchToL1();

// Memory for a large buffer that a handle owns and kernels read again and
// again, often from memory: packed weights (tfk_linear), KV caches. 64-byte
// aligned; from kHugePageBytes on, aligned to kHugePageBytes, and its whole
// 2 MiB pages advised as transparent huge pages (madvise MADV_HUGEPAGE, on
// Linux; the kernel honours it where
// /sys/kernel/mm/transparent_hugepage/enabled is `madvise` or `always`, and
// falls back to 4 KiB pages where it finds no free 2 MiB). The last partial
// 2 MiB keeps 4 KiB pages, so no memory is added. Free with free(); null if
// the allocation fails.
// Why: a decoding matmul reads its weights as several streams (3 panels,
// 512 KiB apart, at M = 7-12), each crossing a 4 KiB page every 32 k-steps;
// on 2 MiB pages the walks and the streams' restarts at page boundaries
// mostly go. One Xeon (family 6 model 167), tfk-ab pairing the library with
// and without, medians of per-round ratios over 15 rounds in both orders,
// K = N = 4096 from memory (4 layers of 64 MiB): M = 8 +20 / +22 %, two
// threads +8 / +10 %; M = 4 +9 / +13 %; M = 1 +1-2 %; K = N = 1024 (16
// layers) M = 8 +16 / +20 %; M = 64 and 512 +0.5-1 %. Decoding attention
// (tfk_bench, builds alternated twice, 8192 tokens): 32 KV heads f32 / bf16
// +1-2 / +3-8 %, 8 KV heads +18-42 / +10-13 %. On 4 KiB pages, two copies of
// one library paired this way had measured the second one loaded 4-9 %
// faster at M = 8 from memory (where its weights landed in physical memory);
// on 2 MiB pages 1 %.
void* AllocateLarge(size_t bytes);
constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whether AllocateLarge advises huge pages: yes unless the environment
// variable TFK_HUGE_PAGES is 0.
bool HugePages();

// A 64-byte aligned buffer of at least n floats owned by the calling thread.
// Grows when asked for more (an allocation only the first time a thread sees
// a larger size), so kernels in steady state allocate nothing. Returns null
// if the allocation fails. Growing frees the old buffer, so a task body that
// holds it must not enter TBB's scheduler (a nested parallel loop, a wait)
// while it does: the thread could then run another body that grows it. No
// body does; PackedPiece waits with a plain yield for that reason too.
float* ThreadScratch(size_t n);

// n floats (64-byte aligned) for state one call shares between its tasks,
// such as partial results merged after a parallel loop. Each thread keeps a
// second buffer for this; if it is already held (a tfk call inside another
// on one thread, which the isolated wait of lib/threading.cc rules out for
// TBB's waits), a fresh one is allocated. get() is null if memory ran out.
class CallBuffer {
 public:
  explicit CallBuffer(size_t n);
  ~CallBuffer();
  CallBuffer(const CallBuffer&) = delete;
  CallBuffer& operator=(const CallBuffer&) = delete;
  float* get() const { return data_; }

 private:
  float* data_ = nullptr;
  bool owned_ = false;  // allocated here, not the thread's buffer
};

}  // namespace detail
}  // namespace tfk

#endif  // TFK_LIB_MEMORY_H_
