// acp_fast: byte-level helpers of the conductor's forwarding path (Forwarder in
// acp_fast/_engine_c.pyx; the pure twin in acp_fast/_engine_py.py is the reference).
//
// Everything here works on JSON that the line parser has already validated (acp_parse),
// so it only has to find boundaries: no number, escape or UTF-8 checks are repeated.
#pragma once

#include <cstddef>

namespace acp_fast {

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
