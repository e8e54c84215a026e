// tfk-errors: measures each kernel's largest error against a double-precision
// reference on every supported ISA and prints a Markdown table (the
// "Measured" section of docs/numerics.md). Errors are in units of
// u = 2^-24: relative for softmax, GELU erf and SiLU, a share of the bound
// for GELU tanh, absolute in normalised units for the norms (outputs are
// O(1)), relative to |x0| + |x1| of the pair for RoPE, and relative to
// sum_j p_j |v_j| for attention.
#include <tfk/tfk.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

const double kU = std::ldexp(1.0, -24);

std::vector<float> Uniform(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

double Softmax() {
  const size_t rows = 64, cols = 1000;
  std::vector<float> x = Uniform(rows * cols, -10, 10, 1), y(x.size());
  tfk::softmax(rows, cols, x.data(), y.data());
  double worst = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * cols];
    const double m = *std::max_element(xr, xr + cols);
    double sum = 0;
    for (size_t j = 0; j < cols; ++j) sum += std::exp(xr[j] - m);
    for (size_t j = 0; j < cols; ++j) {
      const double ref = std::exp(xr[j] - m) / sum;
      worst = std::max(worst, std::fabs(y[r * cols + j] - ref) / (ref * kU));
    }
  }
  return worst;
}

double Gelu(tfk_activation act) {
  std::vector<float> x;
  for (float v = -14.0f; v <= 10.0f; v += std::fabs(v) * 1e-5f + 1e-6f) x.push_back(v);
  std::vector<float> y(x.size());
  tfk::activate(act, 1, x.size(), x.data(), y.data());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xd = x[i];
    const double u2 = 2 * std::sqrt(2 / M_PI) * (xd + 0.044715 * xd * xd * xd);
    const double ref = act == TFK_ACT_GELU_ERF ? xd * 0.5 * std::erfc(-xd / std::sqrt(2.0))
                       : act == TFK_ACT_SILU   ? xd / (1 + std::exp(-xd))
                                               : xd / (1 + std::exp(-u2));
    if (std::fabs(ref) < 1e-37) continue;  // denormal results: absolute bound
    double err = std::fabs(y[i] - ref) / (std::fabs(ref) * kU);
    // tanh form: as a share of its bound (8 + 6 |2u|) u, which grows with
    // |x| (the exp argument's rounding, and the function's conditioning).
    if (act == TFK_ACT_GELU_TANH) err /= 8 + 6 * std::fabs(u2);
    worst = std::max(worst, err);
  }
  return worst;
}

double Norm(bool layer, float offset) {
  const size_t rows = 64, cols = 1000;
  std::vector<float> x = Uniform(rows * cols, -2, 2, 3), y(x.size());
  for (float& v : x) v = offset + (offset != 0 ? v * 1e-2f : v);
  std::vector<float> g = Uniform(cols, 0.5f, 1.5f, 4), b = Uniform(cols, -1, 1, 5);
  if (layer) {
    tfk::layernorm(rows, cols, x.data(), g.data(), b.data(), 1e-5f, y.data());
  } else {
    tfk::rmsnorm(rows, cols, x.data(), g.data(), 1e-5f, y.data());
  }
  double worst = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * cols];
    double mean = 0, var = 0;
    for (size_t j = 0; j < cols; ++j) mean += xr[j];
    mean = layer ? mean / cols : 0.0;
    for (size_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const double rstd = 1 / std::sqrt(var / cols + 1e-5);
    for (size_t j = 0; j < cols; ++j) {
      const double ref = (xr[j] - mean) * rstd * g[j] + (layer ? b[j] : 0.0);
      worst = std::max(worst, std::fabs(y[r * cols + j] - ref) / kU);
    }
  }
  return worst;
}

double Rope(tfk_rope_pairing pairing) {
  const size_t d = 128, heads = 2;
  const std::vector<int64_t> pos = {0, 7, 4095, 38999, 39001, 123457, 999999, 1000000};
  std::vector<float> x = Uniform(pos.size() * heads * d, -1, 1, 6), y = x;
  tfk::rope({d, d, pairing, 10000.0}, pos.size(), heads, y.data(), 0, pos.data());
  double worst = 0;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (size_t h = 0; h < heads; ++h) {
      for (size_t i = 0; i < d / 2; ++i) {
        const size_t o = (t * heads + h) * d;
        const size_t i0 = pairing == TFK_ROPE_HALF ? o + i : o + 2 * i;
        const size_t i1 = pairing == TFK_ROPE_HALF ? o + i + d / 2 : o + 2 * i + 1;
        const double th = pos[t] * std::pow(10000.0, -2.0 * i / d);
        const double r0 = x[i0] * std::cos(th) - x[i1] * std::sin(th);
        const double r1 = x[i0] * std::sin(th) + x[i1] * std::cos(th);
        const double scale = (std::fabs(x[i0]) + std::fabs(x[i1])) * kU;
        worst = std::max({worst, std::fabs(y[i0] - r0) / scale, std::fabs(y[i1] - r1) / scale});
      }
    }
  }
  return worst;
}

