// acp_fast: building Python values from JSON tokens (shared by every simdjson walker).
#pragma once

#include <string_view>

#include "acp_common.h"

namespace acp_fast {

// Outcome of walking part of a line.
enum Walk : int {
  WALK_OK = 0,
  WALK_INVALID = 1,  // the line is not valid JSON (or breaks a decoding policy)
  WALK_PYERR = 2,    // a Python exception is set (out of memory)
};

// A str from valid UTF-8 (new reference; NULL + exception on failure). Short strings go
// through a small cache keyed by their bytes, so repeated keys, method names and short
// values allocate nothing.
PyObject* make_str(const char* s, size_t n);
PyObject* make_str_uncached(const char* s, size_t n);

// Pins `u` (an exact str the caller has interned) in a fixed table that make_str consults
// when its cache misses: from then on make_str returns that very object for those bytes,
// so dict lookups with an interned literal key match by identity. Only compact ASCII strs
// of 1..32 characters are pinned, at most 512 of them (a fixed set given once at import:
// the schemas' names). 1: pinned (or already); 0: not eligible or the table is full.
int pin_str(PyObject* u);
// A new list of the pinned strs (tests).
PyObject* pinned_strs();

// The content of a JSON string (the bytes between its quotes; stage 1 has checked UTF-8,
// control characters and where the string ends). Unescapes it like json.loads, refusing
// bad escapes and keeping unpaired surrogate escapes (in the 3-byte "surrogatepass" form
// make_str decodes): `view` is the raw bytes when there is no backslash, else the
// unescaped bytes in `buf` (valid until buf is used again). s + n must be followed by at
// least 8 readable bytes (the line's padding).
Walk unescape(const char* s, size_t n, std::string_view& view, PaddedBuffer& buf);

// Whether every backslash escape in s[0..n) is one json.loads accepts (unpaired UTF-16
// surrogate escapes included); nothing is copied. Used once per line (escapes are rare):
// every backslash of a valid JSON text is inside a string, so scanning the whole line left
// to right tokenises escapes exactly like scanning each string, and a backslash outside a
// string makes the line invalid anyway. WALK_OK or WALK_INVALID.
Walk validate_escapes(const char* s, size_t n);

// unescape() + make_str() (with out == NULL: validation only).
Walk string_value(const char* s, size_t n, PyObject** out, PaddedBuffer& buf);

// JSON number token (no surrounding whitespace) -> what Python's json module makes of it.
struct NumberInfo {
  bool is_float = false;
  bool fits_int64 = false;  // an integer within [-2**63, 2**63-1]
  int64_t i64 = 0;
  double f64 = 0.0;
};

// Checks the RFC 8259 number grammar; for integers computes the value (int64 when it fits,
// else through PyLong_FromString, whose int_max_str_digits limit makes a line invalid like
// in the pure twin); floats are left to the caller (simdjson's parser, then
// parse_float_token as a fallback). With out != NULL an int is built (new reference).
Walk scan_number(const char* s, size_t n, NumberInfo& info, PyObject** out);

// Python's float(token) for a token that passed scan_number; WALK_INVALID when infinite.
Walk parse_float_token(const char* s, size_t n, double* out);

void clear_value_caches();

}  // namespace acp_fast
