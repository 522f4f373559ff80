"""Encoders: golden bytes, key order, RawJson splicing, errors, ``forward`` and round trips
through the decoder of both twins (encode with one twin, decode with the other).

Reference: ``notes/protocol.md`` §1.1 (7: key order; params / data omitted when absent; no
embedded newline) and the encoder docstrings of ``acp_fast/_engine_py.py``.
"""

from __future__ import annotations

import json
import math
import re

import pytest

# ---------------------------------------------------------------------------------------
# Golden bytes and key order
# ---------------------------------------------------------------------------------------


def test_encode_request_golden(engine):
    assert engine.encode_request(1, "session/new", {"cwd": "/", "mcpServers": []}) == (
        b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}\n'
    )
    assert engine.encode_request("a-b", "m", [1, "x"]) == b'{"jsonrpc":"2.0","id":"a-b","method":"m","params":[1,"x"]}\n'
    assert engine.encode_request(None, "m", {}) == b'{"jsonrpc":"2.0","id":null,"method":"m","params":{}}\n'


def test_encode_request_params_omitted_when_none(engine):
    assert engine.encode_request(7, "m") == b'{"jsonrpc":"2.0","id":7,"method":"m"}\n'
    assert engine.encode_request(7, "m", None) == b'{"jsonrpc":"2.0","id":7,"method":"m"}\n'
    assert engine.encode_request(7, "m", []) == b'{"jsonrpc":"2.0","id":7,"method":"m","params":[]}\n'


def test_encode_notification_golden(engine):
    assert engine.encode_notification("session/update", {"u": 1}) == (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"u":1}}\n'
    )
    assert engine.encode_notification("n") == b'{"jsonrpc":"2.0","method":"n"}\n'
    assert engine.encode_notification("n", None) == b'{"jsonrpc":"2.0","method":"n"}\n'


def test_encode_result_golden(engine):
    assert engine.encode_result(1, {"a": [True, False, None]}) == b'{"jsonrpc":"2.0","id":1,"result":{"a":[true,false,null]}}\n'
    assert engine.encode_result("x", None) == b'{"jsonrpc":"2.0","id":"x","result":null}\n'
    assert engine.encode_result(None, 0) == b'{"jsonrpc":"2.0","id":null,"result":0}\n'


def test_encode_error_golden(engine):
    assert engine.encode_error(1, -32601) == b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}\n'
    assert engine.encode_error(1, -32601, data="x/y") == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found","data":"x/y"}}\n'
    )
    assert engine.encode_error("r", 5, "custom", {"k": [1]}) == (
        b'{"jsonrpc":"2.0","id":"r","error":{"code":5,"message":"custom","data":{"k":[1]}}}\n'
    )


def test_encode_error_data_none_is_included(engine):
    assert engine.encode_error(1, -32603, data=None) == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":null}}\n'
    )


@pytest.mark.parametrize(
    "code,message",
    [(-32700, "Parse error"), (-32600, "Invalid request"), (-32602, "Invalid params"), (-32603, "Internal error"),
     (-32800, "Request cancelled"), (-32000, "Authentication required"), (-32002, "Resource not found"),
     (-32022, "Unsupported protocol version"), (12345, "Error")],
)
def test_encode_error_default_messages(engine, code, message):
    assert json.loads(engine.encode_error(None, code))["error"] == {"code": code, "message": message}


def test_encode_error_int32_bounds(engine, errors):
    assert b'"code":2147483647' in engine.encode_error(1, 2**31 - 1)
    assert b'"code":-2147483648' in engine.encode_error(1, -(2**31))
    for code in (2**31, -(2**31) - 1, 1.0, "1", True, None):
        with pytest.raises(errors.EncodeError):
            engine.encode_error(1, code)


def test_encode_error_message_must_be_str(engine, errors):
    with pytest.raises(errors.EncodeError):
        engine.encode_error(1, 1, 5)


def test_key_order(engine):
    def keys(line):
        return list(json.loads(line))

    assert keys(engine.encode_request(1, "m", {"z": 1, "a": 2})) == ["jsonrpc", "id", "method", "params"]
    assert list(json.loads(engine.encode_request(1, "m", {"z": 1, "a": 2}))["params"]) == ["z", "a"]
    assert keys(engine.encode_notification("m", [1])) == ["jsonrpc", "method", "params"]
    assert keys(engine.encode_result(1, 1)) == ["jsonrpc", "id", "result"]
    line = engine.encode_error(1, 1, "m", 3)
    assert keys(line) == ["jsonrpc", "id", "error"]
    assert list(json.loads(line)["error"]) == ["code", "message", "data"]


