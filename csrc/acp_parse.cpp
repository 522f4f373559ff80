// acp_fast: line parser of the compiled engine; see acp_parse.h.
//
// Parsing strategy. simdjson's stage 1 (runtime-dispatched: AVX2/AVX-512 where the CPU has
// them) checks the whole line for UTF-8, unescaped control characters inside strings and
// unclosed strings, and produces the index of every structural character and of the first
// byte of every scalar. Our own "stage 2" below walks that index once, checking the JSON
// grammar with a recursive descent (so nothing is skipped unchecked, in lazy mode too) and
// every scalar: number grammar and range (acp_values: scan_number), literal spelling, and
// string escapes (acp_values: unescape, which refuses bad escapes and keeps unpaired
// surrogates like json.loads and the pure twin do). It records what the envelope needs (kind, typed id, method,
// error object, spans of the id and of params/result) and, in eager mode, builds the Python
// objects directly. Values nobody asked for (lazy payloads, unknown members) are only
// validated, by the iterative skip_value(); escapes are validated once per line
// (validate_escapes), so lines without a backslash never search their strings for one.
// Decoder.feed indexes runs of complete lines with one stage 1 call (index_region /
// parse_in_region). We do not use simdjson's On-Demand front end: it does not validate what
// it skips, and its skipping takes an unconsumed string followed by ':' for an object key
// (`["a": 1]` passes), so a validating walk over it needs as much code as this one, and is
// slower.
#include "acp_parse.h"

#include <cmath>
#include <new>
#include <string>
#include <string_view>

#include "acp_values.h"
#include "simdjson.h"

