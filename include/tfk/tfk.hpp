// tfk: thin C++17 layer over the C API (tfk.h). Each function calls its C
// counterpart and throws tfk::error, carrying the status and the same message,
// when it fails. Semantics are those of tfk.h, and so is argument order,
// except that optional arguments with defaults come last, leading
// dimensions last of all (matmul: layout, alpha, beta, lda, ldb, ldc;
// softmax: scale, mask, q_len, ldx, ldy; attention: mask, scale), and rope
// takes its head_dim, rotary_dim, pairing and base as one rope_config
// first.
#ifndef TFK_TFK_HPP_
#define TFK_TFK_HPP_

#include <tfk/tfk.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tfk {

class error : public std::runtime_error {
 public:
  error(tfk_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  tfk_status status() const noexcept { return status_; }

 private:
  tfk_status status_;
};

inline void check(tfk_status status) {
  if (status != TFK_SUCCESS) throw error(status, tfk_last_error());
}

// ---- ISA and threads ----
inline std::vector<std::string> compiled_isas() {
  std::vector<std::string> names;
  for (size_t i = 0; i < tfk_isa_count(); ++i) names.emplace_back(tfk_isa_name(i));
  return names;
}
inline std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (const std::string& n : compiled_isas())
    if (tfk_isa_supported(n.c_str())) names.push_back(n);
  return names;
}
inline std::string active_isa() { return tfk_active_isa(); }
inline void set_max_isa(const std::string& name) { check(tfk_set_max_isa(name.c_str())); }
inline void set_num_threads(int n) { check(tfk_set_num_threads(n)); }
inline int num_threads() { return tfk_get_num_threads(); }

// Caps the ISA for the lifetime of the object, then restores the cap in
// force before it (a TFK_MAX_ISA cap, an enclosing scope's), as the ISA that
// was active then: restoring it as a cap selects the same ISA. The cap is
// the process's (tfk_set_max_isa), so scopes must nest: each destroyed
// before the one made before it, never two alive on different threads.
// The destructor's tfk_set_max_isa clears tfk_last_error(), as every call
// does: read a failed call's message inside the scope (tfk::error carries
// it out).
class scoped_max_isa {
 public:
  explicit scoped_max_isa(const std::string& name) : previous_(tfk_active_isa()) {
    set_max_isa(name);
  }
  ~scoped_max_isa() { tfk_set_max_isa(previous_.c_str()); }
  scoped_max_isa(const scoped_max_isa&) = delete;
  scoped_max_isa& operator=(const scoped_max_isa&) = delete;

 private:
  std::string previous_;
};

// ---- Kernels (leading dimensions default to cols: dense rows) ----
inline void softmax(size_t rows, size_t cols, const float* x, float* y,
                    float scale = 1.0f, tfk_mask mask = TFK_MASK_NONE,
                    size_t q_len = 0, size_t ldx = 0, size_t ldy = 0) {
  check(tfk_softmax(rows, cols, x, ldx ? ldx : cols, y, ldy ? ldy : cols,
                    scale, mask, q_len));
}

inline void activate(tfk_activation act, size_t rows, size_t cols,
                     const float* x, float* y, size_t ldx = 0, size_t ldy = 0) {
  check(tfk_activate(act, rows, cols, x, ldx ? ldx : cols, y, ldy ? ldy : cols));
}

inline void layernorm(size_t rows, size_t cols, const float* x,
                      const float* gamma, const float* beta, float eps,
                      float* y, size_t ldx = 0, size_t ldy = 0) {
  check(tfk_layernorm(rows, cols, x, ldx ? ldx : cols, gamma, beta, eps, y,
                      ldy ? ldy : cols));
}

inline void rmsnorm(size_t rows, size_t cols, const float* x,
                    const float* gamma, float eps, float* y, size_t ldx = 0,
                    size_t ldy = 0) {
  check(tfk_rmsnorm(rows, cols, x, ldx ? ldx : cols, gamma, eps, y,
                    ldy ? ldy : cols));
}

inline void add(size_t rows, size_t cols, const float* a, const float* b,
                float* y, size_t lda = 0, size_t ldb = 0, size_t ldy = 0) {
  check(tfk_add(rows, cols, a, lda ? lda : cols, b, ldb ? ldb : cols, y,
                ldy ? ldy : cols));
}

struct rope_config {
  size_t head_dim = 0;
  size_t rotary_dim = 0;  // 0: head_dim
  tfk_rope_pairing pairing = TFK_ROPE_HALF;
  double base = 10000.0;
};