@pytest.mark.parametrize(
    "ident,text",
    [(0, b"0"), (-1, b"-1"), (2**63 - 1, b"9223372036854775807"), (-(2**63), b"-9223372036854775808"),
     ("", b'""'), ("1", b'"1"'), ("\u00e9\n", '"\u00e9\\n"'.encode()), (None, b"null")],
)
def test_ids_encoded(engine, ident, text):
    assert engine.encode_result(ident, 1) == b'{"jsonrpc":"2.0","id":' + text + b',"result":1}\n'
    assert engine.encode_request(ident, "m") == b'{"jsonrpc":"2.0","id":' + text + b',"method":"m"}\n'


@pytest.mark.parametrize("ident", [2**63, -(2**63) - 1, 1.0, True, False, [1], {"a": 1}, b"1"])
def test_invalid_ids_rejected(engine, errors, ident):
    with pytest.raises(errors.EncodeError):
        engine.encode_request(ident, "m")
    with pytest.raises(errors.EncodeError):
        engine.encode_result(ident, 1)
    with pytest.raises(errors.EncodeError):
        engine.encode_error(ident, 1)


@pytest.mark.parametrize("params", [5, "x", True, 1.5, b"{}"])
def test_scalar_params_rejected(engine, errors, params):
    # protocol.md §1.2 rule 15: params must be an object or an array; our own decoder
    # rejects anything else, so the encoders refuse to write it.
    with pytest.raises(errors.EncodeError, match="params must be a JSON object or array"):
        engine.encode_request(1, "m", params)
    with pytest.raises(errors.EncodeError, match="params must be a JSON object or array"):
        engine.encode_notification("m", params)


def test_rawjson_params_must_hold_object_or_array(engine, errors):
    assert engine.encode_notification("m", engine.RawJson(b' [1]')) == b'{"jsonrpc":"2.0","method":"m","params": [1]}\n'
    assert engine.encode_request(1, "m", (1, 2)) == b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1,2]}\n'
    for raw in (b"5", b'"x"', b" null"):
        with pytest.raises(errors.EncodeError, match="RawJson holds neither"):
            engine.encode_request(1, "m", engine.RawJson(raw))


@pytest.mark.parametrize("method", [1, None, b"m", ["m"]])
def test_method_must_be_str(engine, errors, method):
    with pytest.raises(errors.EncodeError):
        engine.encode_request(1, method)
    with pytest.raises(errors.EncodeError):
        engine.encode_notification(method)


# ---------------------------------------------------------------------------------------
# encode_value: json.dumps parity, strings, numbers
# ---------------------------------------------------------------------------------------


PARITY_VALUES = [
    None, True, False, 0, -1, 2**63, -(2**100), 10**40, 0.1, -0.0, 1e16, 1e-7, 1.5e300, 5e-324, 123456789.0,
    "", "plain", "é漢😀", "\x00\x01\x1f\x7f", "\"\\/", "\b\f\n\r\t", "\u2028\u2029", "\ufeff",
    [], {}, [1, [2, [3, {}]]], {"a": {"b": [None, 1.25, "x"]}}, {"z": 1, "a": 2, "m": 3},
    (1, 2), ({"t": (3,)},), {1: "int key", 2.5: "float key", None: "none key", False: "bool key"},
]


@pytest.mark.parametrize("value", PARITY_VALUES, ids=[repr(v)[:30] for v in PARITY_VALUES])
def test_encode_value_matches_json_dumps(engine, value):
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    assert engine.encode_value(value) == expected


def test_encode_value_golden_strings(engine):
    assert engine.encode_value("a\nb") == b'"a\\nb"'
    assert engine.encode_value("\x00\x1f") == b'"\\u0000\\u001f"'
    assert engine.encode_value("\x7f") == b'"\x7f"'
    assert engine.encode_value("\u2028") == b'"\xe2\x80\xa8"'
    assert engine.encode_value("\U0001f600") == b'"\xf0\x9f\x98\x80"'
    assert engine.encode_value('"\\') == b'"\\"\\\\"'