namespace acp_fast {

static_assert(ACP_PADDING >= simdjson::SIMDJSON_PADDING, "ACP_PADDING too small for simdjson");

// The one translation of simdjson error codes: success, a memory problem (raised as
// MemoryError), or anything else, which means the line is not valid JSON. Whether invalid
// JSON is in fact invalid UTF-8 is decided afterwards with utf8_valid(), so that UTF-8 takes
// precedence exactly as in the pure twin (which decodes before it parses).
static Walk translate(simdjson::error_code e) {
  switch (e) {
    case simdjson::SUCCESS:
      return WALK_OK;
    case simdjson::MEMALLOC:
    case simdjson::CAPACITY:
      PyErr_NoMemory();
      return WALK_PYERR;
    default:
      return WALK_INVALID;
  }
}

bool utf8_valid(const char* p, size_t n) { return simdjson::validate_utf8(p, n); }

const char* active_simdjson_implementation() {
  static const std::string name = simdjson::get_active_implementation()->name();
  return name.c_str();
}

namespace {

// Hard cap on nesting whatever max_depth says, so that the recursive descent cannot exhaust
// the C stack: MAX_DEPTH_LIMIT of the Python layer (acp_fast/_strictjson.py), which the
// Decoder enforces too. 512 levels of value()/object() fit a 256 KiB thread stack with
// room to spare, in sanitizer builds as well (tests/test_engine_limits.py).
constexpr int kMaxNesting = 512;

enum EnvKey : int { K_JSONRPC = 0, K_ID, K_METHOD, K_PARAMS, K_RESULT, K_ERROR, K_NONE = -1 };

inline int envelope_key(std::string_view k) {
  switch (k.size()) {
    case 2:
      return (k[0] == 'i' && k[1] == 'd') ? K_ID : K_NONE;
    case 5:
      return std::memcmp(k.data(), "error", 5) == 0 ? K_ERROR : K_NONE;
    case 6:
      if (std::memcmp(k.data(), "method", 6) == 0) return K_METHOD;
      if (std::memcmp(k.data(), "params", 6) == 0) return K_PARAMS;
      if (std::memcmp(k.data(), "result", 6) == 0) return K_RESULT;
      return K_NONE;
    case 7:
      return std::memcmp(k.data(), "jsonrpc", 7) == 0 ? K_JSONRPC : K_NONE;
    default:
      return K_NONE;
  }
}

// What one envelope object holds, gathered while it is validated.
struct EnvState {
  unsigned seen = 0;
  bool dup = false;
  bool jsonrpc_ok = false;
  bool id_valid = false;
  char params_first = 0;  // first byte of the params value: '{', '[', 'n' (null), ...
  PyObject* id = nullptr;
  PyObject* method = nullptr;
  PyObject* error = nullptr;
  PyObject* params = nullptr;
  PyObject* result = nullptr;
  Py_ssize_t ids = -1, ide = -1, ps = -1, pe = -1, rs = -1, re = -1;
  EnvState() = default;
  EnvState(const EnvState&) = delete;
  EnvState& operator=(const EnvState&) = delete;
  ~EnvState() {
    Py_XDECREF(id);
    Py_XDECREF(method);
    Py_XDECREF(error);
    Py_XDECREF(params);
    Py_XDECREF(result);
  }
};

bool valid_error_object(PyObject* error) {
  if (!error || !PyDict_CheckExact(error)) return false;
  PyObject* code = PyDict_GetItemString(error, "code");
  if (!code || !PyLong_CheckExact(code)) return false;
  int overflow = 0;
  long long c = PyLong_AsLongLongAndOverflow(code, &overflow);
  if (overflow || c < -2147483648LL || c > 2147483647LL) return false;
  PyObject* message = PyDict_GetItemString(error, "message");
  return message && PyUnicode_CheckExact(message);
}

// The envelope rules of the pure twin's _classify (module docstring, steps 3-6).
void finish_envelope(EnvState& st, Entry& ent) {
  const unsigned J = 1u << K_JSONRPC, I = 1u << K_ID, M = 1u << K_METHOD, P = 1u << K_PARAMS,
                 R = 1u << K_RESULT, E = 1u << K_ERROR;
  bool has_method = st.seen & M, has_result = st.seen & R, has_error = st.seen & E;
  bool has_id = st.seen & I;
  ent.kind = KIND_MALFORMED;
  if (st.dup) {
    ent.reason = REASON_DUPLICATE_KEY;
    ent.response_shaped = !has_method && (has_result || has_error);
    return;
  }
  if (!(st.seen & J) || !st.jsonrpc_ok) {
    ent.reason = REASON_JSONRPC;
    ent.response_shaped = !has_method && (has_result || has_error);
    return;
  }
  if (has_method) {
    if (has_result || has_error) {
      ent.reason = REASON_ENVELOPE;
      return;
    }
    if (!st.method) {
      ent.reason = REASON_METHOD;
      return;
    }
    if (has_id && !st.id_valid) {
      ent.reason = REASON_ID;
      return;
    }
    bool has_params = st.seen & P;
    if (has_params && st.params_first != '{' && st.params_first != '[' && st.params_first != 'n') {
      ent.reason = REASON_PARAMS;
      return;
    }
    ent.kind = has_id ? KIND_REQUEST : KIND_NOTIFICATION;
    if (has_id) {
      ent.id = st.id;
      st.id = nullptr;
      ent.ids = st.ids;
      ent.ide = st.ide;
    }
    ent.method = st.method;
    st.method = nullptr;
    if (has_params && st.params_first != 'n') {
      ent.ps = st.ps;
      ent.pe = st.pe;
      ent.value = st.params;
      st.params = nullptr;
    }
    return;
  }
  if (has_result == has_error || !has_id) {
    ent.reason = REASON_ENVELOPE;
    ent.response_shaped = has_result || has_error;
    return;
  }
  if (!st.id_valid) {
    ent.reason = REASON_ID;
    ent.response_shaped = true;
    return;
  }
  if (has_error && !valid_error_object(st.error)) {
    ent.reason = REASON_ERROR_OBJECT;
    ent.response_shaped = true;
    return;
  }
  ent.kind = KIND_RESPONSE;
  ent.id = st.id;
  st.id = nullptr;
  ent.ids = st.ids;
  ent.ide = st.ide;
  if (has_error) {
    ent.error = st.error;
    st.error = nullptr;
  } else {
    ent.ps = st.rs;
    ent.pe = st.re;
    ent.value = st.result;
    st.result = nullptr;
  }
}

}  // namespace

// Stage 2 over simdjson's structural index: see the comment at the top of this file.
class TokenWalker final : public WalkerBase {
 public:
  TokenWalker() : decode_buf_(ACP_PADDING), unescape_buf_(0) {}

