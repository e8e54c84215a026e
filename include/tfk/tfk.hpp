// tfk: thin C++17 layer over the C API (tfk.h). Each function calls its C
// counterpart and throws tfk::error, carrying the status and the same message,
// when it fails. Argument order and semantics are those of tfk.h.
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

// Caps the ISA for the lifetime of the object, then restores "best".
class scoped_max_isa {
 public:
  explicit scoped_max_isa(const std::string& name) { set_max_isa(name); }
  ~scoped_max_isa() { tfk_set_max_isa(nullptr); }
  scoped_max_isa(const scoped_max_isa&) = delete;
  scoped_max_isa& operator=(const scoped_max_isa&) = delete;
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
                float* y) {
  check(tfk_add(rows, cols, a, cols, b, cols, y, cols));
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

}  // namespace tfk

#endif  // TFK_TFK_HPP_