// Causal self-attention, 300 tokens, GQA 4/2, head_dim 64, through both
// kernels (prefill, and one-token decoding against a KV cache): the largest
// |O - r| in units of u sum_j p_j |v_j| (the scale of the bound's rounding
// term, docs/numerics.md).
double Attention(bool decode) {
  const size_t n = 300, h = 4, g = 2, d = 64;
  const std::vector<float> q = Uniform(n * h * d, -1, 1, 7), k = Uniform(n * g * d, -1, 1, 8),
                           v = Uniform(n * g * d, -1, 1, 9);
  std::vector<float> o(n * h * d);
  if (decode) {
    tfk::kv_cache cache(n, g, d);
    for (size_t t = 0; t < n; ++t) {
      tfk::check(tfk_kv_cache_append(cache.get(), 1, &k[t * g * d], g * d, &v[t * g * d], g * d));
      tfk::check(tfk_kv_cache_attention(cache.get(), 1, h, &q[t * h * d], h * d, &o[t * h * d],
                                        h * d, 0.0f, TFK_MASK_CAUSAL));
    }
  } else {
    tfk::attention(n, n, h, g, d, q.data(), k.data(), v.data(), o.data(), TFK_MASK_CAUSAL);
  }
  const double s = static_cast<double>(1.0f / std::sqrt(64.0f));
  double worst = 0;
  std::vector<double> p(n);
  for (size_t t = 0; t < n; ++t) {
    for (size_t hh = 0; hh < h; ++hh) {
      const float* qr = &q[(t * h + hh) * d];
      const size_t gg = hh / (h / g);
      double m = -INFINITY, l = 0;
      for (size_t j = 0; j <= t; ++j) {
        double acc = 0;
        for (size_t c = 0; c < d; ++c) acc += s * qr[c] * k[(j * g + gg) * d + c];
        p[j] = acc;
        m = std::max(m, acc);
      }
      for (size_t j = 0; j <= t; ++j) l += (p[j] = std::exp(p[j] - m));
      for (size_t c = 0; c < d; ++c) {
        double ref = 0, mag = 0;
        for (size_t j = 0; j <= t; ++j) {
          const double vv = v[(j * g + gg) * d + c];
          ref += p[j] / l * vv;
          mag += p[j] / l * std::fabs(vv);
        }
        worst = std::max(worst, std::fabs(o[(t * h + hh) * d + c] - ref) / (mag * kU));
      }
    }
  }
  return worst;
}

}  // namespace

int main() {
  const std::vector<std::pair<std::string, std::function<double()>>> rows = {
      {"softmax [64, 1000], x in [-10, 10] (relative)", Softmax},
      {"GELU erf, x in [-14, 10] (relative)", [] { return Gelu(TFK_ACT_GELU_ERF); }},
      {"GELU tanh, x in [-14, 10] (share of its bound)", [] { return Gelu(TFK_ACT_GELU_TANH); }},
      {"SiLU, x in [-14, 10] (relative)", [] { return Gelu(TFK_ACT_SILU); }},
      {"LayerNorm [64, 1000] (absolute)", [] { return Norm(true, 0.0f); }},
      {"LayerNorm, rows 1e4 + 1e-2 noise (absolute)", [] { return Norm(true, 1e4f); }},
      {"RMSNorm [64, 1000] (absolute)", [] { return Norm(false, 0.0f); }},
      {"RoPE interleaved, positions to 1e6 (relative to the pair size)", [] { return Rope(TFK_ROPE_INTERLEAVED); }},
      {"RoPE half-split, positions to 1e6 (relative to the pair size)", [] { return Rope(TFK_ROPE_HALF); }},
      {"attention, causal 300 x GQA 4/2 x 64, prefill (units of u sum_j p_j abs(v_j))", [] { return Attention(false); }},
      {"attention, same, decoding token by token from a KV cache", [] { return Attention(true); }},
  };
  const std::vector<std::string> isas = tfk::supported_isas();
  std::printf("| max error, units of u = 2^-24 |");
  for (const auto& isa : isas) std::printf(" %s |", isa.c_str());
  std::printf("\n|---|");
  for (size_t i = 0; i < isas.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const auto& row : rows) {
    std::printf("| %s |", row.first.c_str());
    for (const auto& isa : isas) {
      tfk::scoped_max_isa cap(isa);
      std::printf(" %.2f |", row.second());
    }
    std::printf("\n");
  }
  return 0;
}