  int parse(const char* p, size_t n, bool lazy, int max_depth, Entry& top,
            std::vector<Entry>& entries) override {
    region_ok_ = false;  // stage 1 below overwrites the region's index
    lstart_ = 0;
    return parse_common(p, n, lazy, max_depth, top, entries, nullptr, 0);
  }

  int index_region(const char* p, size_t n) override {
    region_ok_ = false;
    region_ = p;  // (also for the line-by-line fallback)
    Walk w = index(p, n);
    if (w == WALK_PYERR) return -1;
    if (w == WALK_OK) {
      region_idx_ = idx_;
      region_n_ = n_;
      region_len_ = n;
      next_bs_ = 0;
      bs_scanned_ = false;
      cursor_ = 0;
      region_ok_ = true;
    }
    return 0;
  }

  int parse_in_region(size_t off, size_t n, bool lazy, int max_depth, Entry& top,
                      std::vector<Entry>& entries, Py_ssize_t& origin) override {
    if (!region_ok_) {
      origin = Py_ssize_t(off);
      lstart_ = 0;
      return parse_common(region_ + off, n, lazy, max_depth, top, entries, nullptr, 0);
    }
    origin = 0;
    // The line's tokens start at the cursor (after the tokens of lines skipped for their
    // length). Strategy: where they end is not searched for; the walk is given every token
    // left in the run, and at_line_end() checks that it stopped exactly at the line's end (a
    // valid line's value ends at its last token; a walk that runs past it fails the line).
    const uint32_t* const idx = region_idx_;
    uint32_t k0 = cursor_;
    while (k0 < region_n_ && idx[k0] < off) k0++;
    lstart_ = off;
    // Escapes: one search for the next backslash of the run serves every line before it.
    if (next_bs_ < off || !bs_scanned_) {
      bs_scanned_ = true;
      const void* q = std::memchr(region_ + off, '\\', region_len_ - off);
      next_bs_ = q ? size_t(static_cast<const char*>(q) - region_) : region_len_;
    }
    walked_ = false;
    int r = parse_common(region_ + off, n, lazy, max_depth, top, entries, idx + k0,
                         region_n_ - k0);
    if (walked_) {
      cursor_ = k0 + pos_;
    } else {  // a line refused (or blank): skip its tokens
      const uint32_t end = uint32_t(off + n);
      while (k0 < region_n_ && idx[k0] < end) k0++;
      cursor_ = k0;
    }
    return r;
  }

 private:
  // One line p[0..n) (= buf_ + lstart_ in region mode). With `tokens` (region mode) the
  // line's slice of the region index, else stage 1 runs on the line here.
  int parse_common(const char* p, size_t n, bool lazy, int max_depth, Entry& top,
                   std::vector<Entry>& entries, const uint32_t* tokens, uint32_t ntokens) {
    top.reset();
    entries.clear();
    size_t a = 0;
    while (a < n && is_json_ws(uint8_t(p[a]))) a++;
    if (a == n) {
      top.kind = KIND_SKIP;
      return 0;
    }
    Walk w;
    if (n >= 3 && uint8_t(p[0]) == 0xEF && uint8_t(p[1]) == 0xBB && uint8_t(p[2]) == 0xBF) {
      w = WALK_INVALID;  // a BOM: json.loads refuses it
    } else {
      lazy_ = lazy;
      max_depth_ = max_depth < kMaxNesting ? max_depth : kMaxNesting;
      if (tokens) {
        buf_ = region_;
        len_ = lstart_ + n;
        idx_ = tokens;
        n_ = ntokens;
        pos_ = 0;
        // (next_bs_: see parse_in_region)
        bs_ = next_bs_ < lstart_ + n;
        w = !ntokens ? WALK_INVALID : bs_ ? validate_escapes(p, n) : WALK_OK;
      } else {
        w = start(p, n);
      }
      if (w == WALK_OK) w = parse_line(top, entries);
    }
    if (w == WALK_OK) {
      walked_ = true;
      return 0;
    }
    top.reset();
    entries.clear();
    if (w == WALK_PYERR) return -1;
    top.kind = KIND_MALFORMED;
    top.reason = utf8_valid(p, n) ? REASON_INVALID_JSON : REASON_INVALID_UTF8;
    top.start = Py_ssize_t(lstart_);
    top.end = Py_ssize_t(lstart_ + n);
    return 0;
  }

