"""Property-based differential tests (hypothesis): both twins, eager and lazy, any chunking.

Random JSON-RPC traffic -- valid requests/notifications/responses rendered with random
whitespace, escapes and number spellings, malformed lines (truncations, wrong types, junk and
invalid UTF-8, duplicate keys, non-standard numbers, lone surrogates, random mutations of
valid lines), batches, blank lines, CRLF, nesting around ``max_depth`` and lines around
``max_line_size`` -- is fed whole, byte by byte and split at random points, and every frame
is compared through a normalised description (kind, typed id, method, error, decoded
params/result, raw bytes, params_raw/result_raw, forward() bytes, malformed
raw/code/reason/response_shaped, BatchReply slots and error replies).

* ``test_chunking_invariance`` -- within one twin (runs for ``py`` even without the compiled
  twin): whole == byte-by-byte == random splits, and eager == lazy.
* ``test_twins_agree`` -- ``_engine_py`` and ``_engine_c`` give identical descriptions.
* encoder properties: both twins' encoders give identical bytes, equal to ``json.dumps``
  without ``RawJson``, and encode->decode round trips across the twins.

Example counts are modest so the suite stays fast (``ACP_FAST_HYPOTHESIS_SCALE=N`` multiplies
them for a soak run); the ``ci`` profile (conftest) is derandomized and database-less.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

# ACP_FAST_HYPOTHESIS_SCALE=N multiplies every example count (soak runs; default 1).
_SCALE = max(1, int(os.environ.get("ACP_FAST_HYPOTHESIS_SCALE", "1") or 1))
SETTINGS = settings(max_examples=100 * _SCALE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MID = settings(max_examples=70 * _SCALE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(max_examples=50 * _SCALE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DEFAULT_DEPTH = 128

# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------

ASTRAL = st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF)
TRICKY_CHARS = st.sampled_from(['"', "\\", "/", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028", "\u2029",
                                "\ufeff", "\u00e9", "\u6f22", "\U0001f600", "[", "{", "]", "}", ":", ","])
TEXT = st.text(st.one_of(st.characters(codec="utf-8"), ASTRAL, TRICKY_CHARS), max_size=12)
KEYS = st.one_of(TEXT, st.sampled_from(["id", "method", "params", "result", "error", "jsonrpc", "a", "b"]))
INTS = st.one_of(
    st.integers(-(2**31), 2**31),
    st.integers(-(2**63) - 2, 2**63 + 2),
    st.integers(2**63 - 3, 2**64 + 3),
    st.integers(-(10**40), 10**40),
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1]),
)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=12,
)
VALID_IDS = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -(2**63), 2**63 - 1]), TEXT)
METHODS = st.one_of(st.sampled_from(["initialize", "session/new", "session/update", "$/cancel_request", "", "m"]), TEXT)
PARAMS = st.one_of(st.dictionaries(KEYS, VALUES, max_size=4), st.lists(VALUES, max_size=4))
WS = st.sampled_from(["", "", "", " ", "\t", "  ", " \r ", "\r"])


# ---------------------------------------------------------------------------------------
# Rendering JSON text with random (valid) spellings
# ---------------------------------------------------------------------------------------


def _escape_char(ch: str, upper: bool) -> str:
    cp = ord(ch)
    if cp >= 0x10000:
        cp -= 0x10000
        hi, lo = 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)
        s = f"\\u{hi:04x}\\u{lo:04x}"
    else:
        s = f"\\u{cp:04x}"
    return s.upper().replace("\\U", "\\u") if upper else s


@st.composite
def render_str(draw, s: str) -> str:
    mode = draw(st.integers(0, 3))
    if mode == 0:
        return json.dumps(s, ensure_ascii=False)
    if mode == 1:
        return json.dumps(s, ensure_ascii=True)
    flags = draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s)))
    upper = draw(st.booleans())
    out = []
    for ch, esc in zip(s, flags, strict=True):
        if esc:
            out.append(_escape_char(ch, upper))
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])
    return '"' + "".join(out) + '"'


@st.composite
def render(draw, v: Any) -> str:
    """Valid JSON text for ``v`` with random whitespace, escapes and number spellings."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        if v == 0 and draw(st.integers(0, 9)) == 0:
            return "-0"
        return str(v)
    if isinstance(v, float):
        return draw(st.sampled_from([repr(v), "%.17g" % v, "%.17e" % v, ("%.17E" % v).replace("E+", "E")]))
    if isinstance(v, str):
        return draw(render_str(v))
    if isinstance(v, list):
        parts = [draw(WS) + draw(render(x)) + draw(WS) for x in v]
        return "[" + ",".join(parts) + draw(WS) + "]"
    if isinstance(v, dict):
        items = list(v.items())
        if items and draw(st.integers(0, 7)) == 0:  # a duplicate (non-envelope-level) key
            items.append((items[0][0], draw(SCALARS)))
        parts = [draw(WS) + draw(render_str(k)) + draw(WS) + ":" + draw(WS) + draw(render(x)) + draw(WS)
                 for k, x in items]
        return "{" + ",".join(parts) + draw(WS) + "}"
    if isinstance(v, Raw):
        return v.text
    raise AssertionError(type(v))


