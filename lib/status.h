// Error reporting and argument validation shared by every public entry.
// A public function validates all of its arguments with these helpers before
// it touches memory, so a failed call writes nothing the caller owns.
#ifndef TFK_LIB_STATUS_H_
#define TFK_LIB_STATUS_H_

#include <stddef.h>
#include <string.h>

#include "tfk/tfk.h"

namespace tfk {
namespace detail {

// Records "fn: message" as this thread's last error and returns `status`.
tfk_status Fail(tfk_status status, const char* fn, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

// Fail(status, fn, "<this thread's last message>"): for a composite call
// passing on the failure of a call it made ("tfk_block_create:
// tfk_mha_create: n_heads is 0").
tfk_status FailFrom(tfk_status status, const char* fn);

// The int a caller passed for a C enum parameter or field. C passes any int;
// C++ leaves reading an enum object whose value lies outside its
// enumerators' range undefined (UBSan's -fsanitize=enum reports the load),
// so the checks read the object's bytes instead; after them the enum is
// valid and read as usual.
template <class E>
inline int RawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "a C enum here is int-sized");
  int v;
  memcpy(&v, &e, sizeof(v));
  return v;
}

// Clears this thread's last error (called on entry by every public function).
void ClearError();

// Keeps the calling thread's message across its scope, for work that may
// set it but runs inside a getter, which must leave it as it is.
class KeptError {
 public:
  KeptError();
  ~KeptError();
  KeptError(const KeptError&) = delete;
  KeptError& operator=(const KeptError&) = delete;

 private:
  char saved_[512];
};

// The checks below return TFK_SUCCESS or Fail(...) with a message naming the
// argument. They are chained with TFK_RETURN_IF_ERROR.
tfk_status CheckNotNull(const char* fn, const char* name, const void* p);
tfk_status CheckSize(const char* fn, const char* name, size_t n);
// A [rows, cols] float matrix with row stride ld: non-null, ld >= cols and
// its extent (rows-1)*ld + cols elements addressable without overflow.
tfk_status CheckMatrix(const char* fn, const char* name, const void* p,
                       size_t rows, size_t cols, size_t ld);
// A dense array of n floats: CheckMatrix of one row. Optional: p may be null.
tfk_status CheckFloats(const char* fn, const char* name, const void* p, size_t n);
tfk_status CheckOptionalFloats(const char* fn, const char* name, const void* p, size_t n);
// p (non-null) is aligned to `alignment` bytes, the alignment of what the
// call reads through it (int64_t positions, an array of handles).
tfk_status CheckAligned(const char* fn, const char* name, const void* p, size_t alignment);
// Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool BytesOverlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes);
// Output y of [rows, cols] may be x itself (same ld) but must not otherwise
// overlap it.
tfk_status CheckAliasing(const char* fn, const char* x_name, const void* x,
                         size_t ldx, const char* y_name, const void* y,
                         size_t ldy, size_t rows, size_t cols);

}  // namespace detail
}  // namespace tfk

#define TFK_RETURN_IF_ERROR(expr)                       \
  do {                                                  \
    const tfk_status tfk_status_ = (expr);              \
    if (tfk_status_ != TFK_SUCCESS) return tfk_status_; \
  } while (0)

#endif  // TFK_LIB_STATUS_H_
