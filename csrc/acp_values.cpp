// acp_fast: building Python values from JSON tokens; see acp_values.h.
#include "acp_values.h"

#include <cmath>

namespace acp_fast {

namespace {

constexpr size_t kCacheSlots = 2048;  // power of two
constexpr size_t kCacheMaxLen = 32;

struct CacheSlot {
  PyObject* str;
  uint32_t len;
  char bytes[kCacheMaxLen];
};

CacheSlot g_cache[kCacheSlots];

inline uint64_t load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t hash_of(const char* s, size_t n) {
  uint64_t a, b;
  if (n >= 8) {
    a = load64(s);
    b = load64(s + n - 8);
  } else if (n >= 4) {
    a = load32(s);
    b = load32(s + n - 4);
  } else {
    a = n ? (uint64_t(uint8_t(s[0])) | uint64_t(uint8_t(s[n / 2])) << 8 |
             uint64_t(uint8_t(s[n - 1])) << 16)
          : 0;
    b = 0;
  }
  uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ ((b + n) * 0xC2B2AE3D27D4EB4Full);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h;
}

// a[0..n) == b[0..n) for n <= kCacheMaxLen. Strategy: a cache hit is the common case for
// keys and method names, and a memcmp call costs more than these few word compares (the
// loads overlap instead of reading past either buffer).
inline bool same_bytes(const char* a, const char* b, size_t n) {
  if (n >= 8) {
    uint64_t diff = load64(a + n - 8) ^ load64(b + n - 8);
    for (size_t i = 0; i + 8 < n; i += 8) diff |= load64(a + i) ^ load64(b + i);
    return diff == 0;
  }
  if (n >= 4) return ((load32(a) ^ load32(b)) | (load32(a + n - 4) ^ load32(b + n - 4))) == 0;
  for (size_t i = 0; i < n; i++) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// Pinned strings: a fixed set of interned str (the schemas' names, see pin_str) in an
// open-addressing table that is never evicted. It is consulted only when the cache above
// misses, and its strs then fill the cache slot, so a hit costs nothing more than before.
constexpr size_t kPinSlots = 1024;       // power of two
constexpr size_t kPinMax = kPinSlots / 2;  // load factor <= 1/2: short probes

struct PinSlot {
  PyObject* str;  // owned; compact ASCII
  uint32_t tag;   // low half of the hash (a cheap first compare)
  uint32_t len;
};

PinSlot g_pins[kPinSlots];
size_t g_npins = 0;

inline size_t pin_index(uint64_t h) { return size_t(h >> 32) & (kPinSlots - 1); }

inline bool all_ascii(const char* s, size_t n) {
  size_t i = 0;
  uint64_t acc = 0;
  for (; i + 8 <= n; i += 8) acc |= load64(s + i);
  for (; i < n; i++) acc |= uint8_t(s[i]);
  return (acc & 0x8080808080808080ull) == 0;
}

}  // namespace

PyObject* make_str_uncached(const char* s, size_t n) {
  if (all_ascii(s, n)) {
    PyObject* u = PyUnicode_New(Py_ssize_t(n), 127);
    if (!u) return nullptr;
    std::memcpy(PyUnicode_1BYTE_DATA(u), s, n);
    return u;
  }
  // "surrogatepass": the 3-byte form of a lone surrogate comes only from a "\\udxxx" escape
  // (see unescape); valid UTF-8 decodes exactly as with the strict handler.
  return PyUnicode_DecodeUTF8(s, Py_ssize_t(n), "surrogatepass");
}

static PyObject* find_pinned(const char* s, size_t n, uint64_t h) {
  if (!g_npins) return nullptr;
  const uint32_t tag = uint32_t(h);
  for (size_t i = pin_index(h);; i = (i + 1) & (kPinSlots - 1)) {
    const PinSlot& p = g_pins[i];
    if (!p.str) return nullptr;
    if (p.tag == tag && p.len == n &&
        same_bytes(static_cast<const char*>(PyUnicode_DATA(p.str)), s, n)) {
      return p.str;
    }
  }
}

int pin_str(PyObject* u) {
  if (!PyUnicode_CheckExact(u) || !PyUnicode_IS_COMPACT_ASCII(u)) return 0;
  const size_t n = size_t(PyUnicode_GET_LENGTH(u));
  if (n == 0 || n > kCacheMaxLen) return 0;
  const char* s = static_cast<const char*>(PyUnicode_DATA(u));
  const uint64_t h = hash_of(s, n);
  if (find_pinned(s, n, h)) return 1;
  if (g_npins >= kPinMax) return 0;
  size_t i = pin_index(h);
  while (g_pins[i].str) i = (i + 1) & (kPinSlots - 1);
  Py_INCREF(u);
  g_pins[i].str = u;
  g_pins[i].tag = uint32_t(h);
  g_pins[i].len = uint32_t(n);
  g_npins++;
  return 1;
}

PyObject* pinned_strs() {
  PyObject* out = PyList_New(0);
  if (!out) return nullptr;
  for (const PinSlot& p : g_pins) {
    if (p.str && PyList_Append(out, p.str) < 0) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  return out;
}

PyObject* make_str(const char* s, size_t n) {
  if (n > kCacheMaxLen) return make_str_uncached(s, n);
  const uint64_t h = hash_of(s, n);
  CacheSlot& slot = g_cache[size_t(h) & (kCacheSlots - 1)];
  if (slot.str && slot.len == n && same_bytes(slot.bytes, s, n)) {
    Py_INCREF(slot.str);
    return slot.str;
  }
  PyObject* u = find_pinned(s, n, h);
  if (u) {
    Py_INCREF(u);
  } else if (!(u = make_str_uncached(s, n))) {
    return nullptr;
  }
  PyObject* old = slot.str;
  Py_INCREF(u);
  slot.str = u;
  slot.len = uint32_t(n);
  std::memcpy(slot.bytes, s, n);
  Py_XDECREF(old);
  return u;
}

namespace {

inline int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Four hex digits at p (the caller checked there are 4 bytes); -1 when not hex.
inline int32_t hex4(const char* p) {
  int a = hex_value(uint8_t(p[0])), b = hex_value(uint8_t(p[1]));
  int c = hex_value(uint8_t(p[2])), d = hex_value(uint8_t(p[3]));
  if ((a | b | c | d) < 0) return -1;
  return (a << 12) | (b << 8) | (c << 4) | d;
}

inline char* put_utf8(char* o, uint32_t cp) {
  if (cp < 0x80) {
    *o++ = char(cp);
  } else if (cp < 0x800) {
    *o++ = char(0xC0 | (cp >> 6));
    *o++ = char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = char(0xE0 | (cp >> 12));
    *o++ = char(0x80 | ((cp >> 6) & 0x3F));
    *o++ = char(0x80 | (cp & 0x3F));
  } else {
    *o++ = char(0xF0 | (cp >> 18));
    *o++ = char(0x80 | ((cp >> 12) & 0x3F));
    *o++ = char(0x80 | ((cp >> 6) & 0x3F));
    *o++ = char(0x80 | (cp & 0x3F));
  }
  return o;
}

}  // namespace

// First backslash in s[0..n). Short strings (keys, ids, method names, most values) are
// scanned 8 bytes at a time: calling memchr costs more than they do. This reads up to 7
// bytes past s + n, which the callers' buffers allow (lines carry ACP_PADDING bytes after
// them, and every string lies inside its line).
static inline const char* find_backslash(const char* s, size_t n) {
  if (n >= 64) return static_cast<const char*>(std::memchr(s, '\\', n));
  const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  const uint64_t pattern = 0x5C5C5C5C5C5C5C5Cull;  // '\\' in every byte
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = load64(s + i) ^ pattern;
    uint64_t t = (x - ones) & ~x & highs;  // the lowest set bit marks the first match
    if (t) {
      size_t j = i + size_t(__builtin_ctzll(t) >> 3);
      return j < n ? s + j : nullptr;
    }
  }
  return nullptr;
}

Walk unescape(const char* s, size_t n, std::string_view& view, PaddedBuffer& buf) {
  const char* bs = find_backslash(s, n);
  if (!bs) {
    view = std::string_view(s, n);
    return WALK_OK;
  }
  // Unescaped text is never longer than its escaped form.
  if (!buf.reserve(n)) {
    PyErr_NoMemory();
    return WALK_PYERR;
  }
  char* const out0 = buf.data();
  char* o = out0;
  const char* p = s;
  const char* const end = s + n;
  for (;;) {
    size_t run = size_t(bs - p);
    std::memcpy(o, p, run);
    o += run;
    p = bs + 1;
    if (p >= end) return WALK_INVALID;
    char c = *p++;
    switch (c) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        if (end - p < 4) return WALK_INVALID;
        int32_t cp = hex4(p);
        if (cp < 0) return WALK_INVALID;
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
          int32_t lo = hex4(p + 2);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {  // a pair: one code point
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }  // else a lone high surrogate; the next escape is read on its own
        }
        // A lone surrogate (like json.loads, which keeps it in the str) is written in the
        // 3-byte form that make_str decodes with "surrogatepass"; stage 1 has refused such
        // bytes in the input, so only an escape can produce them.
        o = put_utf8(o, uint32_t(cp));
        break;
      }
      default:
        return WALK_INVALID;
    }
    bs = static_cast<const char*>(std::memchr(p, '\\', size_t(end - p)));
    if (!bs) {
      size_t rest = size_t(end - p);
      std::memcpy(o, p, rest);
      o += rest;
      break;
    }
  }
  view = std::string_view(out0, size_t(o - out0));
  return WALK_OK;
}