class Raw:
    """A member value given as literal JSON text (possibly invalid on purpose)."""

    def __init__(self, text: str) -> None:
        self.text = text


# ---------------------------------------------------------------------------------------
# Envelopes
# ---------------------------------------------------------------------------------------


ENVELOPE_KEY_SPELLINGS = {
    "id": ["id", "i\\u0064", "\\u0069d"],
    "method": ["method", "\\u006dethod"],
    "params": ["params", "p\\u0061rams"],
    "result": ["result", "r\\u0065sult"],
    "error": ["error", "\\u0065rror"],
    "jsonrpc": ["jsonrpc", "js\\u006Fnrpc"],
}


@st.composite
def envelope(draw, members: list[tuple[str, Any]]) -> bytes:
    """Render an object from ``(key, value)`` pairs in random order with random spellings."""
    members = list(members)
    if draw(st.integers(0, 5)) == 0:
        members.append((draw(st.sampled_from(["_meta", "extra", "x"])), draw(VALUES)))
    if draw(st.integers(0, 30)) == 0 and members:  # a duplicate envelope key
        members.append(draw(st.sampled_from(members)))
    order = draw(st.permutations(range(len(members)))) if draw(st.booleans()) else range(len(members))
    parts = []
    for i in order:
        k, v = members[i]
        if k in ENVELOPE_KEY_SPELLINGS and draw(st.integers(0, 9)) == 0:
            key = '"' + draw(st.sampled_from(ENVELOPE_KEY_SPELLINGS[k])) + '"'
        else:
            key = json.dumps(k)
        parts.append(draw(WS) + key + draw(WS) + ":" + draw(WS) + draw(render(v)) + draw(WS))
    return ("{" + ",".join(parts) + draw(WS) + "}").encode("utf-8", "surrogatepass")


V = ("jsonrpc", "2.0")


@st.composite
def valid_message(draw) -> bytes:
    kind = draw(st.sampled_from(["request", "notification", "result", "error"]))
    if kind == "request":
        members = [V, ("id", draw(VALID_IDS)), ("method", draw(METHODS))]
    elif kind == "notification":
        members = [V, ("method", draw(METHODS))]
    elif kind == "result":
        return draw(envelope([V, ("id", draw(VALID_IDS)), ("result", draw(VALUES))]))
    else:
        error: dict[str, Any] = {"code": draw(st.integers(-(2**31), 2**31 - 1)), "message": draw(TEXT)}
        if draw(st.booleans()):
            error["data"] = draw(VALUES)
        return draw(envelope([V, ("id", draw(VALID_IDS)), ("error", error)]))
    p = draw(st.one_of(st.none(), PARAMS, st.just("absent")))
    if p != "absent":
        members.append(("params", p))
    return draw(envelope(members))


ANY_ID = st.one_of(VALID_IDS, FLOATS, st.booleans(), st.lists(SCALARS, max_size=2), st.just({}),
                   st.sampled_from([2**63, -(2**63) - 1, 1.0]))
