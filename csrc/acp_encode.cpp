// acp_fast: JSON encoder of the compiled engine; see acp_encode.h.
#include "acp_encode.h"

#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace acp_fast {

namespace {

PyObject* g_rawjson = nullptr;       // borrowed: acp_fast._engine_py.RawJson
PyObject* g_encode_error = nullptr;  // borrowed: acp_fast.errors.EncodeError

// Per ASCII byte: 0 = copied as is, 'u' = \u00XX, else the letter after the backslash.
char g_escape[128];

struct EscapeInit {
  EscapeInit() {
    for (int c = 0; c < 128; c++) g_escape[c] = c < 0x20 ? 'u' : 0;
    g_escape[int('"')] = '"';
    g_escape[int('\\')] = '\\';
    g_escape[int('\n')] = 'n';
    g_escape[int('\r')] = 'r';
    g_escape[int('\t')] = 't';
    g_escape[int('\b')] = 'b';
    g_escape[int('\f')] = 'f';
  }
} g_escape_init;

const char kHex[] = "0123456789abcdef";

int raise_encode(const char* msg) {
  PyErr_SetString(g_encode_error, msg);
  return -1;
}

// Turn a pending TypeError/ValueError/RecursionError into EncodeError(str(exc)), as the
// pure twin's encode_value does; anything else (MemoryError, a user's KeyError) stays.
int convert_error() {
  if (!PyErr_Occurred() || PyErr_ExceptionMatches(g_encode_error)) return -1;
  if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError) &&
      !PyErr_ExceptionMatches(PyExc_RecursionError)) {
    return -1;
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject* text = value ? PyObject_Str(value) : nullptr;
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  if (!text) return -1;
  PyErr_SetObject(g_encode_error, text);
  Py_DECREF(text);
  return -1;
}

// Containers being encoded (for "Circular reference detected", like json's markers).
struct Path {
  PyObject** items = nullptr;
  size_t len = 0, cap = 0;
  ~Path() { std::free(items); }
  bool contains(PyObject* o) const {
    for (size_t i = 0; i < len; i++)
      if (items[i] == o) return true;
    return false;
  }
  int push(PyObject* o) {
    if (contains(o)) return raise_encode("Circular reference detected");
    if (len == cap) {
      size_t nc = cap ? cap * 2 : 32;
      PyObject** p = static_cast<PyObject**>(std::realloc(items, nc * sizeof(PyObject*)));
      if (!p) {
        PyErr_NoMemory();
        return -1;
      }
      items = p;
      cap = nc;
    }
    items[len++] = o;
    return 0;
  }
  void pop() { len--; }
};

template <typename CharT>
int write_chars(Writer& w, const CharT* s, Py_ssize_t n) {
  // Pass 1: exact output size. A lone surrogate, which UTF-8 cannot carry, is written as
  // its "\\udxxx" escape (json.dumps with ensure_ascii=True does the same).
  size_t out = 2;
  for (Py_ssize_t i = 0; i < n; i++) {
    uint32_t c = s[i];
    if (c < 0x80) {
      char e = g_escape[c];
      out += e == 0 ? 1 : (e == 'u' ? 6 : 2);
    } else if (c < 0x800) {
      out += 2;
    } else if (c < 0x10000) {
      out += (c >= 0xD800 && c <= 0xDFFF) ? 6 : 3;
    } else {
      out += 4;
    }
  }
  if (w.reserve(out) < 0) return -1;
  char* o = w.cursor();
  *o++ = '"';
  for (Py_ssize_t i = 0; i < n; i++) {
    uint32_t c = s[i];
    if (c < 0x80) {
      char e = g_escape[c];
      if (e == 0) {
        *o++ = char(c);
      } else if (e == 'u') {
        o[0] = '\\';
        o[1] = 'u';
        o[2] = '0';
        o[3] = '0';
        o[4] = kHex[(c >> 4) & 0xF];
        o[5] = kHex[c & 0xF];
        o += 6;
      } else {
        o[0] = '\\';
        o[1] = e;
        o += 2;
      }
    } else if (c < 0x800) {
      *o++ = char(0xC0 | (c >> 6));
      *o++ = char(0x80 | (c & 0x3F));
    } else if (c >= 0xD800 && c <= 0xDFFF) {
      o[0] = '\\';
      o[1] = 'u';
      o[2] = kHex[c >> 12];
      o[3] = kHex[(c >> 8) & 0xF];
      o[4] = kHex[(c >> 4) & 0xF];
      o[5] = kHex[c & 0xF];
      o += 6;
    } else if (c < 0x10000) {
      *o++ = char(0xE0 | (c >> 12));
      *o++ = char(0x80 | ((c >> 6) & 0x3F));
      *o++ = char(0x80 | (c & 0x3F));
    } else {
      *o++ = char(0xF0 | (c >> 18));
      *o++ = char(0x80 | ((c >> 12) & 0x3F));
      *o++ = char(0x80 | ((c >> 6) & 0x3F));
      *o++ = char(0x80 | (c & 0x3F));
    }
  }
  *o++ = '"';
  w.advance(out);
  return 0;
}

