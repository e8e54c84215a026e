// tfk-info: what tfk does on this CPU. Prints the compiled, supported and
// active ISAs, the thread count, and a short throughput table (GB/s of bytes
// read + written, best of several runs; GFLOP/s for the linear layer and
// attention prefill) of the kernels (row kernels, packed matmul at prefill
// and decoding shapes, causal attention, KV-cache decoding) on every
// supported ISA up to the active one (TFK_MAX_ISA caps it) at 1 and all
// threads; below them the machine's limits on the same columns, a copy of
// the same bytes and the FMA peak (bench/limit_loops.h), so that each row
// reads as a share of one. For careful figures use tfk_bench and tfk-ab.
// `tfk-info --isas` prints the ISA lines only.
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>
#include <tfk/tfk.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "limit_loops.h"

namespace {

struct Kernel {
  const char* name;
  const char* shape;
  double bytes;
  std::function<void()> run;
};

double BestSeconds(const std::function<void()>& run) {
  run();  // warm up
  double best = 1e30;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
  for (int rep = 0; rep < 50 && (rep < 3 || std::chrono::steady_clock::now() < deadline); ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

using Arena = oneapi::tbb::task_arena;

// fn(part) for part < t, one part a thread of an arena of t threads.
void OnThreads(Arena& arena, int t, const std::function<void(int)>& fn) {
  arena.execute([&] {
    oneapi::tbb::parallel_for(
        0, t, [&](int part) { fn(part); }, oneapi::tbb::static_partitioner());
  });
}

// One row of a limit on the kernels' columns: rate(target, t, arena) for
// each ISA's Highway target and thread count, in an arena of t threads; "-"
// where the ISA has no loop here (none expected: the loops are built for the
// library's targets).
void PrintLimitRow(const char* name, const char* shape, const std::vector<std::string>& isas,
                   const std::vector<int>& threads,
                   const std::function<double(int64_t, int, Arena&)>& rate) {
  std::printf("%-15s %-14s", name, shape);
  for (const auto& isa : isas) {
    const int64_t target = tfk_bench::SupportedTarget(isa.c_str());
    for (int t : threads) {
      if (target == 0) {
        std::printf(" %11s", "-");
        continue;
      }
      Arena arena(t);
      std::printf(" %11.2f", rate(target, t, arena));
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

// The limits' rows: a copy of n floats (src to dst, the bytes of the row
// kernels: the best of memcpy and the copy with streaming stores, with and
// without prefetching) in GB/s of bytes read + written, and the FMA peak in
// GFLOP/s, each on the ISA's own vectors.
void PrintLimits(const std::vector<std::string>& isas, const std::vector<int>& threads,
                 const float* src, float* dst, size_t n) {
  PrintLimitRow("copy (limit)", "8 MiB", isas, threads, [&](int64_t target, int t, Arena& arena) {
    const auto pass = [&](int way) {
      OnThreads(arena, t, [&](int part) { tfk_bench::CopyPart(target, src, dst, n, part, t, way); });
    };
    double best = 1e30;
    for (int way = 0; way < 3; ++way) best = std::min(best, BestSeconds([&] { pass(way); }));
    return 2.0 * n * sizeof(float) / best / 1e9;
  });
  PrintLimitRow("FMA peak GF/s", "registers", isas, threads,
                [&](int64_t target, int t, Arena& arena) {
                  const tfk_bench::LoopFn fma = tfk_bench::FmaLoopFor(target);
                  std::vector<double> flops(t);
                  const double s = BestSeconds([&] {
                    OnThreads(arena, t, [&](int part) {
                      float sink;
                      flops[part] = fma(size_t{1} << 16, &sink);
                      volatile float keep = sink;  // the loop's result is used
                      (void)keep;
                    });
                  });
                  double total = 0;
                  for (double f : flops) total += f;
                  return total / s / 1e9;
                });
}

}  // namespace

int main(int argc, char** argv) {
  const bool isas_only = argc > 1 && std::string(argv[1]) == "--isas";
  std::printf("tfk %s\n", tfk_version());
  std::string compiled, supported;
  for (const auto& s : tfk::compiled_isas()) compiled += " " + s;
  const std::vector<std::string> all_isas = tfk::supported_isas();  // best first
  for (const auto& s : all_isas) supported += " " + s;
  const std::string active = tfk_active_isa();
  std::printf("compiled ISAs: %s\nsupported ISAs on this CPU: %s\nactive ISA:  %s%s\n",
              compiled.c_str(), supported.c_str(), active.c_str(),
              all_isas.empty() || all_isas.front() == active ? "" : " (capped: TFK_MAX_ISA)");
  // The table honours the cap: the active ISA and the supported ones below it.
  std::vector<std::string> isas(std::find(all_isas.begin(), all_isas.end(), active), all_isas.end());
  if (isas.empty()) isas = {active};
  const int all = tfk::num_threads();
  std::printf("threads: %d (TFK_NUM_THREADS / tfk_set_num_threads to change)\n", all);
  if (isas_only) return 0;  // `tfk-info --isas`: no throughput table
  std::printf("\n");

  const size_t rows = 1024, cols = 2048, n = rows * cols;  // 8 MiB per operand
  std::vector<float> x(n), y(n), g(cols, 1.0f), b(cols, 0.0f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (float& v : x) v = dist(rng);
  const double rw = 2.0 * n * sizeof(float);
  const tfk::rope_config rope{128, 128, TFK_ROPE_HALF, 10000.0};
  const tfk::linear lin(1024, 1024, x.data());          // weights packed once
  const tfk::linear lin_decode(2048, 1024, x.data());
  tfk::kv_cache cache(2048, 8, 128);
  tfk::check(tfk_kv_cache_append(cache.get(), 2048, x.data(), 1024, x.data(), 1024));
  const std::vector<Kernel> kernels = {
      {"softmax", "1024x2048", rw, [&] { tfk::softmax(rows, cols, x.data(), y.data(), 0.125f); }},
      {"softmax causal", "1024x2048", rw,
       [&] { tfk::softmax(rows, cols, x.data(), y.data(), 0.125f, TFK_MASK_CAUSAL, rows); }},
      {"relu", "2M", rw, [&] { tfk::activate(TFK_ACT_RELU, 1, n, x.data(), y.data()); }},
      {"gelu erf", "2M", rw, [&] { tfk::activate(TFK_ACT_GELU_ERF, 1, n, x.data(), y.data()); }},
      {"gelu tanh", "2M", rw, [&] { tfk::activate(TFK_ACT_GELU_TANH, 1, n, x.data(), y.data()); }},
      {"silu", "2M", rw, [&] { tfk::activate(TFK_ACT_SILU, 1, n, x.data(), y.data()); }},
      {"add", "2M", 3.0 * n * 4, [&] { tfk::add(1, n, x.data(), x.data(), y.data()); }},
      {"layernorm", "1024x2048", rw,
       [&] { tfk::layernorm(rows, cols, x.data(), g.data(), b.data(), 1e-5f, y.data()); }},
      {"rmsnorm", "1024x2048", rw, [&] { tfk::rmsnorm(rows, cols, x.data(), g.data(), 1e-5f, y.data()); }},
      {"rope half", "512x32x128", rw, [&] { tfk::rope(rope, 512, 32, y.data(), 100); }},
      // Matmul rows report GFLOP/s (2 M N K) instead of GB/s.
      {"linear GFLOP/s", "512x1024x1024", -2.0 * 512 * 1024 * 1024,
       [&] { lin.forward(512, x.data(), y.data()); }},
      {"linear GFLOP/s", "1x2048x1024", -2.0 * 1 * 2048 * 1024,
       [&] { lin_decode.forward(1, x.data(), y.data()); }},
      // Causal self-attention, 512 tokens x 8 heads x 128 (x as Q, K and V):
      // GFLOP/s over the unmasked half; decoding one token of 8 heads from an
      // fp32 KV cache of 2048 tokens: GB/s of cache read.
      {"attention GF/s", "512x8x128", -4.0 * 512 * 512 * 128 * 8 / 2,
       [&] {
         tfk::attention(512, 512, 8, 8, 128, x.data(), x.data() + 1, x.data() + 2, y.data(),
                        TFK_MASK_CAUSAL);
       }},
      {"kv decode", "2048x8x128", 2.0 * 2048 * 8 * 128 * 4,
       [&] { tfk::check(tfk_kv_cache_attention(cache.get(), 1, 8, x.data(), 1024, y.data(), 1024,
                                               0.0f, TFK_MASK_NONE)); }},
  };

  std::printf("%-15s %-14s", "kernel (GB/s)", "shape");
  std::vector<int> threads = {1};
  if (all > 1) threads.push_back(all);
  for (const auto& isa : isas) {
    for (int t : threads) std::printf(" %8s/%-2d", isa.c_str(), t);
  }
  std::printf("\n");
  for (const Kernel& k : kernels) {
    std::printf("%-15s %-14s", k.name, k.shape);
    for (const auto& isa : isas) {
      tfk::scoped_max_isa cap(isa);
      for (int t : threads) {
        tfk::set_num_threads(t);
        std::printf(" %11.2f", std::abs(k.bytes) / BestSeconds(k.run) / 1e9);
        std::fflush(stdout);
      }
      tfk::set_num_threads(0);
    }
    std::printf("\n");
  }
  PrintLimits(isas, threads, x.data(), y.data(), n);
  return 0;
}