def test_ascii_escapes_found_at_every_offset_and_length(engine):
    """Every character an ASCII string must escape (controls, '"', '\\'), at every offset
    of strings up to 72 long and next to the neighbours of the escape set (0x1f, 0x20, 0x21,
    0x23, 0x5b, 0x5d, 0x7f), encodes as json.dumps does: the block scan of the compiled
    encoder misses none (its 16- and 8-byte blocks and the tail)."""
    escaped = [chr(c) for c in range(0x20)] + ['"', "\\"]
    neighbours = ["\x1f", " ", "!", "#", "[", "]", "\x7f", "a"]
    for length in range(0, 73):
        base = "".join("abcdefgh"[i % 8] for i in range(length))
        assert engine.encode_value(base) == json.dumps(base).encode()
        for at in range(length):
            for ch in escaped + neighbours:
                text = base[:at] + ch + base[at + 1:]
                assert engine.encode_value(text) == json.dumps(text, ensure_ascii=False).encode(), (length, at, ch)


def test_encode_value_golden_numbers(engine):
    assert engine.encode_value([1e16, 1e-7, 0.1, -0.0, 2.0, 1e22, 123456789012345678901234567890]) == (
        b"[1e+16,1e-07,0.1,-0.0,2.0,1e+22,123456789012345678901234567890]"
    )


@pytest.mark.parametrize("text", ["a\nb", "\r\n", "x\u2028y\u2029", "\n" * 5, "\u0085"])
def test_no_embedded_newline(engine, text):
    lines = [
        engine.encode_request(text, text, {text: [text]}),
        engine.encode_notification(text, [text]),
        engine.encode_result(text, {"k": text}),
        engine.encode_error(text, 1, text, text),
    ]
    for line in lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert b"\r" not in line
    req, note, res, err = (json.loads(line) for line in lines)
    assert (req["id"], req["method"], req["params"]) == (text, text, {text: [text]})
    assert (note["method"], note["params"]) == (text, [text])
    assert (res["id"], res["result"]) == (text, {"k": text})
    assert err["error"] == {"code": 1, "message": text, "data": text}


def test_encoders_return_bytes(engine):
    for out in (engine.encode_value(1), engine.encode_request(1, "m"), engine.encode_notification("m"),
                engine.encode_result(1, 1), engine.encode_error(1, 1), engine.encode_batch([b"1\n"])):
        assert type(out) is bytes


# ---------------------------------------------------------------------------------------
# RawJson splicing
# ---------------------------------------------------------------------------------------


def test_rawjson_spliced_verbatim_at_top_level(engine):
    raw = engine.RawJson(b'{ "a" : [1, 2] }')
    assert engine.encode_request(1, "m", raw) == b'{"jsonrpc":"2.0","id":1,"method":"m","params":{ "a" : [1, 2] }}\n'
    assert engine.encode_notification("m", raw) == b'{"jsonrpc":"2.0","method":"m","params":{ "a" : [1, 2] }}\n'
    assert engine.encode_result(1, raw) == b'{"jsonrpc":"2.0","id":1,"result":{ "a" : [1, 2] }}\n'
    assert engine.encode_error(1, 1, "x", raw) == b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x","data":{ "a" : [1, 2] }}}\n'
    assert engine.encode_value(raw) == b'{ "a" : [1, 2] }'


def test_rawjson_spliced_verbatim_nested(engine):
    raw = engine.RawJson(b'[ 1.50 , "\\u00e9" ]')
    value = {"x": raw, "y": [raw, {"z": raw}], "s": "\x00", "n": 1}
    assert engine.encode_value(value) == (
        b'{"x":[ 1.50 , "\\u00e9" ],"y":[[ 1.50 , "\\u00e9" ],{"z":[ 1.50 , "\\u00e9" ]}],"s":"\\u0000","n":1}'
    )
    assert engine.encode_result(3, [engine.RawJson(b"null"), engine.RawJson(b'"s"')]) == (
        b'{"jsonrpc":"2.0","id":3,"result":[null,"s"]}\n'
    )


