#include "lib/status.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace tfk {
namespace detail {
namespace {
thread_local char t_message[512];
}  // namespace

tfk_status Fail(tfk_status status, const char* fn, const char* format, ...) {
  int len = snprintf(t_message, sizeof(t_message), "%s: ", fn);
  if (len < 0 || static_cast<size_t>(len) >= sizeof(t_message)) return status;
  va_list args;
  va_start(args, format);
  vsnprintf(t_message + len, sizeof(t_message) - len, format, args);
  va_end(args);
  return status;
}

void ClearError() { t_message[0] = '\0'; }

static_assert(sizeof(t_message) == 512, "KeptError holds a whole message");
KeptError::KeptError() { memcpy(saved_, t_message, sizeof(saved_)); }
KeptError::~KeptError() { memcpy(t_message, saved_, sizeof(saved_)); }

tfk_status CheckNotNull(const char* fn, const char* name, const void* p) {
  if (p != nullptr) return TFK_SUCCESS;
  return Fail(TFK_INVALID_ARGUMENT, fn, "%s is NULL", name);
}

tfk_status CheckSize(const char* fn, const char* name, size_t n) {
  if (n == 0) return Fail(TFK_INVALID_ARGUMENT, fn, "%s is 0", name);
  // Sizes are used in element counts and byte offsets: keep n * 8 bytes
  // representable as a ptrdiff_t.
  if (n > static_cast<size_t>(PTRDIFF_MAX) / 8) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "%s (%zu) is too large", name, n);
  }
  return TFK_SUCCESS;
}

tfk_status FailFrom(tfk_status status, const char* fn) {
  char inner[sizeof(t_message)];
  snprintf(inner, sizeof(inner), "%s", t_message);
  return Fail(status, fn, "%s", inner);
}

tfk_status CheckMatrix(const char* fn, const char* name, const void* p,
                       size_t rows, size_t cols, size_t ld) {
  TFK_RETURN_IF_ERROR(CheckNotNull(fn, name, p));
  if (ld < cols) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "leading dimension of %s (%zu) < cols (%zu)",
                name, ld, cols);
  }
  // (rows - 1) * ld + cols elements, each 4 bytes, must not overflow the
  // address space.
  const size_t max_elems = static_cast<size_t>(PTRDIFF_MAX) / sizeof(float);
  if (cols > max_elems) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "%s extent overflows: cols %zu", name, cols);
  }
  if (ld != 0 && rows - 1 > (max_elems - cols) / ld) {
    return Fail(TFK_INVALID_ARGUMENT, fn,
                "%s extent overflows: rows %zu x leading dimension %zu", name, rows, ld);
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  if (addr % alignof(float) != 0) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "%s is not 4-byte aligned", name);
  }
  if (addr > UINTPTR_MAX - ((rows - 1) * ld + cols) * sizeof(float)) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "%s extent wraps the address space", name);
  }
  return TFK_SUCCESS;
}

tfk_status CheckFloats(const char* fn, const char* name, const void* p, size_t n) {
  return CheckMatrix(fn, name, p, 1, n, n);
}

tfk_status CheckOptionalFloats(const char* fn, const char* name, const void* p, size_t n) {
  return p == nullptr ? TFK_SUCCESS : CheckFloats(fn, name, p, n);
}

tfk_status CheckAligned(const char* fn, const char* name, const void* p, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    return Fail(TFK_INVALID_ARGUMENT, fn, "%s is not %zu-byte aligned", name, alignment);
  }
  return TFK_SUCCESS;
}

bool BytesOverlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

tfk_status CheckAliasing(const char* fn, const char* x_name, const void* x,
                         size_t ldx, const char* y_name, const void* y,
                         size_t ldy, size_t rows, size_t cols) {
  if (x == y && ldx == ldy) return TFK_SUCCESS;  // in place
  const uintptr_t x0 = reinterpret_cast<uintptr_t>(x);
  const uintptr_t y0 = reinterpret_cast<uintptr_t>(y);
  const uintptr_t x1 = x0 + ((rows - 1) * ldx + cols) * sizeof(float);
  const uintptr_t y1 = y0 + ((rows - 1) * ldy + cols) * sizeof(float);
  if (x0 < y1 && y0 < x1) {
    return Fail(TFK_INVALID_ARGUMENT, fn,
                "%s overlaps %s (only exact in-place use, same pointer and "
                "leading dimension, is allowed)",
                y_name, x_name);
  }
  return TFK_SUCCESS;
}

}  // namespace detail
}  // namespace tfk

extern "C" {

TFK_API const char* tfk_status_string(tfk_status status) {
  switch (tfk::detail::RawEnum(status)) {  // any int may come from C
    case TFK_SUCCESS: return "success";
    case TFK_INVALID_ARGUMENT: return "invalid argument";
    case TFK_UNSUPPORTED_ISA: return "unsupported ISA";
    case TFK_OUT_OF_MEMORY: return "out of memory";
    case TFK_INTERNAL_ERROR: return "internal error";
  }
  return "unknown status";
}

TFK_API const char* tfk_last_error(void) { return tfk::detail::t_message; }

#define TFK_STR2(x) #x
#define TFK_STR(x) TFK_STR2(x)
TFK_API const char* tfk_version(void) {
  return TFK_STR(TFK_VERSION_MAJOR) "." TFK_STR(TFK_VERSION_MINOR) "." TFK_STR(
      TFK_VERSION_PATCH);
}

}  // extern "C"