JSONRPC = st.one_of(st.just("2.0"), st.sampled_from(["1.0", "2", "2.00", 2.0, 2, None, "2.0 "]))


@st.composite
def wrong_types_message(draw) -> bytes:
    """An envelope whose members take random (often wrong) types and combinations."""
    members = []
    if draw(st.integers(0, 5)):
        members.append(("jsonrpc", draw(JSONRPC)))
    for key, strat in (("id", ANY_ID), ("method", st.one_of(METHODS, SCALARS)), ("params", VALUES),
                       ("result", VALUES), ("error", st.one_of(VALUES, st.fixed_dictionaries(
                           {"code": st.one_of(INTS, FLOATS, st.booleans()), "message": st.one_of(TEXT, SCALARS)},
                           optional={"data": VALUES})))):
        if draw(st.booleans()):
            members.append((key, draw(strat)))
    return draw(envelope(members))


BAD_TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1.7976931348623159e308", '"\\ud800"',
              '"\\udc00x"', '"\\ud83d\\u0041"', "01", "1.", ".5", "+1", "tru", "nul", "'s'", '"\\x41"',
              '"a\tb"', '"\x01"', "[1,]", "{,}", '{"a" 1}', '"\\ud83d\\ude00"', "-0", "-0.0", "1E+2", "[]"]


@st.composite
def bad_token_message(draw) -> bytes:
    token = draw(st.sampled_from(BAD_TOKENS))
    where = draw(st.sampled_from(["params", "id", "result", "method", "nested"]))
    if where == "params":
        return draw(envelope([V, ("method", "m"), ("params", [Raw(token)])]))
    if where == "nested":
        return draw(envelope([V, ("id", 1), ("result", {"a": [{"b": Raw(token)}]})]))
    if where == "id":
        return draw(envelope([V, ("id", Raw(token)), ("method", "m")]))
    if where == "method":
        return draw(envelope([V, ("method", Raw(token))]))
    return draw(envelope([V, ("id", 1), ("result", Raw(token))]))


@st.composite
def deep_message(draw, max_depth: int) -> bytes:
    """A request nested to a depth around ``max_depth`` (the envelope object is level 1)."""
    depth = draw(st.integers(max(1, max_depth - 3), max_depth + 3))
    inner = depth - 1
    if not inner:
        return b'{"jsonrpc":"2.0","method":"m"}'
    if draw(st.booleans()):
        payload = "[" * inner + "]" * inner
    else:
        payload = '{"k":' * (inner - 1) + "{}" + "}" * (inner - 1)
    return ('{"jsonrpc":"2.0","id":1,"method":"m","params":' + payload + "}").encode()


INVALID_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc3"]


@st.composite
def mutated(draw, line_strategy) -> bytes:
    line = bytearray(draw(line_strategy))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "utf8"]))
        pos = draw(st.integers(0, max(len(line) - 1, 0)))
        if op == "delete" and line:
            del line[pos]
        elif op == "insert":
            line[pos:pos] = draw(st.sampled_from([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b" ", b"0", b"\r",
                                                  b"\\u", b'"id":2,', b"\x00", b"\xef\xbb\xbf"]))
        elif op == "replace" and line:
            line[pos] = draw(st.integers(0x20, 0x7E))
        elif op == "truncate":
            del line[pos:]
        elif op == "utf8":
            line[pos:pos] = draw(st.sampled_from(INVALID_UTF8))
    return bytes(line).replace(b"\n", b"")


JUNK = st.one_of(
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"\xef\xbb\xbf{}", b"\xef\xbb\xbf" + b'{"jsonrpc":"2.0","method":"m"}', b"17", b"true", b"null",
                     b'"str"', b"[]", b"[ ]", b"{}", b"[", b"]", b"\x0c", b"\x00", b"\xc2\xa0"]),
)


@st.composite
def batch(draw, entry) -> bytes:
    entries = draw(st.lists(st.one_of(entry, entry, st.sampled_from([b"17", b"true", b"null", b'"s"', b"[]", b"{}",
                                                                      b'{"jsonrpc":"2.0","method":1}'])),
                            max_size=5))
    ws = [draw(WS).encode() for _ in range(len(entries) + 1)]
    return b"[" + b",".join(w + e for w, e in zip(ws, entries, strict=False)) + ws[-1] + b"]"