def test_rawjson_from_a_lazy_frame_is_spliced(engine):
    line = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{ "k" : "\\u00e9" }}'
    (m,) = engine.Decoder(lazy=True).feed(line + b"\n")
    assert engine.encode_request(2, "n", m.params_raw) == b'{"jsonrpc":"2.0","id":2,"method":"n","params":{ "k" : "\\u00e9" }}\n'
    assert engine.encode_value({"p": m.params_raw}) == b'{"p":{ "k" : "\\u00e9" }}'


@pytest.mark.parametrize("raw", [b'{"a":\n1}', b"\n", b"1\n", b'[1,\r\n2]'])
def test_rawjson_with_newline_is_rejected(engine, errors, raw):
    r = engine.RawJson(raw)
    for call in (lambda: engine.encode_value(r), lambda: engine.encode_value({"k": [r]}),
                 lambda: engine.encode_request(1, "m", r), lambda: engine.encode_result(1, [r]),
                 lambda: engine.encode_error(1, 1, "m", {"d": r})):
        with pytest.raises(errors.EncodeError):
            call()


def test_rawjson_is_bytes(engine):
    r = engine.RawJson(b"[1]")
    assert isinstance(r, bytes) and r == b"[1]"
    assert r.decode_json() == [1]


def test_plain_bytes_are_not_rawjson(engine, errors):
    with pytest.raises(errors.EncodeError):
        engine.encode_value(b"[1]")
    with pytest.raises(errors.EncodeError):
        engine.encode_value({"a": bytearray(b"1")})


# ---------------------------------------------------------------------------------------
# Encode errors
# ---------------------------------------------------------------------------------------


def _circular_list():
    a: list = []
    a.append(a)
    return a


def _circular_dict():
    d: dict = {}
    d["self"] = {"again": d}
    return d


def _too_deep():
    v: list = []
    for _ in range(100_000):
        v = [v]
    return v


BAD_VALUES = [
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param({"a": [1, math.nan]}, id="nested-nan"),
    pytest.param(object(), id="object"),
    pytest.param({1, 2}, id="set"),
    pytest.param(b"x", id="bytes"),
    pytest.param(1 + 2j, id="complex"),
    pytest.param({(1, 2): 3}, id="tuple-key"),
    pytest.param(_circular_list(), id="circular-list"),
    pytest.param(_circular_dict(), id="circular-dict"),
    pytest.param(_too_deep(), id="too-deep"),
]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_encode_error_is_type_and_value_error(engine, errors, value):
    for call in (lambda: engine.encode_value(value), lambda: engine.encode_request(1, "m", [value]),
                 lambda: engine.encode_notification("m", {"v": value}), lambda: engine.encode_result(1, value),
                 lambda: engine.encode_error(1, 1, "m", value)):
        with pytest.raises(errors.EncodeError) as info:
            call()
        assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
        assert isinstance(info.value, errors.AcpFastError)


@pytest.mark.parametrize(
    "value",
    ["\ud800", "a\udfffb", ["ok", {"k": "\udc00\ud800"}], {"\ud800": 1}, "\ud83d\ude00 \U0001f600 é"],
    ids=["lone-high", "lone-low", "nested-reversed", "key", "pair-as-two-chars"],
)
def test_lone_surrogate_is_written_as_its_escape(engine, value):
    # UTF-8 cannot carry a lone surrogate: it is written as the escape json.dumps(...,
    # ensure_ascii=True) writes, everything else as UTF-8 (ensure_ascii=False).
    out = engine.encode_value(value)
    text = out.decode("utf-8")  # valid UTF-8
    assert json.loads(text) == json.loads(json.dumps(value))
    assert re.search(r"\\ud[89a-f][0-9a-f]{2}", text)
    assert "é" in text or "é" not in json.dumps(value, ensure_ascii=False)


def test_lone_surrogate_in_method_or_id_is_escaped(engine):
    assert engine.encode_request(1, "m\ud800") == b'{"jsonrpc":"2.0","id":1,"method":"m\\ud800"}\n'
    assert engine.encode_result("\udc00", 1) == b'{"jsonrpc":"2.0","id":"\\udc00","result":1}\n'
    assert engine.encode_error(1, 5, "\ud800", ["\udfff"]) == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":5,"message":"\\ud800","data":["\\udfff"]}}\n')


