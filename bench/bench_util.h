// Benchmark helpers: every tfk kernel is registered once per ISA the CPU
// supports (the ISA is capped through the library's own tfk_set_max_isa, so
// all targets run in one binary) and per thread count (1 and all cores).
// Labels follow "kernel/shape/ISA/threads:T", e.g. softmax/32768x2048/AVX2/threads:1.
// Counters: bytes_per_second = bytes read + written.
#ifndef TFK_BENCH_BENCH_UTIL_H_
#define TFK_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>
#include <tfk/tfk.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace tfk_bench {

// 64-byte aligned float buffer filled with uniform values in [lo, hi].
struct Floats {
  explicit Floats(size_t n, float lo = -4.0f, float hi = 4.0f) : n(n) {
    p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (size_t i = 0; i < n; ++i) p[i] = dist(rng);
  }
  ~Floats() { std::free(p); }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  float* data() { return p; }
  size_t n;
  float* p;
};

// A peer that runs on OpenMP (oneDNN, built with libgomp here) leaves its
// workers spinning after a call: libgomp's GOMP_SPINCOUNT is 300,000 pause
// loops by default, ~10 ms, on a core the next benchmark wants. Its
// benchmarks end by waiting until they sleep, outside the timed loop, so
// that every benchmark starts with its pool's workers asleep (TBB's sleep
// within microseconds). On a 2-vCPU Xeon (family 6 model 167), medians of
// 5, two threads: tfk's M = 2048, K = 4096, N = 1024 ran 416 GFLOP/s alone,
// 393 interleaved with oneDNN, 406-410 with this wait (with OpenBLAS, whose
// pthreads yield while they wait, 419); GELU-tanh on 256 Ki floats, tfk /
// oneDNN 1.84-1.86 without the wait and 1.94-1.95 with it, mostly because
// oneDNN no longer starts a benchmark with the previous one's workers awake.
inline void LetPeerThreadsSleep() {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
}

inline std::vector<int> ThreadCounts() {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  if (all <= 1) return {1};
  return {1, all};
}

using Runner = std::function<void()>;
using Setup = std::function<Runner()>;

// Registers body(state) per supported ISA and thread count, as "name/ISA/
// threads:T", with tfk capped at the ISA and split into T tasks while it
// runs; body times its own loop and sets its own counters.
inline void RegisterPerIsaState(const std::string& name, benchmark::TimeUnit unit,
                                std::function<void(benchmark::State&)> body) {
  for (const std::string& isa : tfk::supported_isas()) {
    for (int threads : ThreadCounts()) {
      const std::string label = name + "/" + isa + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(label.c_str(), [=](benchmark::State& state) {
        tfk::scoped_max_isa cap(isa);
        tfk::set_num_threads(threads);
        body(state);
        state.SetLabel(isa);
        tfk::set_num_threads(0);
      })->UseRealTime()->Unit(unit);
    }
  }
}

// Per ISA and thread count: runs `setup()` once per benchmark run and times
// `run()`; `bytes` moved per run.
inline void RegisterPerIsa(const std::string& name, double bytes, Setup setup) {
  RegisterPerIsaState(name, benchmark::kMicrosecond, [=](benchmark::State& state) {
    Runner run = setup();
    for (auto _ : state) run();
    state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  });
}

// GFLOPS counter: `flops` per iteration, as a rate.
inline void SetGflops(benchmark::State& state, double flops) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// For peers and machine limits: registered per thread count only. `bytes`
// moved per iteration, or 0 where body sets its own counters.
inline void RegisterPerThreads(const std::string& name, double bytes,
                               std::function<void(benchmark::State&, int)> body) {
  for (int threads : ThreadCounts()) {
    const std::string label = name + "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(label.c_str(), [=](benchmark::State& state) {
      body(state, threads);
      if (bytes > 0) state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
    })->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace tfk_bench

#endif  // TFK_BENCH_BENCH_UTIL_H_