 public:
  PyObject* decode(const char* p, size_t n) override {
    if (!decode_buf_.assign(p, n)) return PyErr_NoMemory();
    region_ok_ = false;  // stage 1 below overwrites the region's index
    lstart_ = 0;
    lazy_ = false;
    max_depth_ = kMaxNesting;  // validated before, with the decoder's limit
    PyObject* out = nullptr;
    Walk w = start(decode_buf_.data(), n);
    if (w == WALK_OK) w = value(0, &out);
    if (w == WALK_OK && pos_ != n_) w = WALK_INVALID;
    if (w == WALK_OK) return out;
    Py_XDECREF(out);
    if (w == WALK_INVALID) PyErr_SetString(PyExc_ValueError, "acp_fast: invalid JSON in a validated span");
    return nullptr;
  }

 private:
  std::unique_ptr<simdjson::internal::dom_parser_implementation> impl_;
  size_t capacity_ = 0;
  PaddedBuffer decode_buf_;
  PaddedBuffer unescape_buf_;
  const char* buf_ = nullptr;  // what token offsets are relative to
  size_t lstart_ = 0;          // the line is buf_[lstart_, len_)
  size_t len_ = 0;
  // Region mode (index_region): one stage 1 run over many complete lines.
  const char* region_ = nullptr;
  const uint32_t* region_idx_ = nullptr;
  uint32_t region_n_ = 0;
  uint32_t cursor_ = 0;  // first token not consumed by an earlier line
  size_t region_len_ = 0;
  size_t next_bs_ = 0;  // offset of the first backslash at or after the current line
  bool bs_scanned_ = false;
  bool region_ok_ = false;
  bool walked_ = false;  // the last line's walk succeeded (pos_ is after its tokens)
  const uint32_t* idx_ = nullptr;
  uint32_t n_ = 0;
  uint32_t pos_ = 0;
  int max_depth_ = 128;
  bool lazy_ = false;
  bool bs_ = false;  // the line has a backslash (else no string needs unescaping)
  char stack_[kMaxNesting + 1];  // skip_value(): the open containers ('{' or '[')

  // Stage 1 over p[0..n) into impl_ (no checks beyond simdjson's).
  Walk index(const char* p, size_t n) {
    if (!impl_ || capacity_ < n) {
      size_t cap = n < 4096 ? 4096 : n + n / 4;
      simdjson::error_code e;
      if (!impl_) {
        e = simdjson::get_active_implementation()->create_dom_parser_implementation(cap, 64, impl_);
      } else {
        e = impl_->set_capacity(cap);
      }
      if (e) {
        impl_.reset();
        capacity_ = 0;
        PyErr_NoMemory();
        return WALK_PYERR;
      }
      capacity_ = cap;
    } else if (capacity_ > (size_t(16) << 20) && n < (size_t(1) << 20)) {
      // Give back the index of an unusually large line (keeping room for this one: a
      // capacity below n would fail stage 1 with CAPACITY, raised as MemoryError).
      size_t cap = n < 4096 ? 4096 : n + n / 4;
      if (impl_->set_capacity(cap) == simdjson::SUCCESS) capacity_ = cap;
    }
    simdjson::error_code e =
        impl_->stage1(reinterpret_cast<const uint8_t*>(p), n, simdjson::stage1_mode::regular);
    if (e) return translate(e);
    idx_ = impl_->structural_indexes.get();
    n_ = impl_->n_structural_indexes;
    return WALK_OK;
  }