Walk validate_escapes(const char* s, size_t n) {
  const char* const end = s + n;
  const char* p = static_cast<const char*>(std::memchr(s, '\\', n));
  while (p) {
    p++;  // past the backslash
    if (p >= end) return WALK_INVALID;
    switch (*p++) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        break;
      case 'u': {
        if (end - p < 4) return WALK_INVALID;
        int32_t cp = hex4(p);
        if (cp < 0) return WALK_INVALID;
        p += 4;
        // Surrogates, paired or not, are accepted (see unescape); a following escape is
        // checked on its own by the loop.
        break;
      }
      default:
        return WALK_INVALID;
    }
    p = static_cast<const char*>(std::memchr(p, '\\', size_t(end - p)));
  }
  return WALK_OK;
}

Walk string_value(const char* s, size_t n, PyObject** out, PaddedBuffer& buf) {
  std::string_view v;
  Walk w = unescape(s, n, v, buf);
  if (w || !out) return w;
  if (!(*out = make_str(v.data(), v.size()))) return WALK_PYERR;
  return WALK_OK;
}

void clear_value_caches() {
  for (auto& slot : g_cache) {
    PyObject* old = slot.str;
    slot.str = nullptr;
    slot.len = 0;
    Py_XDECREF(old);
  }
}

namespace {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// PyLong_FromString on a copy of the token (it wants a NUL-terminated string).
Walk big_int(const char* s, size_t n, NumberInfo& info, PyObject** out) {
  char stack[128];
  char* buf = n < sizeof(stack) ? stack : static_cast<char*>(std::malloc(n + 1));
  if (!buf) {
    PyErr_NoMemory();
    return WALK_PYERR;
  }
  std::memcpy(buf, s, n);
  buf[n] = '\0';
  PyObject* v = PyLong_FromString(buf, nullptr, 10);
  if (buf != stack) std::free(buf);
  if (!v) {
    // ValueError: the int_max_str_digits limit (json.loads fails the same way).
    if (PyErr_ExceptionMatches(PyExc_ValueError)) {
      PyErr_Clear();
      return WALK_INVALID;
    }
    return WALK_PYERR;
  }
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (!overflow) {
    info.fits_int64 = true;
    info.i64 = x;
  }
  if (out) {
    *out = v;
  } else {
    Py_DECREF(v);
  }
  return WALK_OK;
}

}  // namespace

