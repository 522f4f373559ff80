// acp_fast: byte-level helpers of the conductor's forwarding path (Forwarder in
// acp_fast/_engine_c.pyx; the pure twin in acp_fast/_engine_py.py is the reference).
//
// Everything here works on JSON that the line parser has already validated (acp_parse),
// so it only has to find boundaries: no number, escape or UTF-8 checks are repeated.
#pragma once

#include <cstddef>

#include "acp_common.h"

namespace acp_fast {

// A hop's output: the bytes are written straight into a bytes object that take() hands out
// (shrunk to its length), so forwarded lines are copied once, not twice. Needs the GIL.
class OutBuf {
 public:
  OutBuf() = default;
  ~OutBuf() { Py_XDECREF(buf_); }
  OutBuf(const OutBuf&) = delete;
  OutBuf& operator=(const OutBuf&) = delete;

  size_t size() const { return len_; }

  // 0, or -1 with MemoryError set.
  int put(const char* p, size_t n) {
    if (len_ + n > cap_ && grow(n) < 0) return -1;
    std::memcpy(PyBytes_AS_STRING(buf_) + len_, p, n);
    len_ += n;
    return 0;
  }
  int put_char(char c) { return put(&c, 1); }
  int put_int64(long long v) {
    char tmp[24];
    char* e = tmp + sizeof tmp;
    char* q = e;
    unsigned long long u = v < 0 ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    do {
      *--q = char('0' + u % 10);
      u /= 10;
    } while (u);
    if (v < 0) *--q = '-';
    return put(q, size_t(e - q));
  }

  // The content as a bytes object (a new reference; the buffer starts over), Py_None when
  // there is none, or NULL with an exception set.
  PyObject* take() {
    if (!len_) {
      Py_INCREF(Py_None);
      return Py_None;
    }
    PyObject* out = buf_;
    buf_ = nullptr;
    size_t len = len_;
    len_ = cap_ = 0;
    if (_PyBytes_Resize(&out, Py_ssize_t(len)) < 0) return nullptr;
    return out;
  }

 private:
  int grow(size_t n) {
    size_t want = len_ + n;
    size_t cap = cap_ * 2;
    if (cap < want) cap = want;
    if (cap < 98304) cap = 98304;  // a 64 KiB read's output fits without growing
    if (!buf_) {
      buf_ = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(cap));
      if (!buf_) return -1;
    } else if (_PyBytes_Resize(&buf_, Py_ssize_t(cap)) < 0) {
      buf_ = nullptr;  // (freed by _PyBytes_Resize)
      len_ = cap_ = 0;
      return -1;
    }
    cap_ = cap;
    return 0;
  }

  PyObject* buf_ = nullptr;
  size_t len_ = 0;
  size_t cap_ = 0;
};

// What unwrap_envelope() found in a successor envelope's params object.
struct EnvelopeInner {
  size_t ms = 0, me = 0;  // the inner "method" string token, quotes included
  long ps = -1, pe = -1;  // the inner "params" value (object or array); -1: absent or null
};

// Finds the inner message of a successor envelope whose params object is p[0..n) (a
// validated JSON object). Returns true when the fast path may unwrap it: exactly one
// "method" member, a string without a backslash; at most one "params" member, an object,
// an array or null; no key with a backslash; no member named jsonrpc, id, result or error.
// Any other member (envelope "_meta"/"meta" and unknown ones) is dropped. Everything else
// (returns false) is left to the Python path, which applies the full rules.
bool unwrap_envelope(const char* p, size_t n, EnvelopeInner& out);

// Whether the JSON string token p[0..n) (quotes included, no backslash) names a method the
// forwarding path never handles itself: initialize, $/cancel_request, and both spellings
// of the proxy initialize.
bool claimed_method_token(const char* p, size_t n);

}  // namespace acp_fast