def line_strategy(max_depth: int):
    single = st.one_of(valid_message(), valid_message(), wrong_types_message(), bad_token_message())
    return st.one_of(
        valid_message(),
        valid_message(),
        wrong_types_message(),
        bad_token_message(),
        deep_message(max_depth),
        mutated(single),
        JUNK,
        batch(single),
        mutated(batch(single)),
        st.sampled_from([b"", b" ", b"\t", b"\r", b" \t "]),  # blank lines
    )


@st.composite
def traffic(draw):
    """``(data, decoder kwargs)``: lines joined with LF/CRLF, maybe an unterminated tail."""
    max_depth = draw(st.sampled_from([DEFAULT_DEPTH, DEFAULT_DEPTH, 3, draw(st.integers(1, 12))]))
    lines = draw(st.lists(line_strategy(max_depth), min_size=1, max_size=6))
    out = b""
    for line in lines:
        out += line + draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    if draw(st.booleans()):
        out = out[: len(out) - (2 if out.endswith(b"\r\n") else 1)]  # last line unterminated
    kwargs: dict[str, Any] = {"max_depth": max_depth}
    if draw(st.integers(0, 4)) == 0:
        longest = max(len(x) for x in out.split(b"\n"))
        kwargs["max_line_size"] = draw(st.integers(1, max(longest + 2, 2)))
    return out, kwargs


# ---------------------------------------------------------------------------------------
# Normalised frame description
# ---------------------------------------------------------------------------------------


def norm(v: Any) -> Any:
    """Type-exact, order-exact form of a decoded value (``1``, ``1.0`` and ``True`` differ)."""
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return (t.__name__, v)
    if t is float:
        return ("float", repr(v))
    if t is list:
        return ("list", tuple(norm(x) for x in v))
    if t is dict:
        return ("dict", tuple((norm(k), norm(x)) for k, x in v.items()))
    return ("other", t.__name__, repr(v))


def raw_of(engine, value: Any) -> Any:
    if value is None:
        return None
    assert isinstance(value, engine.RawJson), type(value)
    return bytes(value)


def describe(engine, frame: Any, lazy: bool) -> Any:
    kind = frame.kind
    if kind == engine.MALFORMED:
        assert isinstance(frame.raw, bytes)
        reply = engine.error_reply(frame)
        return ("malformed", bytes(frame.raw), frame.code, frame.reason, frame.response_shaped, reply)
    if kind == engine.BATCH:
        entries = tuple(describe(engine, e, lazy) for e in frame)
        assert len(frame) == len(frame.entries)
        r = engine.BatchReply(frame)
        slots = (r.slot_count, r.pending, r.needs_reply, tuple(r.slot(i) for i in range(len(frame))))
        r.fill_dropped()
        return ("batch", raw_of(engine, frame.raw), entries, slots, r.encode())
    assert kind in (engine.REQUEST, engine.NOTIFICATION, engine.RESPONSE), kind
    if lazy:  # raw bytes first, before anything is decoded
        raws = (raw_of(engine, frame.params_raw), raw_of(engine, frame.result_raw))
    desc = (
        "message", kind, norm(frame.id), norm(frame.method), norm(frame.error), frame.is_error,
        norm(frame.params), norm(frame.result), raw_of(engine, frame.raw),
        raw_of(engine, frame.params_raw), raw_of(engine, frame.result_raw),
        engine.forward(frame),
        engine.forward(frame, "fwd-\u00e9") if kind != engine.NOTIFICATION else None,
    )
    if lazy:
        assert raws == desc[9:11]
    return desc


def feed_chunks(engine, data: bytes, cuts: list[int], lazy: bool, kwargs: dict) -> list[Any]:
    dec = engine.Decoder(lazy=lazy, **kwargs)
    frames: list[Any] = []
    prev = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        frames += dec.feed(data[prev:cut])
        assert dec.buffered <= dec.max_line_size
        prev = cut
    frames += dec.feed_eof()
    return [describe(engine, f, lazy) for f in frames]


