// tfk-ab: compares two builds of libtfk in one process, call by call.
//
//   tfk-ab LIB_A|onednn|copy|peak LIB_B|onednn|copy|peak KERNEL DIMS...
//          [--threads T] [--rounds R] [--isa ISA] [--layers L]
//
// KERNEL and DIMS: softmax ROWS COLS, layernorm ROWS COLS, rmsnorm ROWS COLS,
// relu N, gelu_erf N, gelu_tanh N, silu N, add N, linear M K N. LIB_A and
// LIB_B are paths to two copies of the library (each build's
// libtfk.so.X.Y.Z copied to a name of its own: dlopen loads a path once).
// --layers L (linear): each side packs the weights L times and its calls
// take the layers in turn, as a model's layers follow one another, so that
// weights larger than a share of the last-level cache come from memory
// (bench_matmul's _L4 shapes; one layer of 64 MiB a side, 128 MiB in all,
// stays partly in this host's L3).
// Either side may be `onednn` instead of a library: oneDNN's primitive for
// the kernel (tfk_ab_onednn.cc; where configure found oneDNN), so that a
// comparison with the peer is paired round by round too. RMSNorm has none.
// Or `copy`: a copy of the same bytes with streaming stores (tfk_ab_limits.cc),
// the limit of a kernel on inputs from memory, for the kernels of one input
// and one output. Or `peak`: the FMA loop doing linear's flops on the same
// threads (tfk_ab_limits.cc), the limit of a compute-bound matmul, so that
// the share of the peak is measured in the same moments as the matmul. Both
// run on the vectors of the ISA the library side is active on.
// With any of them, each side starts 30 ms after the other ended, once
// OpenMP's spinning workers sleep (bench_util.h, LetPeerThreadsSleep).
//
// On a shared, noisy host two separate runs differ by more than most changes
// do, and so do medians of interleaved repetitions. Here each round times A
// and B back to back, in an order drawn at random, on the same buffers, and
// the figure is the median over rounds of the ratio time(A) / time(B): a
// slow spell of the host hits both sides of a round. It prints each side's
// median rate (GB/s of bytes read and written; GFLOP/s for linear) and the
// median and quartiles of the per-round speedup of B over A. The comments
// in lib/ that quote "medians of per-round ratios" measured this way.
// Each side has buffers of its own, though, and where they come from memory
// their physical pages differ: with packed weights on 4 KiB pages two
// copies of one library measured the second side 4-9 % faster at M = 8
// from memory (on a Xeon, family 6 model 167); on the huge pages they have
// now (lib/memory.h, AllocateLarge), 1 %. Run such comparisons in both
// orders.
#include "tfk_ab.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hwy/aligned_allocator.h"