// Whether any of the 8 ASCII bytes in x needs an escape in a JSON string: a control
// character (< 0x20), '"' or '\\'. Exact for bytes < 0x80 (the caller's text is ASCII):
// "has a byte < n" and "has a zero byte" are the classic word-at-a-time tests.
static inline bool needs_escape8(uint64_t x) {
  const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
  uint64_t ctrl = (x - ones * 0x20) & ~x & high;
  uint64_t q = x ^ (ones * uint64_t('"'));
  uint64_t b = x ^ (ones * uint64_t('\\'));
  return (ctrl | ((q - ones) & ~q & high) | ((b - ones) & ~b & high)) != 0;
}

int write_ascii(Writer& w, const char* s, Py_ssize_t n) {
  // Fast path: nothing to escape (the common case) is one copy. The scan goes 16 bytes at a
  // time where SSE2 is there (every x86-64), then 8, until a block holds a byte to escape,
  // then byte by byte from that block on.
  Py_ssize_t i = 0;
#if defined(__SSE2__)
  // ASCII only: as signed bytes, the controls are exactly the values below 0x20.
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                space = _mm_set1_epi8(0x20);
  for (; i + 16 <= n; i += 16) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                               _mm_cmplt_epi8(x, space));
    if (_mm_movemask_epi8(hit) != 0) break;
  }
#endif
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    std::memcpy(&x, s + i, 8);
    if (needs_escape8(x)) break;
  }
  for (; i < n; i++) {
    if (g_escape[uint8_t(s[i])]) break;
  }
  if (i == n) {
    if (w.reserve(size_t(n) + 2) < 0) return -1;
    char* o = w.cursor();
    o[0] = '"';
    std::memcpy(o + 1, s, size_t(n));
    o[n + 1] = '"';
    w.advance(size_t(n) + 2);
    return 0;
  }
  return write_chars(w, reinterpret_cast<const uint8_t*>(s), n);
}

int write_float(Writer& w, double d) {
  if (!std::isfinite(d)) return raise_encode("Out of range float values are not JSON compliant");
  char* s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
  if (!s) return -1;
  int r = w.put(s, std::strlen(s));
  PyMem_Free(s);
  return r;
}

int write_long(Writer& w, PyObject* obj) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (!overflow) return write_int64(w, v);
  PyObject* text = PyLong_Type.tp_repr(obj);  // what json.dumps uses (int_max_str_digits too)
  if (!text) return -1;
  Py_ssize_t n;
  const char* u = PyUnicode_AsUTF8AndSize(text, &n);
  int r = u ? w.put(u, size_t(n)) : -1;
  Py_DECREF(text);
  return r;
}

int write_any(Writer& w, PyObject* obj, Path& path);

// A dict key, coerced like json.dumps does.
int write_key(Writer& w, PyObject* key) {
  if (PyUnicode_Check(key)) return write_str(w, key);
  if (PyFloat_Check(key)) {
    if (w.put_char('"') < 0 || write_float(w, PyFloat_AS_DOUBLE(key)) < 0) return -1;
    return w.put_char('"');
  }
  if (key == Py_True) return w.put("\"true\"", 6);
  if (key == Py_False) return w.put("\"false\"", 7);
  if (key == Py_None) return w.put("\"null\"", 6);
  if (PyLong_Check(key)) {
    if (w.put_char('"') < 0 || write_long(w, key) < 0) return -1;
    return w.put_char('"');
  }
  PyErr_Format(g_encode_error, "keys must be str, int, float, bool or None, not %.100s",
               Py_TYPE(key)->tp_name);
  return -1;
}

int write_member(Writer& w, PyObject* key, PyObject* value, bool first, Path& path) {
  if (!first && w.put_char(',') < 0) return -1;
  if (write_key(w, key) < 0 || w.put_char(':') < 0) return -1;
  return write_any(w, value, path);
}

int write_dict(Writer& w, PyObject* dict, Path& path) {
  if (PyDict_GET_SIZE(dict) == 0) return w.put("{}", 2);
  if (path.push(dict) < 0) return -1;
  if (Py_EnterRecursiveCall(" while encoding a JSON object")) {
    path.pop();
    return -1;
  }
  int r = w.put_char('{');
  if (r == 0 && PyDict_CheckExact(dict)) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    bool first = true;
    while (PyDict_Next(dict, &pos, &key, &value)) {
      Py_INCREF(key);
      Py_INCREF(value);
      r = write_member(w, key, value, first, path);
      Py_DECREF(key);
      Py_DECREF(value);
      if (r < 0) break;
      first = false;
    }
  } else if (r == 0) {
    PyObject* items = PyMapping_Items(dict);  // json.dumps calls items() on subclasses
    if (!items) {
      r = -1;
    } else {
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject* item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
          PyErr_SetString(PyExc_ValueError, "items must return 2-tuples");
          r = -1;
          break;
        }
        if ((r = write_member(w, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1), i == 0,
                              path)) < 0)
          break;
      }
      Py_DECREF(items);
    }
  }
  if (r == 0) r = w.put_char('}');
  Py_LeaveRecursiveCall();
  path.pop();
  return r;
}

