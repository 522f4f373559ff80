// acp_fast: line parser of the compiled engine (simdjson stage 1 + our own stage 2).
//
// LineParser::parse() takes one line (no "\n", trailing "\r" already stripped) that has
// SIMDJSON_PADDING readable bytes after it, validates the whole line with the engine's
// strict rules (see acp_fast/_engine_py.py) and classifies it: a message, a batch of
// entries, a Malformed value, or a whitespace-only line to skip. Offsets in the result are
// relative to the start of the line; Python objects in an Entry are owned references that
// the Cython layer takes with take_ref()/take_or_none().
#pragma once

#include <memory>
#include <vector>

#include "acp_common.h"

namespace acp_fast {

struct Entry {
  int kind = KIND_MALFORMED;
  int reason = REASON_NONE;
  bool response_shaped = false;
  PyObject* id = nullptr;      // None when NULL
  PyObject* method = nullptr;  // None when NULL
  PyObject* error = nullptr;   // None when NULL
  PyObject* value = nullptr;   // eager params/result; NULL: None (or not decoded, lazy)
  Py_ssize_t start = 0, end = 0;  // the entry's bytes (the whole line at top level)
  Py_ssize_t ids = -1, ide = -1;  // the id value; -1: no id key
  Py_ssize_t ps = -1, pe = -1;    // params/result payload; -1: none (absent/null params)

  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  Entry(Entry&& o) noexcept { steal(o); }
  Entry& operator=(Entry&& o) noexcept {
    if (this != &o) {
      reset();
      steal(o);
    }
    return *this;
  }
  ~Entry() { reset(); }

  void reset() {
    Py_CLEAR(id);
    Py_CLEAR(method);
    Py_CLEAR(error);
    Py_CLEAR(value);
    kind = KIND_MALFORMED;
    reason = REASON_NONE;
    response_shaped = false;
    start = end = 0;
    ids = ide = ps = pe = -1;
  }

 private:
  void steal(Entry& o) {
    kind = o.kind;
    reason = o.reason;
    response_shaped = o.response_shaped;
    id = o.id;
    method = o.method;
    error = o.error;
    value = o.value;
    o.id = o.method = o.error = o.value = nullptr;
    start = o.start;
    end = o.end;
    ids = o.ids;
    ide = o.ide;
    ps = o.ps;
    pe = o.pe;
  }
};

// Owned reference out of a slot (the slot becomes NULL); None for an empty slot.
inline PyObject* take_or_none(PyObject*& slot) {
  PyObject* r = slot;
  slot = nullptr;
  if (!r) {
    Py_INCREF(Py_None);
    r = Py_None;
  }
  return r;
}

// The walker behind LineParser (acp_parse.cpp: stage 2 over simdjson's structural index).
class WalkerBase {
 public:
  virtual ~WalkerBase() = default;
  // The most entries a batch may have: past it the rest of the array is only validated and
  // the line is REASON_BATCH_TOO_LARGE (no entry is built for it).
  size_t max_batch = SIZE_MAX;
  // Returns 0, or -1 with a Python exception set (memory errors only).
  virtual int parse(const char* p, size_t n, bool lazy, int max_depth, Entry& top,
                    std::vector<Entry>& entries) = 0;
  // Decodes one already validated JSON value; returns a new reference or NULL + exception.
  virtual PyObject* decode(const char* p, size_t n) = 0;
  // Region mode: see LineParser::index_region()/parse_in_region().
  virtual int index_region(const char* p, size_t n) = 0;
  virtual int parse_in_region(size_t off, size_t n, bool lazy, int max_depth, Entry& top,
                              std::vector<Entry>& entries, Py_ssize_t& origin) = 0;
};

class LineParser {
 public:
  LineParser();
  ~LineParser();
  LineParser(const LineParser&) = delete;
  LineParser& operator=(const LineParser&) = delete;

  // False when the walker could not be created (out of memory).
  bool ok() const { return impl_ != nullptr; }

  // See WalkerBase::max_batch.
  void set_max_batch(size_t n) {
    if (impl_) impl_->max_batch = n;
  }

  // p[0..n) with SIMDJSON_PADDING readable bytes after p + n. Returns 0 (result in
  // top/entries, top.kind tells what it is) or -1 with a Python exception set.
  int parse(const char* p, size_t n, bool lazy, int max_depth);

  // Region mode. Strategy: simdjson's stage 1 has a fixed cost per call (the last block
  // is copied into a padded one, then the state is checked), which is a large part of a
  // ~350-byte line; so feed() indexes many complete lines at once. p[0..n) is a run of
  // complete lines (their "\n" separators included, none at the end) followed by
  // SIMDJSON_PADDING readable bytes. Stage 1 state does not leak from one line into the
  // next when the run indexes without error: a newline inside a string is an unescaped
  // control character (an error), and a newline is whitespace outside strings. When
  // stage 1 fails on the run (some line is bad), parse_in_region() falls back to indexing
  // each line alone, so every line still gets its own verdict. Returns 0, or -1 with a
  // Python exception set (out of memory).
  int index_region(const char* p, size_t n);

  // Parse the line at p + off (n bytes, "\r" stripped) of the indexed run; lines must
  // come in order. Like parse(), but offsets in the result are relative to
  // p + `origin` instead of to the line.
  int parse_in_region(size_t off, size_t n, bool lazy, int max_depth);
  Py_ssize_t origin = 0;

  // Decode one JSON value that parse() has validated before (lazy params/result). The
  // bytes need no padding: they are copied into an internal padded buffer.
  PyObject* decode(const char* p, size_t n);

  // Drop the references held by the last result.
  void release();

  Entry top;
  std::vector<Entry> entries;

  // Scratch space for lines that lack padding where they are (chunk tails).
  char* scratch(size_t n);

  // The simdjson implementation running stage 1 ("haswell", "icelake", "fallback", ...).
  const char* implementation_name() const { return impl_name_; }

 private:
  std::unique_ptr<WalkerBase> impl_;
  const char* impl_name_ = "";
  PaddedBuffer scratch_;
};

// The simdjson implementation chosen at run time for stage 1 (diagnostics).
const char* active_simdjson_implementation();

// Whether p[0..n) is valid UTF-8 (simdjson's validator).
bool utf8_valid(const char* p, size_t n);

// Reset the string caches (module teardown / tests). Safe to call any time with the GIL.
void clear_string_caches();

}  // namespace acp_fast
