// acp_fast: JSON encoder of the compiled engine.
//
// Output is byte-identical to json.dumps(obj, separators=(",", ":"), ensure_ascii=False,
// allow_nan=False).encode("utf-8"), with RawJson values (a bytes subclass, see
// acp_fast/_engine_py.py) spliced verbatim. Type dispatch follows CPython's C encoder
// (Modules/_json.c): None/True/False, str (and subclasses), int (and subclasses, as
// int.__repr__), float (as float.__repr__; NaN/inf refused), list/tuple (and subclasses,
// through PySequence_Fast), dict (and subclasses; items() for subclasses), then RawJson,
// else unsupported. Dict keys: str; float, True/False/None and int are coerced like
// json.dumps; anything else is refused. Errors raise EncodeError (the Python class given to
// encode_init), MemoryError, or whatever a user's __iter__/items() raised.
#pragma once

#include "acp_common.h"

namespace acp_fast {

class Writer {
 public:
  Writer() = default;
  ~Writer() { std::free(data_); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Empty again, keeping the capacity up to `keep` bytes (beyond: freed, not held on to).
  void reset(size_t keep = size_t(1) << 20) {
    len_ = 0;
    if (cap_ > keep) {
      std::free(data_);
      data_ = nullptr;
      cap_ = 0;
    }
  }
  size_t size() const { return len_; }
  const char* data() const { return data_; }

  // 0, or -1 with MemoryError set.
  int reserve(size_t extra) {
    if (len_ + extra <= cap_) return 0;
    return grow(extra);
  }
  int put(const char* s, size_t n) {
    if (reserve(n) < 0) return -1;
    std::memcpy(data_ + len_, s, n);
    len_ += n;
    return 0;
  }
  int put_char(char c) {
    if (reserve(1) < 0) return -1;
    data_[len_++] = c;
    return 0;
  }
  char* cursor() { return data_ + len_; }
  void advance(size_t n) { len_ += n; }

  // The content as a new bytes object (NULL + exception on failure).
  PyObject* to_bytes() const { return PyBytes_FromStringAndSize(data_, Py_ssize_t(len_)); }

 private:
  int grow(size_t extra);
  char* data_ = nullptr;
  size_t len_ = 0;
  size_t cap_ = 0;
};

// Once, at module import: the RawJson class and the EncodeError class (borrowed; the module
// keeps them alive).
void encode_init(PyObject* rawjson_type, PyObject* encode_error);

// Appends the JSON of obj. 0, or -1 with an exception set; TypeError/ValueError/
// RecursionError raised underneath (int too long to print, a user's items() ...) are turned
// into EncodeError like the pure twin's encode_value does.
int write_value(Writer& w, PyObject* obj);

// Appends the JSON string of a str (exact or subclass); a lone surrogate becomes its escape.
int write_str(Writer& w, PyObject* str);

// Appends a decimal int64.
int write_int64(Writer& w, long long v);

// RawJson checks of the pure twin (_check_raw): 0, or -1 with EncodeError set.
int check_raw(PyObject* raw);

}  // namespace acp_fast