// Rotates x [tokens, heads, head_dim] (row stride ldx, 0: dense) in place,
// positions pos_start + t, or positions[t] when positions is not null.
inline void rope(const rope_config& c, size_t tokens, size_t heads, float* x,
                 int64_t pos_start = 0, const int64_t* positions = nullptr,
                 size_t ldx = 0) {
  check(tfk_rope(tokens, heads, c.head_dim,
                 c.rotary_dim ? c.rotary_dim : c.head_dim, c.pairing, c.base,
                 x, ldx ? ldx : heads * c.head_dim, pos_start, positions));
}

// C = alpha * A op(B) + beta * C (leading dimensions 0: dense).
inline void matmul(size_t M, size_t N, size_t K, const float* A, const float* B, float* C,
                   tfk_layout b_layout = TFK_LAYOUT_KN, float alpha = 1.0f, float beta = 0.0f,
                   size_t lda = 0, size_t ldb = 0, size_t ldc = 0) {
  const size_t dense_ldb = b_layout == TFK_LAYOUT_KN ? N : K;
  check(tfk_matmul(M, N, K, alpha, A, lda ? lda : K, B, ldb ? ldb : dense_ldb, b_layout, beta,
                   C, ldc ? ldc : N));
}

namespace detail {
// Move-only owner of a C handle with destroy function D.
template <class T, void (*D)(T*)>
class handle {
 public:
  handle() = default;
  ~handle() { D(h_); }
  handle(handle&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  handle& operator=(handle&& o) noexcept {
    if (this != &o) {
      D(h_);
      h_ = o.h_;
      o.h_ = nullptr;
    }
    return *this;
  }
  handle(const handle&) = delete;
  handle& operator=(const handle&) = delete;
  T* get() const { return h_; }

 protected:
  T* h_ = nullptr;
};
}  // namespace detail

// Owns a tfk_linear handle: weights packed once at construction.
class linear : public detail::handle<tfk_linear, tfk_linear_destroy> {
 public:
  linear(size_t K, size_t N, const float* W, tfk_layout layout = TFK_LAYOUT_KN,
         const float* bias = nullptr, tfk_activation act = TFK_ACT_NONE, size_t ldw = 0) {
    check(tfk_linear_create(&h_, K, N, W, ldw ? ldw : (layout == TFK_LAYOUT_KN ? N : K), layout,
                            bias, act));
  }

  // Y[M,N] = R + act(X W + bias); R may be null or equal to Y (leading
  // dimensions 0: dense; ldr 0 with R == Y: Y's).
  void forward(size_t M, const float* X, float* Y, const float* R = nullptr, size_t ldx = 0,
               size_t ldy = 0, size_t ldr = 0) const {
    if (h_ == nullptr) check(tfk_linear_forward(h_, M, X, ldx, Y, ldy, R, ldr));  // moved from
    const Info i = info();
    if (ldy == 0) ldy = i.n;
    if (ldr == 0) ldr = R == Y ? ldy : i.n;
    check(tfk_linear_forward(h_, M, X, ldx ? ldx : i.k, Y, ldy, R, ldr));
  }
  size_t K() const { return info().k; }
  size_t N() const { return info().n; }
  size_t bytes() const { return info().bytes; }

 private:
  struct Info {
    size_t k, n, bytes;
  };
  Info info() const {
    Info i{};
    check(tfk_linear_info(h_, &i.k, &i.n, &i.bytes));
    return i;
  }
};

// O = softmax(scale Q K^T + mask) V per head over dense [tokens, heads, d]
// arrays (scale 0: 1/sqrt(head_dim)).
inline void attention(size_t q_len, size_t kv_len, size_t n_heads, size_t n_kv_heads,
                      size_t head_dim, const float* Q, const float* K, const float* V, float* O,
                      tfk_mask mask = TFK_MASK_NONE, float scale = 0.0f) {
  check(tfk_attention(q_len, kv_len, n_heads, n_kv_heads, head_dim, Q, n_heads * head_dim, K,
                      n_kv_heads * head_dim, V, n_kv_heads * head_dim, O, n_heads * head_dim,
                      scale, mask));
}

// A KV cache (fp32 or bf16) for one attention layer. Leading dimensions 0
// below mean dense rows (n_kv_heads * head_dim for K and V, n_heads *
// head_dim for Q and O).
class kv_cache : public detail::handle<tfk_kv_cache, tfk_kv_cache_destroy> {
 public:
  kv_cache(size_t capacity, size_t n_kv_heads, size_t head_dim, tfk_dtype dtype = TFK_DTYPE_F32)
      : width_(n_kv_heads * head_dim), head_dim_(head_dim) {
    check(tfk_kv_cache_create(&h_, capacity, n_kv_heads, head_dim, dtype));
  }
  // Appends K and V [tokens, n_kv_heads, head_dim].
  void append(size_t tokens, const float* K, const float* V, size_t ldk = 0, size_t ldv = 0) {
    check(tfk_kv_cache_append(h_, tokens, K, ldk ? ldk : width_, V, ldv ? ldv : width_));
  }
  // O = attention of q_len queries Q [q_len, n_heads, head_dim] against
  // every cached token (scale 0: 1/sqrt(head_dim)).
  void attention(size_t q_len, size_t n_heads, const float* Q, float* O,
                 tfk_mask mask = TFK_MASK_CAUSAL, float scale = 0.0f, size_t ldq = 0,
                 size_t ldo = 0) const {
    const size_t w = n_heads * head_dim_;
    check(tfk_kv_cache_attention(h_, q_len, n_heads, Q, ldq ? ldq : w, O, ldo ? ldo : w, scale,
                                 mask));
  }
  size_t length() const { return info().length; }
  size_t capacity() const { return info().capacity; }
  size_t bytes() const { return info().bytes; }
  void truncate(size_t length) { check(tfk_kv_cache_truncate(h_, length)); }