namespace tfk_ab {
namespace {

struct Lib {
  decltype(&tfk_set_num_threads) set_num_threads;
  decltype(&tfk_set_max_isa) set_max_isa;
  decltype(&tfk_active_isa) active_isa;
  decltype(&tfk_last_error) last_error;
  decltype(&tfk_softmax) softmax;
  decltype(&tfk_layernorm) layernorm;
  decltype(&tfk_rmsnorm) rmsnorm;
  decltype(&tfk_activate) activate;
  decltype(&tfk_add) add;
  decltype(&tfk_linear_create) linear_create;
  decltype(&tfk_linear_forward) linear_forward;
  decltype(&tfk_linear_destroy) linear_destroy;
  std::vector<tfk_linear*> layers;  // linear: --layers handles, taken in turn
  size_t next = 0;
};

[[noreturn]] void Die(const char* what, const char* detail) {
  fprintf(stderr, "tfk-ab: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

template <class F>
void Sym(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (f == nullptr) Die("missing symbol", name);
}

void Load(const char* path, Lib& l) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) Die("cannot load", dlerror());
  Sym(h, "tfk_set_num_threads", l.set_num_threads);
  Sym(h, "tfk_set_max_isa", l.set_max_isa);
  Sym(h, "tfk_active_isa", l.active_isa);
  Sym(h, "tfk_last_error", l.last_error);
  Sym(h, "tfk_softmax", l.softmax);
  Sym(h, "tfk_layernorm", l.layernorm);
  Sym(h, "tfk_rmsnorm", l.rmsnorm);
  Sym(h, "tfk_activate", l.activate);
  Sym(h, "tfk_add", l.add);
  Sym(h, "tfk_linear_create", l.linear_create);
  Sym(h, "tfk_linear_forward", l.linear_forward);
  Sym(h, "tfk_linear_destroy", l.linear_destroy);
}

void Check(const Lib& l, tfk_status s) {
  if (s != TFK_SUCCESS) Die("call failed", l.last_error());
}

[[noreturn]] void Usage() {
  Die("usage",
      "tfk-ab LIB_A|onednn|copy|peak LIB_B|onednn|copy|peak KERNEL DIMS... [--threads T]\n"
      "  [--rounds R] [--isa ISA]\n"
      "  softmax|layernorm|rmsnorm ROWS COLS; relu|gelu_erf|gelu_tanh|silu|add N;\n"
      "  linear M K N [--layers L]");
}

size_t Dim(const char* s) {
  char* end = nullptr;
  const unsigned long long v = strtoull(s, &end, 10);
  if (*s < '1' || *s > '9' || *end != '\0') Usage();
  return static_cast<size_t>(v);
}

double Median(std::vector<double> v, double q = 0.5) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// The library's call for the problem, chosen once (no name compared per
// call); its weights packed first (linear).
std::function<void()> LibCall(Lib& l, const Problem& p, const char* isa) {
  Check(l, l.set_num_threads(p.threads));
  if (isa != nullptr) Check(l, l.set_max_isa(isa));
  if (p.kernel == Kernel::kLinear) {
    l.layers.assign(p.layers, nullptr);
    for (tfk_linear*& h : l.layers) {
      Check(l, l.linear_create(&h, p.K, p.N, p.w, p.N, TFK_LAYOUT_KN, nullptr, TFK_ACT_NONE));
    }
  }
  const size_t rows = p.rows, cols = p.cols;
  switch (p.kernel) {
    case Kernel::kSoftmax:
      return [&l, p, rows, cols] {
        Check(l, l.softmax(rows, cols, p.x, cols, p.y, cols, 1.0f, TFK_MASK_NONE, 0));
      };
    case Kernel::kLayerNorm:
      return [&l, p, rows, cols] {
        Check(l, l.layernorm(rows, cols, p.x, cols, p.gamma, p.beta, 1e-5f, p.y, cols));
      };
    case Kernel::kRmsNorm:
      return [&l, p, rows, cols] {
        Check(l, l.rmsnorm(rows, cols, p.x, cols, p.gamma, 1e-5f, p.y, cols));
      };
    case Kernel::kAdd:
      return [&l, p, cols] { Check(l, l.add(1, cols, p.x, cols, p.b, cols, p.y, cols)); };
    case Kernel::kLinear:
      return [&l, p] {
        tfk_linear* h = l.layers[l.next];
        l.next = l.next + 1 == l.layers.size() ? 0 : l.next + 1;
        Check(l, l.linear_forward(h, p.M, p.x, p.K, p.y, p.N, nullptr, 0));
      };
    case Kernel::kActivation:
      return [&l, p, cols] { Check(l, l.activate(p.act, 1, cols, p.x, cols, p.y, cols)); };
  }
  return {};
}

}  // namespace

#ifndef TFK_AB_ONEDNN
std::function<void()> OneDnnCall(const Problem&, std::string* why) {
  *why = "tfk-ab was built without oneDNN (libdnnl-dev)";
  return {};
}
#endif

}  // namespace tfk_ab