def test_encode_error_with_rawjson_sibling(engine, errors):
    with pytest.raises(errors.EncodeError):
        engine.encode_value({"raw": engine.RawJson(b"1"), "bad": math.nan})
    with pytest.raises(errors.EncodeError):
        engine.encode_value([engine.RawJson(b"1"), object()])


# ---------------------------------------------------------------------------------------
# encode_batch
# ---------------------------------------------------------------------------------------


def test_encode_batch_golden(engine):
    a = engine.encode_result(1, "a")
    b = engine.encode_error(2, -32600)
    assert engine.encode_batch([a, b]) == (
        b'[{"jsonrpc":"2.0","id":1,"result":"a"},{"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"Invalid request"}}]\n'
    )
    assert engine.encode_batch(iter([a])) == b"[" + a[:-1] + b"]\n"


def test_encode_batch_never_empty(engine, errors):
    with pytest.raises(errors.EncodeError):
        engine.encode_batch([])
    with pytest.raises(errors.EncodeError):
        engine.encode_batch(iter(()))


@pytest.mark.parametrize("line", [b"{}", b"{}\n\n", b"{\n}\n", b""])
def test_encode_batch_needs_single_terminated_lines(engine, errors, line):
    with pytest.raises(errors.EncodeError):
        engine.encode_batch([engine.encode_result(1, 1), line])


# ---------------------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------------------


FORWARD_LINES = [
    b'{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":1}}',
    b'{ "params" : { "x" : [ 1 , 2 ] } , "id" : "old-id" , "method":"\xc3\xa9\xe6\xbc\xa2", "jsonrpc":"2.0" }',
    b'{"jsonrpc":"2.0","method":"\xf0\x9f\x98\x80","i\\u0064":null}',
    b'{"jsonrpc":"2.0","id":9223372036854775807,"result":{"r":"\xc3\xa9"}}',
    b'{"jsonrpc":"2.0","error":{"code":1,"message":"\xc3\xa9"},"id":-5}',
]


@pytest.mark.parametrize("line", FORWARD_LINES)
@pytest.mark.parametrize("new_id,new_text", [(42, b"42"), ("n\xe9w", '"n\xe9w"'.encode()), (None, b"null")])
def test_forward_splices_new_id_keeping_every_other_byte(engine, lazy, line, new_id, new_text):
    (m,) = engine.Decoder(lazy=lazy).feed(line + b"\n")
    assert m.kind in (engine.REQUEST, engine.RESPONSE)
    old = json.dumps(m.id, ensure_ascii=False).encode() if m.id != "old-id" else b'"old-id"'
    if b'"i\\u0064":null' in line:
        old = b"null"
    head, sep, tail = line.rpartition(old)
    assert sep
    assert engine.forward(m, new_id) == head + new_text + tail + b"\n"
    # Nothing else changed: decoding the forwarded line gives the same message but the id.
    (f,) = engine.Decoder(lazy=lazy).feed(engine.forward(m, new_id))
    assert (f.kind, f.method, f.id) == (m.kind, m.method, new_id)
    assert (f.params_raw, f.result_raw, f.error) == (m.params_raw, m.result_raw, m.error)


@pytest.mark.parametrize("line", FORWARD_LINES + [b'{"jsonrpc":"2.0","method":"n","params":[ 1 ]}'])
def test_forward_without_id_is_verbatim(engine, lazy, line):
    (m,) = engine.Decoder(lazy=lazy).feed(line + b"\r\n")
    assert engine.forward(m) == line + b"\n"


def test_forward_notification_with_id_raises(engine, errors, lazy):
    (n,) = engine.Decoder(lazy=lazy).feed(b'{"jsonrpc":"2.0","method":"n","params":{"id":1}}\n')
    assert n.kind == engine.NOTIFICATION
    with pytest.raises(errors.EncodeError):
        engine.forward(n, 1)
    with pytest.raises(errors.EncodeError):
        engine.forward(n, None)


@pytest.mark.parametrize("bad", [2**63, 1.5, True, [1]])
def test_forward_with_invalid_id_raises(engine, errors, bad):
    (m,) = engine.Decoder().feed(b'{"jsonrpc":"2.0","id":1,"method":"m"}\n')
    with pytest.raises(errors.EncodeError):
        engine.forward(m, bad)