  // Stage 1 over one line p[0..n), ready to walk.
  Walk start(const char* p, size_t n) {
    Walk w = index(p, n);
    if (w) return w;
    buf_ = p;
    len_ = n;
    pos_ = 0;
    if (!n_) return WALK_INVALID;
    return check_escapes(p, n);
  }

  // Strategy: escapes are rare, so they are validated once for the whole line (no copy)
  // and a line without a backslash skips every per-string escape search.
  Walk check_escapes(const char* p, size_t n) {
    bs_ = std::memchr(p, '\\', n) != nullptr;
    return bs_ ? validate_escapes(p, n) : WALK_OK;
  }

  // End of the scalar token at index i (trailing whitespace excluded).
  const char* token_end(uint32_t i) const {
    const char* e = buf_ + (i + 1 < n_ ? idx_[i + 1] : len_);
    const char* s = buf_ + idx_[i];
    while (e > s && is_json_ws(uint8_t(e[-1]))) e--;
    return e;
  }

  // The string token at pos_: its content (between the quotes). Advances.
  Walk string_content(const char*& s, size_t& n) {
    const char* b = buf_ + idx_[pos_];
    const char* e = token_end(pos_);
    if (e - b < 2 || e[-1] != '"') return WALK_INVALID;  // (b[0] is '"')
    pos_++;
    s = b + 1;
    n = size_t(e - b - 2);
    return WALK_OK;
  }

  Walk string(PyObject** out) {
    const char* s;
    size_t n;
    Walk w = string_content(s, n);
    if (w || !out) return w;
    if (!bs_) return (*out = make_str(s, n)) ? WALK_OK : WALK_PYERR;
    return string_value(s, n, out, unescape_buf_);
  }

  Walk number(PyObject** out, NumberInfo& info) {
    const char* s = buf_ + idx_[pos_];
    size_t n = size_t(token_end(pos_) - s);
    pos_++;
    Walk w = scan_number(s, n, info, out);
    if (w || !info.is_float) return w;
    double d;
    if ((w = parse_float_token(s, n, &d))) return w;
    info.f64 = d;
    if (out && !(*out = PyFloat_FromDouble(d))) return WALK_PYERR;
    return WALK_OK;
  }

  Walk atom(PyObject** out) {
    const char* s = buf_ + idx_[pos_];
    size_t n = size_t(token_end(pos_) - s);
    pos_++;
    PyObject* v;
    if (n == 4 && std::memcmp(s, "true", 4) == 0) {
      v = Py_True;
    } else if (n == 5 && std::memcmp(s, "false", 5) == 0) {
      v = Py_False;
    } else if (n == 4 && std::memcmp(s, "null", 4) == 0) {
      v = Py_None;
    } else {
      return WALK_INVALID;
    }
    if (out) {
      Py_INCREF(v);
      *out = v;
    }
    return WALK_OK;
  }

  // One value at pos_, inside a container at `depth` (0 at the root). Advances past it.
  // With out == NULL the value is only validated (skip_value).
  Walk value(int depth, PyObject** out) {
    if (!out) return skip_value(depth);
    if (pos_ >= n_) return WALK_INVALID;
    switch (buf_[idx_[pos_]]) {
      case '{':
        if (depth >= max_depth_) return WALK_INVALID;
        return object(depth + 1, out);
      case '[':
        if (depth >= max_depth_) return WALK_INVALID;
        return array(depth + 1, out);
      case '"':
        return string(out);
      case 't':
      case 'f':
      case 'n':
        return atom(out);
      case '-':
      case '0':
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
      case '7':
      case '8':
      case '9': {
        NumberInfo info;
        return number(out, info);
      }
      default:
        return WALK_INVALID;
    }
  }