Walk scan_number(const char* s, size_t n, NumberInfo& info, PyObject** out) {
  size_t i = 0;
  bool neg = false;
  if (i < n && s[i] == '-') {
    neg = true;
    i++;
  }
  size_t int_start = i;
  if (i >= n) return WALK_INVALID;
  if (s[i] == '0') {
    i++;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < n && is_digit(s[i])) i++;
  } else {
    return WALK_INVALID;
  }
  size_t int_digits = i - int_start;
  bool is_float = false;
  if (i < n && s[i] == '.') {
    i++;
    if (i >= n || !is_digit(s[i])) return WALK_INVALID;
    while (i < n && is_digit(s[i])) i++;
    is_float = true;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || !is_digit(s[i])) return WALK_INVALID;
    while (i < n && is_digit(s[i])) i++;
    is_float = true;
  }
  if (i != n) return WALK_INVALID;
  info.is_float = is_float;
  if (is_float) return WALK_OK;
  if (int_digits <= 18) {
    uint64_t v = 0;
    for (size_t k = int_start; k < n; k++) v = v * 10 + uint64_t(s[k] - '0');
    int64_t x = neg ? -int64_t(v) : int64_t(v);
    info.fits_int64 = true;
    info.i64 = x;
    if (out) {
      *out = PyLong_FromLongLong(x);
      if (!*out) return WALK_PYERR;
    }
    return WALK_OK;
  }
  // 19+ digits: may not fit in 64 bits. The smallest int_max_str_digits Python accepts
  // (besides 0 = unlimited) is 640, so shorter integers never hit the limit.
  if (!out && int_digits > 19 && int_digits < 640) return WALK_OK;  // valid, not int64
  return big_int(s, n, info, out);
}

Walk parse_float_token(const char* s, size_t n, double* out) {
  char stack[128];
  char* buf = n < sizeof(stack) ? stack : static_cast<char*>(std::malloc(n + 1));
  if (!buf) {
    PyErr_NoMemory();
    return WALK_PYERR;
  }
  std::memcpy(buf, s, n);
  buf[n] = '\0';
  char* end = nullptr;
  double d = PyOS_string_to_double(buf, &end, nullptr);
  bool complete = end == buf + n;
  if (buf != stack) std::free(buf);
  if (d == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_MemoryError)) return WALK_PYERR;
    PyErr_Clear();
    return WALK_INVALID;
  }
  if (!complete || !std::isfinite(d)) return WALK_INVALID;
  *out = d;
  return WALK_OK;
}

}  // namespace acp_fast
