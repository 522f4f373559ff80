// acp_fast: byte-level helpers of the conductor's forwarding path; see acp_forward.h.
#include "acp_forward.h"

#include <cstring>

namespace acp_fast {

namespace {

inline bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

inline size_t skip_ws(const char* p, size_t i, size_t n) {
  while (i < n && ws(p[i])) i++;
  return i;
}

// p[i] == '"': the index after the closing quote (n when unterminated).
inline size_t string_end(const char* p, size_t i, size_t n) {
  i++;
  while (i < n) {
    const void* q = std::memchr(p + i, '"', n - i);
    if (!q) return n;
    size_t j = size_t(static_cast<const char*>(q) - p);
    size_t k = j;  // count the backslashes right before the quote
    while (k > i && p[k - 1] == '\\') k--;
    if (((j - k) & 1) == 0) return j + 1;
    i = j + 1;
  }
  return n;
}

// The index after the value starting at p[i] (validated JSON).
size_t value_end(const char* p, size_t i, size_t n) {
  char c = p[i];
  if (c == '"') return string_end(p, i, n);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    while (i < n) {
      c = p[i];
      if (c == '"') {
        i = string_end(p, i, n);
        continue;
      }
      if (c == '{' || c == '[') {
        depth++;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      i++;
    }
    return n;
  }
  while (i < n && !ws(p[i]) && p[i] != ',' && p[i] != '}' && p[i] != ']') i++;
  return i;
}

inline bool has_backslash(const char* p, size_t n) { return std::memchr(p, '\\', n) != nullptr; }

inline bool key_is(const char* k, size_t kn, const char* name) {
  size_t len = std::strlen(name);
  return kn == len && std::memcmp(k, name, len) == 0;
}

}  // namespace

bool unwrap_envelope(const char* p, size_t n, EnvelopeInner& out) {
  out = EnvelopeInner();
  bool have_method = false, have_params = false;
  size_t i = skip_ws(p, 0, n);
  if (i >= n || p[i] != '{') return false;
  i = skip_ws(p, i + 1, n);
  if (i < n && p[i] == '}') return false;  // no method
  while (i < n) {
    if (p[i] != '"') return false;
    size_t ke = string_end(p, i, n);
    const char* k = p + i + 1;
    size_t kn = ke - i - 2;
    if (ke > n || ke < i + 2 || has_backslash(k, kn)) return false;
    i = skip_ws(p, ke, n);
    if (i >= n || p[i] != ':') return false;
    size_t vs = skip_ws(p, i + 1, n);
    if (vs >= n) return false;
    size_t ve = value_end(p, vs, n);
    if (key_is(k, kn, "method")) {
      if (have_method || p[vs] != '"' || has_backslash(p + vs, ve - vs)) return false;
      have_method = true;
      out.ms = vs;
      out.me = ve;
    } else if (key_is(k, kn, "params")) {
      if (have_params) return false;
      have_params = true;
      char c = p[vs];
      if (c == '{' || c == '[') {
        out.ps = long(vs);
        out.pe = long(ve);
      } else if (c != 'n') {
        return false;  // a scalar: the Python path answers -32602
      }
    } else if (key_is(k, kn, "jsonrpc") || key_is(k, kn, "id") || key_is(k, kn, "result") ||
               key_is(k, kn, "error")) {
      return false;
    }
    i = skip_ws(p, ve, n);
    if (i < n && p[i] == ',') {
      i = skip_ws(p, i + 1, n);
      continue;
    }
    if (i < n && p[i] == '}') return have_method;
    return false;
  }
  return false;
}

bool claimed_method_token(const char* p, size_t n) {
  if (n < 2) return true;
  const char* s = p + 1;
  size_t len = n - 2;
  return key_is(s, len, "initialize") || key_is(s, len, "$/cancel_request") ||
         key_is(s, len, "_proxy/initialize") || key_is(s, len, "proxy/initialize");
}

}  // namespace acp_fast