  // Validation only: the value at pos_, inside a container at `depth`. Advances past it.
  // Strategy: lazy payloads are most of every line, so this is an iterative walk over the
  // index with an explicit container stack, touching each token once. A string needs no
  // check here: stage 1 guarantees it is closed (a non-blank byte after its closing quote
  // is a token of its own, which the grammar then refuses) and free of control
  // characters, and start() has validated every escape of the line.
  Walk skip_value(int depth) {
    const uint32_t n = n_;
    const uint32_t* const idx = idx_;
    const char* const buf = buf_;
    uint32_t i = pos_;
    int d = 0;  // containers opened here and not closed yet
    char c;
    if (i >= n) return WALK_INVALID;
    c = buf[idx[i]];
  value:
    switch (c) {
      case '{':
      case '[':
        if (depth + d >= max_depth_) return WALK_INVALID;
        stack_[d++] = c;
        if (++i >= n) return WALK_INVALID;
        if (c == '{') {
          c = buf[idx[i]];
          if (c != '}') goto key;
        } else {
          c = buf[idx[i]];
          if (c != ']') goto value;
        }
        i++;
        d--;
        break;
      case '"':
        i++;
        break;
      case 't':
      case 'f':
      case 'n': {
        pos_ = i;
        Walk w = atom(nullptr);
        if (w) return w;
        i = pos_;
        break;
      }
      case '-':
      case '0':
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
      case '7':
      case '8':
      case '9': {
        pos_ = i;
        NumberInfo info;
        Walk w = number(nullptr, info);
        if (w) return w;
        i = pos_;
        break;
      }
      default:
        return WALK_INVALID;
    }
  after:  // a value ended just before i
    if (d == 0) {
      pos_ = i;
      return WALK_OK;
    }
    if (i >= n) return WALK_INVALID;
    c = buf[idx[i++]];
    if (c == ',') {
      if (i >= n) return WALK_INVALID;
      c = buf[idx[i]];
      if (stack_[d - 1] == '{') goto key;
      goto value;
    }
    if (c != (stack_[d - 1] == '{' ? '}' : ']')) return WALK_INVALID;
    d--;
    goto after;
  key:  // c is the token at i, where an object key must be
    if (c != '"' || i + 1 >= n || buf[idx[i + 1]] != ':') return WALK_INVALID;
    i += 2;
    if (i >= n) return WALK_INVALID;
    c = buf[idx[i]];
    goto value;
  }

  // After a member or element: ',' (more follow: true) or the closing bracket (false).
  Walk next_or_close(char close, bool& more) {
    if (pos_ >= n_) return WALK_INVALID;
    char c = buf_[idx_[pos_++]];
    if (c == ',') {
      more = true;
      return WALK_OK;
    }
    if (c == close) {
      more = false;
      return WALK_OK;
    }
    return WALK_INVALID;
  }

  // A key at pos_ and the ':' after it; `key` is the unescaped key.
  Walk key_colon(std::string_view& key) {
    if (pos_ >= n_ || buf_[idx_[pos_]] != '"') return WALK_INVALID;
    const char* s;
    size_t n;
    Walk w = string_content(s, n);
    if (w) return w;
    if (!bs_) {
      key = std::string_view(s, n);
    } else if ((w = unescape(s, n, key, unescape_buf_))) {
      return w;
    }
    if (pos_ >= n_ || buf_[idx_[pos_]] != ':') return WALK_INVALID;
    pos_++;
    return WALK_OK;
  }

  // The object at pos_ ('{'), itself at `depth`.
  Walk object(int depth, PyObject** out) {
    pos_++;
    PyObject* dict = nullptr;
    if (out) {
      dict = PyDict_New();
      if (!dict) return WALK_PYERR;
    }
    Walk w = WALK_OK;
    if (pos_ < n_ && buf_[idx_[pos_]] == '}') {
      pos_++;
    } else {
      bool more = true;
      while (more) {
        std::string_view key;
        if ((w = key_colon(key))) break;
        if (!dict) {
          if ((w = value(depth, nullptr))) break;
        } else {
          PyObject* k = make_str(key.data(), key.size());
          if (!k) {
            w = WALK_PYERR;
            break;
          }
          PyObject* item = nullptr;
          if ((w = value(depth, &item))) {
            Py_DECREF(k);
            break;
          }
          int r = PyDict_SetItem(dict, k, item);
          Py_DECREF(k);
          Py_DECREF(item);
          if (r < 0) {
            w = WALK_PYERR;
            break;
          }
        }
        if ((w = next_or_close('}', more))) break;
      }
    }
    if (w) {
      Py_XDECREF(dict);
      return w;
    }
    if (out) *out = dict;
    return WALK_OK;
  }