def test_forward_keeps_a_batch_entrys_own_bytes(engine, lazy):
    e0 = '{"jsonrpc":"2.0","id":"\u00e9","method":"\u6f22","params":{ "k":"\U0001f600" }}'.encode()
    e1 = b'{ "jsonrpc" : "2.0" , "id" : 1 , "method" : "m" , "params" : [ 1 ] }'
    e2 = b'{"jsonrpc":"2.0","method":"n"}'
    line = b"[ " + e0 + b" , 17 ,\t" + e1 + b"," + e2 + b" ]"
    (b,) = engine.Decoder(lazy=lazy).feed(line + b"\n")
    assert engine.forward(b[0]) == e0 + b"\n"
    assert engine.forward(b[0], 5) == e0.replace('"\u00e9"'.encode(), b"5") + b"\n"
    assert engine.forward(b[2], "x") == e1.replace(b'"id" : 1', b'"id" : "x"') + b"\n"
    assert engine.forward(b[3]) == e2 + b"\n"
    assert b[2].params_raw == b"[ 1 ]"


# ---------------------------------------------------------------------------------------
# Round trips across twins
# ---------------------------------------------------------------------------------------


ROUND_TRIP_PARAMS = [
    {"text": "line1\nline2\u2028\u2029", "emoji": "\U0001f600\U00010000", "nul": "\x00"},
    [2**63, -(2**63) - 1, 10**50, 0.1, -0.0, 1e308, 5e-324, True, False, None],
    {"deep": [[[[{"a": [[[]]]}]]]], "": {"": ""}},
    {"\u00e9\u6f22": ["\ufeff", "\\u0041", "\"quoted\""]},
    [],
    {},
]


@pytest.mark.parametrize("params", ROUND_TRIP_PARAMS)
@pytest.mark.parametrize("ident", [0, -(2**63), 2**63 - 1, "", "1", "\U0001f600 id", None])
def test_round_trip_request(twin_pair, lazy, ident, params):
    enc, dec = twin_pair
    line = enc.encode_request(ident, "a/\u00e9", params)
    (m,) = dec.Decoder(lazy=lazy).feed(line)
    assert m.kind == dec.REQUEST
    assert m.id == ident and type(m.id) is type(ident)
    assert m.method == "a/\u00e9"
    assert m.params == params
    assert m.raw == line[:-1]


@pytest.mark.parametrize("params", ROUND_TRIP_PARAMS)
def test_round_trip_notification_result_error(twin_pair, lazy, params):
    enc, dec = twin_pair
    lines = enc.encode_notification("n", params) + enc.encode_result("r", params) + enc.encode_error(3, -32602, None, params)
    n, r, e = dec.Decoder(lazy=lazy).feed(lines)
    assert (n.kind, n.method, n.params) == (dec.NOTIFICATION, "n", params)
    assert (r.kind, r.id, r.result) == (dec.RESPONSE, "r", params)
    assert (e.kind, e.id, e.error) == (dec.RESPONSE, 3, {"code": -32602, "message": "Invalid params", "data": params})


def test_round_trip_batch_and_forward(twin_pair, lazy):
    enc, dec = twin_pair
    line = enc.encode_batch([enc.encode_request(1, "a", {"x": "\u2028"}), enc.encode_notification("b"),
                             enc.encode_result("z", [1.5])])
    (b,) = dec.Decoder(lazy=lazy).feed(line)
    assert b.kind == dec.BATCH
    assert [(e.kind, e.id) for e in b] == [(dec.REQUEST, 1), (dec.NOTIFICATION, None), (dec.RESPONSE, "z")]
    # forward with the decoding twin, decode the result with the encoding twin
    (f,) = enc.Decoder(lazy=lazy).feed(dec.forward(b[0], "new"))
    assert (f.id, f.method, f.params) == ("new", "a", {"x": "\u2028"})


def test_round_trip_rawjson(twin_pair):
    enc, dec = twin_pair
    line = enc.encode_result(1, {"a": enc.RawJson(b' [ 1 , "\\ud83d\\ude00" ] ')})
    (m,) = dec.Decoder(lazy=True).feed(line)
    assert m.result_raw == b'{"a": [ 1 , "\\ud83d\\ude00" ] }'
    assert m.result == {"a": [1, "\U0001f600"]}