def run_all(engine, data: bytes, cuts: list[int], kwargs: dict) -> dict[str, Any]:
    out = {}
    for lazy in (False, True):
        mode = "lazy" if lazy else "eager"
        out[f"{mode}/whole"] = feed_chunks(engine, data, [], lazy, kwargs)
        out[f"{mode}/split"] = feed_chunks(engine, data, cuts, lazy, kwargs)
    out["eager/bytewise"] = feed_chunks(engine, data, list(range(1, len(data))), False, kwargs)
    out["lazy/bytewise"] = feed_chunks(engine, data, list(range(1, len(data))), True, kwargs)
    return out


@st.composite
def traffic_with_cuts(draw):
    data, kwargs = draw(traffic())
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=8))
    return data, kwargs, cuts


# ---------------------------------------------------------------------------------------
# Decoder properties
# ---------------------------------------------------------------------------------------


@MID
@given(case=traffic_with_cuts())
def test_chunking_invariance(engine, case):
    """Within one twin: whole == byte-by-byte == random splits, and eager == lazy."""
    data, kwargs, cuts = case
    note(f"data={data!r} kwargs={kwargs} cuts={cuts}")
    results = run_all(engine, data, cuts, kwargs)
    reference = results["eager/whole"]
    for name, frames in results.items():
        assert frames == reference, name


@SETTINGS
@given(case=traffic_with_cuts())
def test_twins_agree(both_engines, case):
    """The compiled twin gives exactly the reference twin's frames."""
    py, c = both_engines
    data, kwargs, cuts = case
    note(f"data={data!r} kwargs={kwargs} cuts={cuts}")
    for lazy in (False, True):
        expected = feed_chunks(py, data, [], lazy, kwargs)
        assert feed_chunks(c, data, [], lazy, kwargs) == expected, ("whole", lazy)
        assert feed_chunks(c, data, cuts, lazy, kwargs) == expected, ("split", lazy)
    assert feed_chunks(c, data, list(range(1, len(data))), True, kwargs) == feed_chunks(py, data, [], True, kwargs)


@FEW
@given(line=st.one_of(valid_message(), wrong_types_message(), bad_token_message(), mutated(valid_message()),
                      batch(valid_message())))
def test_twins_agree_single_line(both_engines, line):
    """One line at a time (shrinks to the smallest disagreeing line)."""
    py, c = both_engines
    note(f"line={line!r}")
    for lazy in (False, True):
        assert feed_chunks(c, line + b"\n", [], lazy, {}) == feed_chunks(py, line + b"\n", [], lazy, {}), lazy


@FEW
@given(data=st.binary(max_size=200), max_line_size=st.integers(1, 40))
def test_twins_agree_on_random_bytes(both_engines, data, max_line_size):
    py, c = both_engines
    for kwargs in ({}, {"max_line_size": max_line_size}):
        assert feed_chunks(c, data, [], False, kwargs) == feed_chunks(py, data, [], False, kwargs)
        assert feed_chunks(c, data, list(range(1, len(data))), True, kwargs) == feed_chunks(py, data, [], True, kwargs)


# ---------------------------------------------------------------------------------------
# Encoder properties
# ---------------------------------------------------------------------------------------


@st.composite
def with_raw(draw):
    """A value that may hold RawJson leaves (given as text; wrapped per twin)."""
    value = draw(VALUES)
    if draw(st.booleans()):
        text = draw(render(draw(VALUES))).strip() or "null"
        return {"raw": Raw(text), "v": value, "list": [Raw(text)]}
    return value


def materialise(engine, v: Any) -> Any:
    if isinstance(v, Raw):
        return engine.RawJson(v.text.encode("utf-8"))
    if isinstance(v, list):
        return [materialise(engine, x) for x in v]
    if isinstance(v, dict):
        return {k: materialise(engine, x) for k, x in v.items()}
    return v