 private:
  struct Info {
    size_t length, capacity, bytes;
  };
  Info info() const {
    Info i{};
    check(tfk_kv_cache_info(h_, &i.length, &i.capacity, &i.bytes));
    return i;
  }
  size_t width_, head_dim_;
};

namespace detail {
// A layer (mha, ffn, block) with packed weights; forward works in a
// caller-owned workspace of workspace_size(n) bytes (e.g. a
// std::vector<char> kept across calls).
template <class T, tfk_status (*Size)(const T*, size_t, size_t*), void (*D)(T*)>
class layer : public handle<T, D> {
 public:
  size_t workspace_size(size_t n) const {
    size_t bytes = 0;
    check(Size(this->h_, n, &bytes));
    return bytes;
  }
};
}  // namespace detail

// Multi-head attention: Y = R + MHA(X), R null or equal to Y; appends the
// new tokens' K and V to `cache` when one is given. Rows are d_model wide
// (leading dimension d_model).
class mha : public detail::layer<tfk_mha, tfk_mha_workspace_size, tfk_mha_destroy> {
 public:
  explicit mha(const tfk_mha_config& config) : d_model_(config.d_model) {
    check(tfk_mha_create(&h_, &config));
  }
  void forward(size_t n, const float* X, float* Y, const float* R, void* workspace,
               size_t workspace_bytes, kv_cache* cache = nullptr) const {
    check(tfk_mha_forward(h_, n, X, d_model_, Y, d_model_, R, d_model_,
                          cache ? cache->get() : nullptr, workspace, workspace_bytes));
  }
  // Batched decoding: row i is the next token of the sequence in caches[i]
  // (n distinct caches, e.g. the get() of n kv_cache objects).
  void forward_batch(size_t n, const float* X, float* Y, const float* R, void* workspace,
                     size_t workspace_bytes, tfk_kv_cache* const* caches) const {
    check(tfk_mha_forward_batch(h_, n, X, d_model_, Y, d_model_, R, d_model_, caches, workspace,
                                workspace_bytes));
  }

 private:
  size_t d_model_;
};

// The position-wise FFN: Y = R + FFN(X), R null or equal to Y, rows d_model
// wide.
class ffn : public detail::layer<tfk_ffn, tfk_ffn_workspace_size, tfk_ffn_destroy> {
 public:
  explicit ffn(const tfk_ffn_config& config) : d_model_(config.d_model) {
    check(tfk_ffn_create(&h_, &config));
  }
  void forward(size_t n, const float* X, float* Y, const float* R, void* workspace,
               size_t workspace_bytes) const {
    check(tfk_ffn_forward(h_, n, X, d_model_, Y, d_model_, R, d_model_, workspace,
                          workspace_bytes));
  }

 private:
  size_t d_model_;
};

// A transformer block; appends to `cache` when one is given. Rows are
// d_model wide (leading dimension d_model, from the config).
class block : public detail::layer<tfk_block, tfk_block_workspace_size, tfk_block_destroy> {
 public:
  explicit block(const tfk_block_config& config) : d_model_(config.attn.d_model) {
    check(tfk_block_create(&h_, &config));
  }
  // Y[n, d_model] = block(X); Y may be X.
  void forward(size_t n, const float* X, float* Y, void* workspace, size_t workspace_bytes,
               kv_cache* cache = nullptr) const {
    check(tfk_block_forward(h_, n, X, d_model_, Y, d_model_, cache ? cache->get() : nullptr,
                            workspace, workspace_bytes));
  }
  // Batched decoding: row i is the next token of the sequence in caches[i].
  void forward_batch(size_t n, const float* X, float* Y, void* workspace, size_t workspace_bytes,
                     tfk_kv_cache* const* caches) const {
    check(tfk_block_forward_batch(h_, n, X, d_model_, Y, d_model_, caches, workspace,
                                  workspace_bytes));
  }

 private:
  size_t d_model_;
};

}  // namespace tfk

#endif  // TFK_TFK_HPP_
