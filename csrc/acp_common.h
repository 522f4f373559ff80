// acp_fast: constants and small helpers shared by the C++ parts of the compiled engine.
//
// Nothing here throws: the extension is built with -DSIMDJSON_EXCEPTIONS=0 and every
// failure travels as a return code (with a Python exception set where the code says so).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace acp_fast {

// Frame kinds: the very numbers of the Python constants (REQUEST ... MALFORMED). KIND_SKIP
// marks a whitespace-only line, which produces no frame.
enum FrameKind : int {
  KIND_REQUEST = 0,
  KIND_NOTIFICATION = 1,
  KIND_RESPONSE = 2,
  KIND_BATCH = 3,
  KIND_MALFORMED = 4,
  KIND_SKIP = 5,
};

// Why a value is Malformed; the Cython layer maps these to the exact reason strings of the
// pure twin (and to the JSON-RPC code: -32700 for the first two, -32600 otherwise).
enum Reason : int {
  REASON_NONE = 0,
  REASON_INVALID_UTF8 = 1,
  REASON_INVALID_JSON = 2,
  REASON_NOT_OBJECT = 3,
  REASON_EMPTY_BATCH = 4,
  REASON_DUPLICATE_KEY = 5,
  REASON_JSONRPC = 6,
  REASON_ENVELOPE = 7,
  REASON_METHOD = 8,
  REASON_ID = 9,
  REASON_PARAMS = 10,
  REASON_ERROR_OBJECT = 11,
  REASON_BATCH_TOO_LARGE = 12,  // the text names the decoder's limit (set by the Cython layer)
};

// Readable bytes simdjson needs after the end of a document (simdjson::SIMDJSON_PADDING;
// acp_parse.cpp asserts the two agree).
constexpr size_t ACP_PADDING = 64;

inline bool is_json_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The last '\n' in p[0..n), or NULL.
inline const char* last_newline(const char* p, size_t n) {
#if defined(__GLIBC__)
  return static_cast<const char*>(memrchr(p, '\n', n));
#else
  for (const char* q = p + n; q > p;) {
    if (*--q == '\n') return q;
  }
  return nullptr;
#endif
}

// A growable byte buffer that always keeps `pad` readable bytes after its end (simdjson
// needs SIMDJSON_PADDING of them). malloc-based so that failure is a return value.
class PaddedBuffer {
 public:
  explicit PaddedBuffer(size_t pad) : pad_(pad) {}
  ~PaddedBuffer() { std::free(data_); }
  PaddedBuffer(const PaddedBuffer&) = delete;
  PaddedBuffer& operator=(const PaddedBuffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }

  // Capacity for n bytes plus the padding; false when out of memory.
  bool reserve(size_t n) {
    if (n + pad_ <= cap_) return true;
    size_t want = n + pad_;
    size_t grown = cap_ + cap_ / 2;
    if (grown > want) want = grown;
    if (want < 256) want = 256;
    char* p = static_cast<char*>(std::realloc(data_, want));
    if (!p) return false;
    data_ = p;
    cap_ = want;
    return true;
  }
  bool append(const char* p, size_t n) {
    if (!reserve(size_ + n)) return false;
    std::memcpy(data_ + size_, p, n);
    size_ += n;
    return true;
  }
  bool assign(const char* p, size_t n) {
    size_ = 0;
    return append(p, n);
  }
  // Forget the content; give memory back after an unusually large line.
  void clear() {
    size_ = 0;
    if (cap_ > (size_t(4) << 20)) {
      std::free(data_);
      data_ = nullptr;
      cap_ = 0;
    }
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = 0;
  size_t pad_;
};

// A bytes object holding src[0..n), made from `spare` when nothing else holds it any more.
//
// Marks the cached hash of a bytes object (or of an instance of a subclass) whose contents
// we have just written as "not computed yet": -1, the value bytes' hash tests before hashing
// the contents. The field is deprecated since 3.11 (the compiler is told not to warn) but it
// is still the one bytes' hash reads, on every version that supports it (3.10 through 3.13).
// The object must not be shared yet (no other thread can see it: a plain store suffices).
inline void clear_cached_hash(PyObject* b) {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
  reinterpret_cast<PyBytesObject*>(b)->ob_shash = -1;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

// True when `type` is a subclass of bytes whose instances have bytes' own layout (no
// __dict__, no __weakref__, no slots: the same basic and item sizes), so that
// new_bytes_like() may fill one in place. The compiled engine checks RawJson once, at import.
inline bool has_bytes_layout(PyTypeObject* type) {
  return PyType_IsSubtype(type, &PyBytes_Type) &&
         type->tp_basicsize == PyBytes_Type.tp_basicsize &&
         type->tp_itemsize == PyBytes_Type.tp_itemsize;
}

// A new instance of `type` (has_bytes_layout) holding a copy of src[0:n]: one allocation
// at its final size and one copy, where `type(bytes_obj)` would copy the bytes a second
// time. It is what constructing the subclass from a bytes object leaves: the type's own
// allocator (zeroed memory, header and size set, the type referenced), the n bytes, the
// terminating NUL bytes keep after their contents, and no cached hash. Returns a new
// reference (NULL + exception on failure).
inline PyObject* new_bytes_like(PyTypeObject* type, const char* src, Py_ssize_t n) {
#if PY_VERSION_HEX < 0x030E0000
  PyObject* b = type->tp_alloc(type, n);
  if (!b) return nullptr;
  char* out = PyBytes_AS_STRING(b);
  std::memcpy(out, src, size_t(n));
  out[n] = '\0';
  clear_cached_hash(b);
  return b;
#else
  // Not checked on these versions: construct it the ordinary way (two copies).
  PyObject* tmp = PyBytes_FromStringAndSize(src, n);
  if (!tmp) return nullptr;
  PyObject* b = PyObject_CallOneArg(reinterpret_cast<PyObject*>(type), tmp);
  Py_DECREF(tmp);
  return b;
#endif
}

// Strategy: a large line joined across reads needs a bytes object of its own (frames point
// into it), and the decoded text of a big message is another fresh block of the same size.
// Two such blocks freed per frame make glibc's heap top cross its trim threshold, so every
// frame's pages go back to the kernel and fault in again (~480 minor faults per 1 MiB
// frame, most of the reading cost). Reusing the previous line's block when its frames are
// gone (refcount 1: only `spare` holds it) leaves one fresh block per frame (the text, the
// user's), and the heap keeps its pages, with no allocator setting changed. The block is
// resized to n (in place when the size is about the same), its bytes overwritten and its
// cached hash cleared (a holder may have hashed it before letting it go). Lines longer
// than `keep` are not kept as the spare. Returns a new reference (NULL + exception on
// failure); `spare` owns its own reference.
inline PyObject* recycled_bytes(PyObject*& spare, const char* src, Py_ssize_t n, Py_ssize_t keep) {
  PyObject* b = nullptr;
  if (spare && Py_REFCNT(spare) == 1 && PyBytes_CheckExact(spare)) {
    b = spare;
    spare = nullptr;
    if (_PyBytes_Resize(&b, n) < 0) return nullptr;  // b freed, exception set
    std::memcpy(PyBytes_AS_STRING(b), src, size_t(n));
    clear_cached_hash(b);
  } else {
    b = PyBytes_FromStringAndSize(src, n);
    if (!b) return nullptr;
  }
  Py_CLEAR(spare);
  if (n <= keep) {
    Py_INCREF(b);
    spare = b;
  }
  return b;
}

}  // namespace acp_fast