def plain(v: Any) -> Any:
    """The JSON value a RawJson-holding value stands for."""
    if isinstance(v, Raw):
        return json.loads(v.text)
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def _encodings(engine, ident, method, params, code, message):
    p = materialise(engine, params)
    # JSON-RPC params must be an object or an array: wrap a scalar for the call encoders.
    call_params = p if p is None or isinstance(p, (dict, list)) else [p]
    return [
        engine.encode_request(ident, method, call_params),
        engine.encode_notification(method, call_params),
        engine.encode_result(ident, p),
        engine.encode_error(ident, code, message, p),
        engine.encode_error(ident, code),
        engine.encode_value(p),
    ]


ENC_ARGS = dict(ident=VALID_IDS, method=METHODS, params=st.one_of(st.none(), with_raw()),
                code=st.integers(-(2**31), 2**31 - 1), message=st.one_of(st.none(), TEXT))


@SETTINGS
@given(**ENC_ARGS)
def test_encoders_match_json_dumps(engine, ident, method, params, code, message):
    """Each encoder equals the compact json.dumps rendering (RawJson spliced verbatim)."""
    out = _encodings(engine, ident, method, params, code, message)
    for line in out[:5]:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
    value = json.loads(out[5])
    assert norm(value) == norm(plain(params))
    if not _contains_raw(params):
        assert out[5] == json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode()


def _contains_raw(v: Any) -> bool:
    if isinstance(v, Raw):
        return True
    if isinstance(v, list):
        return any(_contains_raw(x) for x in v)
    if isinstance(v, dict):
        return any(_contains_raw(x) for x in v.values())
    return False


@SETTINGS
@given(**ENC_ARGS)
def test_twins_encode_identically(both_engines, ident, method, params, code, message):
    py, c = both_engines
    assert _encodings(c, ident, method, params, code, message) == _encodings(py, ident, method, params, code, message)


@FEW
@given(ident=VALID_IDS, method=METHODS, params=st.one_of(st.none(), PARAMS), result=with_raw(),
       lazy=st.booleans(), data=st.data())
def test_cross_twin_round_trip(twin_pair, ident, method, params, result, lazy, data):
    """Encode with one twin, decode with the other: the same typed values come back."""
    enc, dec_mod = twin_pair
    lines = (enc.encode_request(ident, method, params) + enc.encode_notification(method, params)
             + enc.encode_result(ident, materialise(enc, result)) + enc.encode_error(ident, -32000, method, params))
    cuts = data.draw(st.lists(st.integers(0, len(lines)), max_size=4))
    d = dec_mod.Decoder(lazy=lazy)
    frames = []
    prev = 0
    for cut in sorted(cuts) + [len(lines)]:
        frames += d.feed(lines[prev:cut])
        prev = cut
    assert d.feed_eof() == []
    req, notif, res, err = frames
    expected_params = norm(params)
    assert (req.kind, norm(req.id), req.method, norm(req.params)) == (dec_mod.REQUEST, norm(ident), method, expected_params)
    assert (notif.kind, notif.method, norm(notif.params)) == (dec_mod.NOTIFICATION, method, expected_params)
    assert (res.kind, norm(res.id), norm(res.result)) == (dec_mod.RESPONSE, norm(ident), norm(plain(result)))
    expected_error = {"code": -32000, "message": method, "data": params}  # data=None is sent
    assert norm(err.error) == norm(expected_error) and norm(err.id) == norm(ident)
    # forward() with the decoding twin, decoded again by the encoding twin
    (f,) = enc.Decoder().feed(dec_mod.forward(req, 7))
    assert (f.id, f.method, norm(f.params)) == (7, method, expected_params)


BAD_ENC = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, object(), {1, 2}, b"x", 1j]),
)


@FEW
@given(good=VALUES, bad=BAD_ENC, path=st.lists(st.sampled_from(["list", "dict"]), max_size=3))
def test_unencodable_values_raise_encode_error_in_both_twins(both_engines, errors, good, bad, path):
    value: Any = bad
    for step in path:
        value = [good, value] if step == "list" else {"ok": good, "bad": value}
    for engine in both_engines:
        with pytest.raises(errors.EncodeError):
            engine.encode_value(value)
        with pytest.raises(errors.EncodeError):
            engine.encode_result(1, value)
        with pytest.raises(errors.EncodeError):
            engine.encode_request(1, "m", [value])