int main(int argc, char** argv) {
  using namespace tfk_ab;
  if (argc < 5) Usage();
  std::vector<std::string> pos;
  int threads = 1, rounds = 31;
  size_t n_layers = 1;
  const char* isa = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = static_cast<int>(Dim(argv[++i]));
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = static_cast<int>(Dim(argv[++i]));
    } else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
      n_layers = Dim(argv[++i]);
    } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      isa = argv[++i];
    } else {
      pos.push_back(argv[i]);
    }
  }
  if (pos.size() < 4) Usage();
  const std::string kernel = pos[2];
  std::vector<size_t> dims;
  for (size_t i = 3; i < pos.size(); ++i) dims.push_back(Dim(pos[i].c_str()));
  Problem p{};
  p.kernel = Kernel::kActivation;
  p.act = TFK_ACT_RELU;
  if (kernel == "softmax") {
    p.kernel = Kernel::kSoftmax;
  } else if (kernel == "layernorm") {
    p.kernel = Kernel::kLayerNorm;
  } else if (kernel == "rmsnorm") {
    p.kernel = Kernel::kRmsNorm;
  } else if (kernel == "add") {
    p.kernel = Kernel::kAdd;
  } else if (kernel == "linear") {
    p.kernel = Kernel::kLinear;
  } else if (kernel == "gelu_erf") {
    p.act = TFK_ACT_GELU_ERF;
  } else if (kernel == "gelu_tanh") {
    p.act = TFK_ACT_GELU_TANH;
  } else if (kernel == "silu") {
    p.act = TFK_ACT_SILU;
  } else if (kernel != "relu") {
    Usage();
  }
  const bool linear = p.kernel == Kernel::kLinear;
  const bool rows_cols = p.kernel == Kernel::kSoftmax || p.kernel == Kernel::kLayerNorm ||
                         p.kernel == Kernel::kRmsNorm;
  if (dims.size() != (linear ? 3u : rows_cols ? 2u : 1u)) Usage();
  if (n_layers != 1 && !linear) Usage();
  const auto is_peer = [](const std::string& s) {
    return s == "onednn" || s == "copy" || s == "peak";
  };
  const bool peer[2] = {is_peer(pos[0]), is_peer(pos[1])};
  if (peer[0] && peer[1]) Usage();
  p.rows = rows_cols ? dims[0] : 1;
  p.cols = rows_cols ? dims[1] : dims[0];
  p.M = linear ? dims[0] : 0, p.K = linear ? dims[1] : 0, p.N = linear ? dims[2] : 0;
  p.layers = n_layers;
  p.threads = threads;

  // Inputs: x (and b for add, W for linear), output y; 64-byte aligned.
  const size_t x_floats = linear ? p.M * p.K : p.rows * p.cols;
  const size_t y_floats = linear ? p.M * p.N : p.rows * p.cols;
  const size_t b_floats = p.kernel == Kernel::kAdd ? x_floats : 1;
  auto x = hwy::AllocateAligned<float>(x_floats), y = hwy::AllocateAligned<float>(y_floats);
  auto b = hwy::AllocateAligned<float>(b_floats);
  auto gamma = hwy::AllocateAligned<float>(p.cols), beta = hwy::AllocateAligned<float>(p.cols);
  if (!x || !y || !b || !gamma || !beta) Die("out of memory", nullptr);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (size_t i = 0; i < x_floats; ++i) x[i] = u(rng);
  for (size_t i = 0; i < b_floats; ++i) b[i] = u(rng);
  for (size_t i = 0; i < p.cols; ++i) {
    gamma[i] = 1.0f + 0.1f * u(rng);
    beta[i] = 0.1f * u(rng);
  }
  std::vector<float> w(linear ? p.K * p.N : 0);
  for (float& v : w) v = 0.05f * u(rng);
  p.x = x.get(), p.y = y.get(), p.b = b.get(), p.gamma = gamma.get(), p.beta = beta.get();
  p.w = w.data();
  double work = 2.0 * 4.0 * static_cast<double>(p.rows * p.cols);  // bytes read and written
  if (p.kernel == Kernel::kAdd) work = 3.0 * 4.0 * static_cast<double>(p.cols);
  if (linear) work = 2.0 * static_cast<double>(p.M) * static_cast<double>(p.K) * p.N;

  Lib libs[2];
  std::function<void()> call[2];
  // The library sides first: a copy or peak side runs on the ISA the library
  // is active on (--isa, else TFK_MAX_ISA or the best the CPU has).
  std::string active;
  for (int side = 0; side < 2; ++side) {
    if (peer[side]) continue;
    Load(pos[side].c_str(), libs[side]);
    call[side] = LibCall(libs[side], p, isa);
    active = libs[side].active_isa();
  }
  for (int side = 0; side < 2; ++side) {
    if (!peer[side]) continue;
    std::string why;
    call[side] = pos[side] == "onednn" ? OneDnnCall(p, &why)
                 : pos[side] == "copy" ? CopyCall(p, active.c_str(), &why)
                                       : PeakCall(p, active.c_str(), &why);
    if (!call[side]) Die(pos[side].c_str(), why.c_str());
  }
  const bool with_peer = peer[0] || peer[1];

  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // With a peer, every timing starts 30 ms after the last call of either
  // side, once OpenMP's workers sleep.
  const auto rest = [&] {
    if (with_peer) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  };
  const auto seconds = [&](int side, int calls) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call[side]();
    const double s = since(t0);
    rest();
    return s;
  };
  for (int side = 0; side < 2; ++side) {  // first touch, scratch; every layer once
    for (size_t i = 0; i < n_layers; ++i) call[side]();
    rest();
  }
  // Calls per timing: about 50 ms of the first side, from the calls that
  // fill 10 ms (a single call can be slow to start: a peer's threads wake).
  int n = 0;
  const auto t0 = Clock::now();
  do {
    call[0]();
    ++n;
  } while (since(t0) < 0.01);
  const int calls = std::max(1, static_cast<int>(0.05 * n / since(t0)));
  rest();

  std::vector<double> ratio, rate[2];
  for (int r = 0; r < rounds; ++r) {
    double t[2];
    const int first = static_cast<int>(rng() & 1);
    for (int k = 0; k < 2; ++k) {
      const int side = k ^ first;
      t[side] = seconds(side, calls) / calls;
    }
    ratio.push_back(t[0] / t[1]);
    for (int side = 0; side < 2; ++side) rate[side].push_back(work / t[side] / 1e9);
  }
  const char* unit = linear ? "GFLOP/s" : "GB/s";
  const auto label_of = [](const std::string& side) -> std::string {
    return side == "onednn" ? " (oneDNN)"
           : side == "copy" ? " (copy)"
           : side == "peak" ? " (peak)"
                            : "";
  };
  const std::string label[2] = {label_of(pos[0]), label_of(pos[1])};
  printf("%s", kernel.c_str());
  for (size_t d : dims) printf(" %zu", d);
  if (n_layers > 1) printf(" (%zu layers)", n_layers);
  printf(
      ", %d thread%s, %d rounds of %d calls: A%s %.3g %s, B%s %.3g %s; B / A speedup: median "
      "%.3f (quartiles %.3f-%.3f)\n",
      threads, threads == 1 ? "" : "s", rounds, calls, label[0].c_str(), Median(rate[0]), unit,
      label[1].c_str(), Median(rate[1]), unit, Median(ratio), Median(ratio, 0.25),
      Median(ratio, 0.75));
  for (Lib& l : libs) {
    for (tfk_linear* h : l.layers) l.linear_destroy(h);
  }
  return 0;
}