  Walk array(int depth, PyObject** out) {
    pos_++;
    PyObject* list = nullptr;
    if (out) {
      list = PyList_New(0);
      if (!list) return WALK_PYERR;
    }
    Walk w = WALK_OK;
    if (pos_ < n_ && buf_[idx_[pos_]] == ']') {
      pos_++;
    } else {
      bool more = true;
      while (more) {
        if (!list) {
          if ((w = value(depth, nullptr))) break;
        } else {
          PyObject* item = nullptr;
          if ((w = value(depth, &item))) break;
          int r = PyList_Append(list, item);
          Py_DECREF(item);
          if (r < 0) {
            w = WALK_PYERR;
            break;
          }
        }
        if ((w = next_or_close(']', more))) break;
      }
    }
    if (w) {
      Py_XDECREF(list);
      return w;
    }
    if (out) *out = list;
    return WALK_OK;
  }

  // End of the value that ended just before pos_ and started at token `first`.
  const char* value_end(uint32_t first) const {
    char c = buf_[idx_[first]];
    if (c == '{' || c == '[') return buf_ + idx_[pos_ - 1] + 1;  // its closing bracket
    return token_end(first);
  }

  // The envelope object at pos_ ('{'), itself at `depth`: validated whole, members noted.
  Walk envelope(int depth, EnvState& st) {
    pos_++;
    if (pos_ < n_ && buf_[idx_[pos_]] == '}') {
      pos_++;
      return WALK_OK;
    }
    Walk w;
    bool more = true;
    while (more) {
      std::string_view key;
      if ((w = key_colon(key))) return w;
      int k = envelope_key(key);
      if (k == K_NONE) {
        if ((w = value(depth, nullptr))) return w;
      } else if (st.seen & (1u << k)) {
        st.dup = true;
        if ((w = value(depth, nullptr))) return w;
      } else {
        st.seen |= 1u << k;
        if (pos_ >= n_) return WALK_INVALID;
        uint32_t first = pos_;
        const char* s = buf_ + idx_[first];
        char c = *s;
        switch (k) {
          case K_JSONRPC:
            if (c == '"') {
              const char* cs;
              size_t cn;
              std::string_view sv;
              if ((w = string_content(cs, cn))) return w;
              if (!bs_) {
                sv = std::string_view(cs, cn);
              } else if ((w = unescape(cs, cn, sv, unescape_buf_))) {
                return w;
              }
              st.jsonrpc_ok = sv.size() == 3 && std::memcmp(sv.data(), "2.0", 3) == 0;
            } else if ((w = value(depth, nullptr))) {
              return w;
            }
            break;
          case K_ID:
            if (c == '"') {
              if ((w = string(&st.id))) return w;
              st.id_valid = true;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
              NumberInfo info;
              PyObject* num = nullptr;
              if ((w = number(&num, info))) return w;
              if (!info.is_float && info.fits_int64) {
                st.id = num;
                st.id_valid = true;
              } else {
                Py_DECREF(num);
              }
            } else {
              if ((w = value(depth, nullptr))) return w;
              st.id_valid = c == 'n';  // null (the only valid literal)
            }
            st.ids = s - buf_;
            st.ide = value_end(first) - buf_;
            break;
          case K_METHOD:
            if (c == '"') {
              if ((w = string(&st.method))) return w;
            } else if ((w = value(depth, nullptr))) {
              return w;
            }
            break;
          case K_PARAMS:
            if ((w = value(depth, lazy_ ? nullptr : &st.params))) return w;
            st.params_first = c;
            st.ps = s - buf_;
            st.pe = value_end(first) - buf_;
            break;
          case K_RESULT:
            if ((w = value(depth, lazy_ ? nullptr : &st.result))) return w;
            st.rs = s - buf_;
            st.re = value_end(first) - buf_;
            break;
          case K_ERROR:
            if ((w = value(depth, &st.error))) return w;
            break;
          default:
            break;
        }
      }
      if ((w = next_or_close('}', more))) return w;
    }
    return WALK_OK;
  }