int write_list(Writer& w, PyObject* seq, Path& path) {
  PyObject* fast = PySequence_Fast(seq, "_iterencode_list needs a sequence");
  if (!fast) return -1;
  int r = 0;
  if (PySequence_Fast_GET_SIZE(fast) == 0) {
    r = w.put("[]", 2);
    Py_DECREF(fast);
    return r;
  }
  if (path.push(seq) < 0) {
    Py_DECREF(fast);
    return -1;
  }
  if (Py_EnterRecursiveCall(" while encoding a JSON object")) {
    path.pop();
    Py_DECREF(fast);
    return -1;
  }
  r = w.put_char('[');
  for (Py_ssize_t i = 0; r == 0 && i < PySequence_Fast_GET_SIZE(fast); i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
    Py_INCREF(item);
    if (i > 0) r = w.put_char(',');
    if (r == 0) r = write_any(w, item, path);
    Py_DECREF(item);
  }
  if (r == 0) r = w.put_char(']');
  Py_LeaveRecursiveCall();
  path.pop();
  Py_DECREF(fast);
  return r;
}

int write_any(Writer& w, PyObject* obj, Path& path) {
  if (obj == Py_None) return w.put("null", 4);
  if (obj == Py_True) return w.put("true", 4);
  if (obj == Py_False) return w.put("false", 5);
  PyTypeObject* t = Py_TYPE(obj);
  if (t == &PyUnicode_Type || PyUnicode_Check(obj)) return write_str(w, obj);
  if (t == &PyLong_Type || PyLong_Check(obj)) return write_long(w, obj);
  if (t == &PyFloat_Type || PyFloat_Check(obj)) return write_float(w, PyFloat_AS_DOUBLE(obj));
  if (PyList_Check(obj) || PyTuple_Check(obj)) return write_list(w, obj, path);
  if (PyDict_Check(obj)) return write_dict(w, obj, path);
  if (PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(g_rawjson))) {
    if (check_raw(obj) < 0) return -1;
    return w.put(PyBytes_AS_STRING(obj), size_t(PyBytes_GET_SIZE(obj)));
  }
  PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(t), "__name__");
  if (!name) return -1;
  PyErr_Format(g_encode_error, "Object of type %U is not JSON serializable", name);
  Py_DECREF(name);
  return -1;
}

}  // namespace

int Writer::grow(size_t extra) {
  size_t want = len_ + extra;
  size_t nc = cap_ ? cap_ : 256;
  while (nc < want) nc *= 2;
  char* p = static_cast<char*>(std::realloc(data_, nc));
  if (!p) {
    PyErr_NoMemory();
    return -1;
  }
  data_ = p;
  cap_ = nc;
  return 0;
}

void encode_init(PyObject* rawjson_type, PyObject* encode_error) {
  g_rawjson = rawjson_type;
  g_encode_error = encode_error;
}

int write_str(Writer& w, PyObject* str) {
#if PY_VERSION_HEX < 0x030C0000
  if (PyUnicode_READY(str) < 0) return -1;
#endif
  Py_ssize_t n = PyUnicode_GET_LENGTH(str);
  switch (PyUnicode_KIND(str)) {
    case PyUnicode_1BYTE_KIND:
      if (PyUnicode_IS_ASCII(str))
        return write_ascii(w, reinterpret_cast<const char*>(PyUnicode_1BYTE_DATA(str)), n);
      return write_chars(w, PyUnicode_1BYTE_DATA(str), n);
    case PyUnicode_2BYTE_KIND:
      return write_chars(w, PyUnicode_2BYTE_DATA(str), n);
    default:
      return write_chars(w, PyUnicode_4BYTE_DATA(str), n);
  }
}

int write_int64(Writer& w, long long v) {
  char buf[24];
  char* end = buf + sizeof(buf);
  char* p = end;
  unsigned long long u = v < 0 ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
  do {
    *--p = char('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) *--p = '-';
  return w.put(p, size_t(end - p));
}

int check_raw(PyObject* raw) {
  const char* s = PyBytes_AS_STRING(raw);
  Py_ssize_t n = PyBytes_GET_SIZE(raw);
  if (std::memchr(s, '\n', size_t(n))) return raise_encode("RawJson value contains a newline");
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!is_json_ws(uint8_t(s[i]))) return 0;
  }
  return raise_encode("RawJson value is empty");
}

int write_value(Writer& w, PyObject* obj) {
  Path path;
  if (write_any(w, obj, path) < 0) return convert_error();
  return 0;
}

}  // namespace acp_fast