  // Whether the walk of the line's value stopped exactly after its last token. (In region
  // mode the walk may run on into the next line's tokens; simdjson puts the input length
  // after the last index, so idx_[n_] is a valid read in both modes.)
  bool at_line_end() const {
    return (pos_ == n_ || idx_[pos_] >= len_) && idx_[pos_ - 1] < len_;
  }

  Walk parse_line(Entry& top, std::vector<Entry>& entries) {
    char c = buf_[idx_[0]];
    Walk w;
    top.start = Py_ssize_t(lstart_);
    top.end = Py_ssize_t(len_);
    if (c == '{') {
      EnvState st;
      if ((w = envelope(1, st))) return w;
      if (!at_line_end()) return WALK_INVALID;
      finish_envelope(st, top);
      return WALK_OK;
    }
    if (c == '[') {
      pos_++;
      if (pos_ < n_ && buf_[idx_[pos_]] == ']') {
        pos_++;
        if (!at_line_end()) return WALK_INVALID;
        top.kind = KIND_MALFORMED;
        top.reason = REASON_EMPTY_BATCH;
        return WALK_OK;
      }
      bool more = true;
      size_t count = 0;
      const size_t limit = max_batch;
      while (more) {
        if (pos_ >= n_) return WALK_INVALID;
        uint32_t first = pos_;
        if (++count > limit) {
          // Too many entries: validate the rest of the line, build nothing more.
          if ((w = value(1, nullptr))) return w;
          if ((w = next_or_close(']', more))) return w;
          continue;
        }
        Entry ent;
        if (buf_[idx_[first]] == '{') {
          if (max_depth_ < 2) return WALK_INVALID;
          EnvState st;
          if ((w = envelope(2, st))) return w;
          finish_envelope(st, ent);
        } else {
          if ((w = value(1, nullptr))) return w;
          ent.kind = KIND_MALFORMED;
          ent.reason = REASON_NOT_OBJECT;
        }
        ent.start = idx_[first];
        ent.end = value_end(first) - buf_;
        entries.push_back(std::move(ent));
        if ((w = next_or_close(']', more))) return w;
      }
      if (!at_line_end()) return WALK_INVALID;
      if (count > limit) {
        entries.clear();
        top.kind = KIND_MALFORMED;
        top.reason = REASON_BATCH_TOO_LARGE;
        return WALK_OK;
      }
      top.kind = KIND_BATCH;
      return WALK_OK;
    }
    if ((w = value(0, nullptr))) return w;
    if (!at_line_end()) return WALK_INVALID;
    top.kind = KIND_MALFORMED;
    top.reason = REASON_NOT_OBJECT;
    return WALK_OK;
  }
};

LineParser::LineParser() : scratch_(ACP_PADDING) {
  impl_.reset(new (std::nothrow) TokenWalker());
  impl_name_ = active_simdjson_implementation();
}

LineParser::~LineParser() = default;

int LineParser::parse(const char* p, size_t n, bool lazy, int max_depth) {
  try {
    return impl_->parse(p, n, lazy, max_depth, top, entries);
  } catch (const std::bad_alloc&) {  // std::vector growth: the only thing that can throw
    top.reset();
    entries.clear();
    PyErr_NoMemory();
    return -1;
  }
}

int LineParser::index_region(const char* p, size_t n) { return impl_->index_region(p, n); }

int LineParser::parse_in_region(size_t off, size_t n, bool lazy, int max_depth) {
  try {
    return impl_->parse_in_region(off, n, lazy, max_depth, top, entries, origin);
  } catch (const std::bad_alloc&) {
    top.reset();
    entries.clear();
    PyErr_NoMemory();
    return -1;
  }
}

PyObject* LineParser::decode(const char* p, size_t n) { return impl_->decode(p, n); }

void LineParser::release() {
  top.reset();
  entries.clear();
}

char* LineParser::scratch(size_t n) {
  if (!scratch_.reserve(n)) return nullptr;
  return scratch_.data();
}

void clear_string_caches() { clear_value_caches(); }

}  // namespace acp_fast
