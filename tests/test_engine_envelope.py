"""Envelope classification, strict JSON and lazy-mode rules (both twins, eager and lazy).

Reference: ``notes/protocol.md`` §1.2 (envelope), §3.1 (ids) and the module docstring of
``acp_fast/_engine_py.py`` (check order, reason strings, JSON policies).
"""

from __future__ import annotations

import json

import pytest

V = b'"jsonrpc":"2.0"'


def obj(*members: bytes) -> bytes:
    return b"{" + b",".join(members) + b"}"


def malformed(engine, frame, code, reason, response_shaped=False, raw=None):
    assert frame.kind == engine.MALFORMED, frame
    assert (frame.code, frame.reason, frame.response_shaped) == (code, reason, response_shaped), frame
    if raw is not None:
        assert frame.raw == raw


def invalid(engine, frame, reason, response_shaped=False):
    malformed(engine, frame, -32600, reason, response_shaped)


def invalid_json(engine, frame, raw=None):
    malformed(engine, frame, -32700, "invalid JSON", False, raw)


# ---------------------------------------------------------------------------------------
# Kinds
# ---------------------------------------------------------------------------------------


def test_request(engine, decode_one):
    m = decode_one(obj(V, b'"id":7', b'"method":"session/new"', b'"params":{"cwd":"/"}'))
    assert m.kind == engine.REQUEST
    assert (m.id, m.method, m.error, m.params, m.result) == (7, "session/new", None, {"cwd": "/"}, None)
    assert m.is_error is False
    assert m.result_raw is None


def test_notification(engine, decode_one):
    m = decode_one(obj(V, b'"method":"session/update"', b'"params":[1]'))
    assert m.kind == engine.NOTIFICATION
    assert (m.id, m.method, m.params, m.error) == (None, "session/update", [1], None)


def test_request_with_null_id_is_a_request(engine, decode_one):
    m = decode_one(obj(V, b'"id":null', b'"method":"m"'))
    assert m.kind == engine.REQUEST and m.id is None


def test_success_response(engine, decode_one):
    m = decode_one(obj(V, b'"id":"abc"', b'"result":{"ok":true}'))
    assert m.kind == engine.RESPONSE
    assert (m.id, m.method, m.error, m.result, m.params) == ("abc", None, None, {"ok": True}, None)
    assert m.is_error is False
    assert m.params_raw is None


def test_error_response(engine, decode_one):
    m = decode_one(obj(V, b'"id":3', b'"error":{"code":-32601,"message":"Method not found","data":"x/y"}'))
    assert m.kind == engine.RESPONSE
    assert m.id == 3 and m.method is None
    assert m.error == {"code": -32601, "message": "Method not found", "data": "x/y"}
    assert m.is_error is True
    assert m.result is None
    assert m.result_raw is None  # error responses have no result bytes
    assert m.params_raw is None


def test_response_with_null_id(engine, decode_one):
    m = decode_one(obj(V, b'"id":null', b'"error":{"code":-32700,"message":"Parse error"}'))
    assert m.kind == engine.RESPONSE and m.id is None and m.is_error


def test_key_order_does_not_matter(engine, decode_one):
    m = decode_one(b'{"params":{"a":1},"method":"m","id":1,"jsonrpc":"2.0"}')
    assert (m.kind, m.id, m.method, m.params) == (engine.REQUEST, 1, "m", {"a": 1})


def test_unknown_top_level_members_are_ignored(engine, decode_one):
    m = decode_one(obj(V, b'"id":1', b'"method":"m"', b'"extra":[1,{"b":2}]', b'"_meta":null'))
    assert (m.kind, m.id, m.method, m.params) == (engine.REQUEST, 1, "m", None)


def test_empty_method_string_is_a_method(engine, decode_one):
    m = decode_one(obj(V, b'"method":""'))
    assert m.kind == engine.NOTIFICATION and m.method == ""


def test_escaped_method_and_version_are_compared_decoded(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.\\u0030","id":1,"method":"\\u0073ession/new"}')
    assert (m.kind, m.method) == (engine.REQUEST, "session/new")


def test_escaped_envelope_key_names_are_envelope_keys(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","i\\u0064":5,"\\u006dethod":"m","p\\u0061rams":[true]}')
    assert (m.kind, m.id, m.method, m.params) == (engine.REQUEST, 5, "m", [True])


# ---------------------------------------------------------------------------------------
# Not an object
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [b"17", b"true", b"false", b"null", b'"text"', b"-1.5e3", b"  1  "])
def test_top_level_scalar_is_not_an_object(engine, decode_one, line):
    m = decode_one(line)
    invalid(engine, m, "not an object")
    assert m.raw == line


# ---------------------------------------------------------------------------------------
# jsonrpc
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version",
    [None, b'"2"', b'"2.00"', b'"1.0"', b'"2.0 "', b'" 2.0"', b"2.0", b"2", b"null", b"true", b'["2.0"]', b'"2.0\\u0000"'],
)
def test_jsonrpc_must_be_exactly_2_0(engine, decode_one, version):
    members = [b'"id":1', b'"method":"m"']
    if version is not None:
        members.insert(0, b'"jsonrpc":' + version)
    invalid(engine, decode_one(obj(*members)), "invalid jsonrpc version")


def test_bad_version_keeps_response_shape(engine, decode_one):
    invalid(engine, decode_one(b'{"jsonrpc":"1.0","id":1,"result":2}'), "invalid jsonrpc version", True)
    invalid(engine, decode_one(b'{"id":1,"error":{"code":1,"message":"m"}}'), "invalid jsonrpc version", True)
    invalid(engine, decode_one(b'{"jsonrpc":"1.0","method":"m","result":2}'), "invalid jsonrpc version", False)


# ---------------------------------------------------------------------------------------
# method / result / error combinations
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "members",
    [
        (b'"id":1', b'"method":"m"', b'"result":1'),
        (b'"id":1', b'"method":"m"', b'"error":{"code":1,"message":"x"}'),
        (b'"method":"m"', b'"result":null'),
        (b'"method":"m"', b'"error":{"code":1,"message":"x"}'),
    ],
)
def test_method_with_result_or_error_is_invalid_envelope(engine, decode_one, members):
    # Has a method, so it is not response-shaped: it is answered.
    invalid(engine, decode_one(obj(V, *members)), "invalid envelope", False)


def test_invalid_envelope_checked_before_method_type(engine, decode_one):
    invalid(engine, decode_one(obj(V, b'"id":1', b'"method":1', b'"result":1')), "invalid envelope")


@pytest.mark.parametrize("method", [b"1", b"null", b"true", b"[]", b'{"a":1}', b'["m"]'])
def test_method_must_be_a_string(engine, decode_one, method):
    invalid(engine, decode_one(obj(V, b'"id":1', b'"method":' + method)), "invalid method")


def test_method_checked_before_id(engine, decode_one):
    invalid(engine, decode_one(obj(V, b'"id":1.5', b'"method":1')), "invalid method")


@pytest.mark.parametrize(
    "members,shaped",
    [
        ((b'"id":1',), False),
        ((), False),
        ((b'"id":1', b'"result":1', b'"error":{"code":1,"message":"x"}'), True),
        ((b'"result":1',), True),  # missing id
        ((b'"error":{"code":1,"message":"x"}',), True),  # missing id
        ((b'"id":1', b'"params":{}'), False),
    ],
    ids=["id-only", "version-only", "result-and-error", "result-no-id", "error-no-id", "params-no-method"],
)
def test_response_needs_id_and_exactly_one_of_result_error(engine, decode_one, members, shaped):
    invalid(engine, decode_one(obj(V, *members)), "invalid envelope", shaped)


def test_result_may_be_any_json_value(engine, decode_one):
    for value, expected in [(b"null", None), (b"0", 0), (b'"s"', "s"), (b"[1]", [1]), (b"false", False)]:
        m = decode_one(obj(V, b'"id":1', b'"result":' + value))
        assert m.kind == engine.RESPONSE and m.result == expected and type(m.result) is type(expected)
        assert m.result_raw == value


# ---------------------------------------------------------------------------------------
# id
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [
        (b"0", 0),
        (b"1", 1),
        (b"-1", -1),
        (b"9223372036854775807", 2**63 - 1),
        (b"-9223372036854775808", -(2**63)),
        (b'"1"', "1"),
        (b'""', ""),
        (b'"\\u00e9\xc3\xa9\xf0\x9f\x98\x80"', "\u00e9\u00e9\U0001f600"),
        (b"null", None),
    ],
    ids=["0", "1", "-1", "int64-max", "int64-min", "str-1", "empty-str", "unicode", "null"],
)
def test_valid_ids(engine, decode_one, text, value):
    for members in [(b'"method":"m"',), (b'"result":1',)]:
        m = decode_one(obj(V, b'"id":' + text, *members))
        assert m.kind in (engine.REQUEST, engine.RESPONSE)
        assert m.id == value and type(m.id) is type(value)


def test_int_id_and_string_id_are_distinct(engine, decode_one):
    a = decode_one(obj(V, b'"id":1', b'"method":"m"'))
    b = decode_one(obj(V, b'"id":"1"', b'"method":"m"'))
    assert type(a.id) is int and type(b.id) is str
    assert a.id != b.id


@pytest.mark.parametrize(
    "text",
    [b"1.0", b"1.5", b"1e0", b"-0.0", b"true", b"false", b"{}", b"[]", b"[1]", b'{"a":1}',
     b"9223372036854775808", b"-9223372036854775809", b"18446744073709551616", b"1" * 40],
    ids=["1.0", "1.5", "1e0", "-0.0", "true", "false", "obj", "arr", "arr1", "obj1",
         "2**63", "-2**63-1", "2**64", "huge"],
)
def test_invalid_ids(engine, decode_one, text):
    invalid(engine, decode_one(obj(V, b'"id":' + text, b'"method":"m"')), "invalid id", False)
    # The same id on a response: still invalid, and response-shaped (never answered).
    invalid(engine, decode_one(obj(V, b'"id":' + text, b'"result":null')), "invalid id", True)


def test_id_checked_before_params(engine, decode_one):
    invalid(engine, decode_one(obj(V, b'"id":true', b'"method":"m"', b'"params":1')), "invalid id")


def test_id_checked_before_error_object(engine, decode_one):
    invalid(engine, decode_one(obj(V, b'"id":1.5', b'"error":1')), "invalid id", True)


# ---------------------------------------------------------------------------------------
# params
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [(b"{}", {}), (b"[]", []), (b'{"a":[1,{"b":null}]}', {"a": [1, {"b": None}]}), (b"[1,\"x\"]", [1, "x"])],
)
def test_params_object_or_array(engine, decode_one, text, value):
    m = decode_one(obj(V, b'"id":1', b'"method":"m"', b'"params":' + text))
    assert m.kind == engine.REQUEST and m.params == value and type(m.params) is type(value)
    assert m.params_raw == text


def test_params_null_is_absent(engine, decode_one):
    with_null = decode_one(obj(V, b'"id":1', b'"method":"m"', b'"params":null'))
    absent = decode_one(obj(V, b'"id":1', b'"method":"m"'))
    for m in (with_null, absent):
        assert m.kind == engine.REQUEST
        assert m.params is None
        assert m.params_raw is None
    n = decode_one(obj(V, b'"method":"m"', b'"params":null'))
    assert n.kind == engine.NOTIFICATION and n.params is None and n.params_raw is None


@pytest.mark.parametrize("text", [b"1", b"0", b"true", b"false", b'"x"', b'""', b"1.5"])
def test_scalar_params_are_invalid(engine, decode_one, text):
    invalid(engine, decode_one(obj(V, b'"id":1', b'"method":"m"', b'"params":' + text)), "invalid params")
    invalid(engine, decode_one(obj(V, b'"method":"m"', b'"params":' + text)), "invalid params")


# ---------------------------------------------------------------------------------------
# error object
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        b"null", b"1", b'"x"', b"[]", b"{}",
        b'{"code":1}', b'{"message":"m"}',
        b'{"code":1.0,"message":"m"}', b'{"code":1.5,"message":"m"}', b'{"code":"1","message":"m"}',
        b'{"code":true,"message":"m"}', b'{"code":null,"message":"m"}',
        b'{"code":2147483648,"message":"m"}', b'{"code":-2147483649,"message":"m"}',
        b'{"code":1,"message":1}', b'{"code":1,"message":null}', b'{"code":1,"message":["m"]}',
    ],
)
def test_invalid_error_object(engine, decode_one, error):
    invalid(engine, decode_one(obj(V, b'"id":1', b'"error":' + error)), "invalid error object", True)


@pytest.mark.parametrize(
    "error,code",
    [
        (b'{"code":2147483647,"message":""}', 2**31 - 1),
        (b'{"code":-2147483648,"message":"m"}', -(2**31)),
        (b'{"code":0,"message":"m","data":null}', 0),
        (b'{"code":-32022,"message":"m","data":{"requested":3,"supported":[1,2]},"extra":1}', -32022),
    ],
    ids=["int32-max", "int32-min", "data-null", "unknown-code-with-data"],
)
def test_valid_error_object(engine, decode_one, error, code):
    m = decode_one(obj(V, b'"id":1', b'"error":' + error))
    assert m.kind == engine.RESPONSE and m.is_error
    assert m.error == json.loads(error) and m.error["code"] == code


# ---------------------------------------------------------------------------------------
# Duplicate keys
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line,shaped",
    [
        (b'{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}', False),
        (b'{"jsonrpc":"2.0","id":1,"id":1,"method":"m"}', False),
        (b'{"jsonrpc":"2.0","jsonrpc":"2.0","method":"m"}', False),
        (b'{"jsonrpc":"2.0","method":"m","method":"n"}', False),
        (b'{"jsonrpc":"2.0","method":"m","params":{},"params":[]}', False),
        (b'{"jsonrpc":"2.0","id":1,"result":1,"result":2}', True),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"},"error":null}', True),
    ],
    ids=["id", "id-same-value", "jsonrpc", "method", "params", "result", "error"],
)
def test_duplicate_envelope_key(engine, decode_one, line, shaped):
    invalid(engine, decode_one(line), "duplicate envelope key", shaped)


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":1,"i\\u0064":2,"method":"m"}',
        b'{"jsonrpc":"2.0","\\u0069\\u0064":1,"id":2,"method":"m"}',
        b'{"jsonrpc":"2.0","method":"m","\\u006Dethod":"n"}',
        b'{"jsonrpc":"2.0","j\\u0073onrpc":"2.0","method":"m"}',
    ],
    ids=["i-u0064", "both-escaped", "upper-hex", "jsonrpc"],
)
def test_duplicate_envelope_key_escaped_spelling(engine, decode_one, line):
    invalid(engine, decode_one(line), "duplicate envelope key")


def test_duplicate_key_checked_before_version(engine, decode_one):
    invalid(engine, decode_one(b'{"jsonrpc":"1.0","id":1,"id":2,"method":"m"}'), "duplicate envelope key")


def test_duplicate_non_envelope_top_level_key_is_allowed(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","x":1,"id":1,"x":2,"method":"m","_meta":{},"_meta":[]}')
    assert (m.kind, m.id, m.method) == (engine.REQUEST, 1, "m")


def test_nested_duplicate_keys_last_wins(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"b":[{"c":1,"c":2}],"a":3}}')
    assert m.kind == engine.REQUEST
    assert m.params == {"a": 3, "b": [{"c": 2}]}
    assert list(m.params) == ["a", "b"]  # as dict(): first position, last value


def test_nested_duplicate_envelope_names_are_plain_keys(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"id":1,"id":2,"method":"x","method":"y"}}')
    assert m.kind == engine.REQUEST and m.id == 1
    assert m.params == {"id": 2, "method": "y"}
    r = decode_one(b'{"jsonrpc":"2.0","id":1,"result":{"result":1,"result":2}}')
    assert r.kind == engine.RESPONSE and r.result == {"result": 2}
    e = decode_one(b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"code":2,"message":"a","message":"b"}}')
    assert e.kind == engine.RESPONSE and e.error == {"code": 2, "message": "b"}


# ---------------------------------------------------------------------------------------
# Strict JSON: numbers
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("const", [b"NaN", b"Infinity", b"-Infinity", b"nan", b"inf"])
def test_non_standard_constants_rejected(engine, decode_one, const):
    line = obj(V, b'"id":1', b'"method":"m"', b'"params":[' + const + b"]")
    invalid_json(engine, decode_one(line), line)
    invalid_json(engine, decode_one(const), const)


@pytest.mark.parametrize("num", [b"1e400", b"-1e400", b"1.7976931348623159e308", b"123456789e999"])
def test_float_overflow_rejected(engine, decode_one, num):
    line = obj(V, b'"id":1', b'"result":' + num)
    invalid_json(engine, decode_one(line), line)


def test_largest_double_accepted(engine, decode_one):
    m = decode_one(obj(V, b'"id":1', b'"result":[1.7976931348623157e308,5e-324,-0.0,1E2,1e-2]'))
    assert m.result == [1.7976931348623157e308, 5e-324, -0.0, 100.0, 0.01]
    assert [type(x) for x in m.result] == [float] * 5
    assert str(m.result[2]) == "-0.0"


@pytest.mark.parametrize(
    "text",
    [b"9223372036854775807", b"9223372036854775808", b"18446744073709551615", b"18446744073709551616",
     b"-9223372036854775809", b"123456789012345678901234567890123456789", b"-" + b"9" * 100],
)
def test_big_ints_decoded_exactly(engine, decode_one, text):
    m = decode_one(obj(V, b'"method":"m"', b'"params":{"n":' + text + b"}"))
    assert m.kind == engine.NOTIFICATION
    assert m.params["n"] == int(text) and type(m.params["n"]) is int
    r = decode_one(obj(V, b'"id":1', b'"result":' + text))
    assert r.result == int(text) and type(r.result) is int


@pytest.mark.parametrize("num", [b"01", b"1.", b".5", b"+1", b"-", b"1e", b"0x10", b"1_0", b"--1"])
def test_invalid_number_syntax(engine, decode_one, num):
    line = obj(V, b'"id":1', b'"result":' + num)
    invalid_json(engine, decode_one(line), line)


# ---------------------------------------------------------------------------------------
# Strict JSON: syntax, UTF-8, surrogates, BOM
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"{",
        b'{"jsonrpc":"2.0","method":"m"',
        b'{"jsonrpc":"2.0","method":"m"}}',
        b'{"jsonrpc":"2.0","method":"m"} {}',
        b'{"jsonrpc":"2.0","method":"m",}',
        b"{'jsonrpc':'2.0'}",
        b'{"jsonrpc":"2.0" "method":"m"}',
        b'{jsonrpc:"2.0"}',
        b'{"jsonrpc":"2.0","method":"m\tx"}',  # raw control character in a string
        b'{"jsonrpc":"2.0","method":"m\x01"}',
        b'{"jsonrpc":"2.0","method":"\\x41"}',  # invalid escape
        b'{"jsonrpc":"2.0","method":"\\u12"}',
        b'{"jsonrpc":"2.0","method":"m"}\x00',
        b"tru",
        b'"abc',
        b"// comment",
    ],
)
def test_invalid_json(engine, decode_one, line):
    invalid_json(engine, decode_one(line), line)


@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80"],
    ids=["ff", "overlong", "encoded-surrogate", "above-10ffff", "truncated", "lone-continuation", "5-byte"],
)
def test_invalid_utf8(engine, decode_one, bad):
    line = obj(V, b'"method":"m' + bad + b'"')
    m = decode_one(line)
    malformed(engine, m, -32700, "invalid UTF-8", False, line)


def test_invalid_utf8_reported_before_invalid_json(engine, decode_one):
    line = b'{"jsonrpc": \xff nope'
    malformed(engine, decode_one(line), -32700, "invalid UTF-8", False, line)
    malformed(engine, decode_one(b"\xfe"), -32700, "invalid UTF-8", False, b"\xfe")


def test_invalid_utf8_inside_batch_is_one_malformed_line(engine, decode_one):
    line = b'[{"jsonrpc":"2.0","method":"ok"},{"jsonrpc":"2.0","method":"\xff"}]'
    malformed(engine, decode_one(line), -32700, "invalid UTF-8", False, line)


def test_valid_multibyte_utf8(engine, decode_one):
    m = decode_one('{"jsonrpc":"2.0","method":"é/漢","params":{"ключ":"😀 \u2028"}}'.encode())
    assert m.method == "é/漢" and m.params == {"ключ": "😀 \u2028"}


@pytest.mark.parametrize(
    "escape",
    [b"\\ud800", b"\\uDBFF", b"\\udc00", b"\\uDFFF", b"\\udc00\\ud800", b"\\ud800\\u0041", b"\\ud800\\ud800", b"x\\ud83d"],
    ids=["high", "high-upper", "low", "low-upper", "reversed", "high-then-A", "two-highs", "trailing-high"],
)
def test_lone_surrogate_escape_accepted_like_json_loads(engine, decode_one, escape):
    # JSON.stringify writes a lone surrogate as "\\ud800" and json.loads accepts it: so do
    # both twins, everywhere a string can stand, with the str json.loads makes.
    s = json.loads(b'"' + escape + b'"')
    assert any(0xD800 <= ord(c) <= 0xDFFF for c in s)
    m = decode_one(obj(V, b'"method":"m"', b'"params":{"s":"' + escape + b'"}'))
    assert (m.kind, m.params) == (engine.NOTIFICATION, {"s": s})
    m = decode_one(obj(V, b'"method":"m"', b'"params":{"' + escape + b'":1}'))  # in a key
    assert m.params == {s: 1}
    assert decode_one(obj(V, b'"id":"' + escape + b'"', b'"method":"' + escape + b'"')).method == s
    m = decode_one(obj(V, b'"id":"' + escape + b'"', b'"method":"m"'))
    assert (m.kind, m.id) == (engine.REQUEST, s)
    m = decode_one(obj(V, b'"id":1', b'"result":[[["' + escape + b'"]]]'))
    assert (m.kind, m.result) == (engine.RESPONSE, [[[s]]])
    m = decode_one(obj(V, b'"method":"m"', b'"x":"' + escape + b'"'))  # in an ignored member
    assert m.kind == engine.NOTIFICATION
    line = b'"' + escape + b'"'  # top-level string
    malformed(engine, decode_one(line), -32600, "not an object", False, line)
    b = decode_one(b'[{"jsonrpc":"2.0","method":"m","params":["' + escape + b'"]},1]')
    assert b.kind == engine.BATCH and b.entries[0].params == [s]
    assert b.entries[1].kind == engine.MALFORMED
    # and the message re-encodes to the same escapes (valid UTF-8, same str once decoded)
    out = engine.encode_notification("m", {"s": s})
    out.decode("utf-8")  # never invalid UTF-8
    assert json.loads(out)["params"]["s"] == s


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","method":"m","params":{"a":"\\ud800","a":1}}',
        b'{"jsonrpc":"2.0","method":"m","x":"\\ud800","x":1}',
        b'{"jsonrpc":"2.0","id":1,"result":{"a":[{"b":"\\ud800","b":null}]}}',
        b'[{"jsonrpc":"2.0","method":"m","params":{"a":"\\udc00","a":1}}]',
    ],
    ids=["params", "ignored-member", "nested-result", "batch-entry"],
)
def test_lone_surrogate_under_a_duplicate_key_decodes_like_json_loads(engine, decode_one, line):
    f = decode_one(line)
    assert f.kind != engine.MALFORMED
    m = f.entries[0] if f.kind == engine.BATCH else f
    expected = json.loads(line)
    expected = expected[0] if isinstance(expected, list) else expected
    assert (m.params if m.kind != engine.RESPONSE else m.result) == expected.get("params", expected.get("result"))


def test_valid_surrogate_pair_accepted(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","method":"m","params":{"\\ud83d\\ude00":"\\uD83D\\uDE00\\ud800\\udc00"}}')
    assert m.kind == engine.NOTIFICATION
    assert m.params == {"\U0001f600": "\U0001f600\U00010000"}


def test_escaped_backslash_before_u_is_not_a_surrogate(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","method":"m","params":["\\\\ud800"]}')
    assert m.kind == engine.NOTIFICATION and m.params == ["\\ud800"]


def test_utf8_bom_rejected(engine, decode_one):
    line = b"\xef\xbb\xbf" + obj(V, b'"method":"m"')
    invalid_json(engine, decode_one(line), line)


def test_bom_inside_a_string_is_fine(engine, decode_one):
    m = decode_one(obj(V, b'"method":"\xef\xbb\xbfm"'))
    assert m.method == "\ufeffm"


# ---------------------------------------------------------------------------------------
# Depth limit
# ---------------------------------------------------------------------------------------


def nested_request(depth: int) -> bytes:
    """A request whose nesting depth (counting the envelope object) is ``depth``."""
    inner = depth - 1
    return b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + b"[" * inner + b"]" * inner + b"}"


def test_depth_exactly_max_depth_accepted(engine, decode_one):
    m = decode_one(nested_request(128))
    assert m.kind == engine.REQUEST
    p, depth = m.params, 2
    while p:
        p, depth = p[0], depth + 1
    assert depth == 128


def test_depth_max_depth_plus_one_rejected(engine, decode_one):
    line = nested_request(129)
    invalid_json(engine, decode_one(line), line)


@pytest.mark.parametrize("max_depth", [1, 2, 5, 300])
def test_custom_max_depth_boundary(engine, decode_one, max_depth):
    ok = decode_one(nested_request(max_depth), max_depth=max_depth) if max_depth > 1 else None
    if ok is not None:
        assert ok.kind == engine.REQUEST
    line = nested_request(max_depth + 1)
    invalid_json(engine, decode_one(line, max_depth=max_depth), line)


def test_depth_one_allows_flat_envelope(engine, decode_one):
    m = decode_one(obj(V, b'"method":"m"'), max_depth=1)
    assert m.kind == engine.NOTIFICATION
    line = obj(V, b'"method":"m"', b'"params":{}')
    invalid_json(engine, decode_one(line, max_depth=1), line)


def test_depth_counts_objects_and_arrays_alike(engine, decode_one):
    ok = b'{"jsonrpc":"2.0","method":"m","params":{"a":[{"b":[]}]}}'  # depth 5
    assert decode_one(ok, max_depth=5).kind == engine.NOTIFICATION
    invalid_json(engine, decode_one(ok, max_depth=4), ok)


def test_brackets_inside_strings_do_not_count(engine, decode_one):
    line = b'{"jsonrpc":"2.0","method":"m","params":{"s":"[[[[{{{{\\"[[[[","t":"]]]]"}}'
    m = decode_one(line, max_depth=2)
    assert m.kind == engine.NOTIFICATION and m.params == {"s": '[[[[{{{{"[[[[', "t": "]]]]"}


def test_batch_array_counts_as_one_level(engine, decode_one):
    entry = b'{"jsonrpc":"2.0","method":"m","params":[[]]}'  # depth 3 on its own
    b = decode_one(b"[" + entry + b"]", max_depth=4)
    assert b.kind == engine.BATCH and b[0].kind == engine.NOTIFICATION
    line = b"[" + entry + b"]"
    invalid_json(engine, decode_one(line, max_depth=3), line)


def test_depth_limit_on_non_envelope_value(engine, decode_one):
    line = b"[" * 200 + b"]" * 200
    invalid_json(engine, decode_one(line), line)


# ---------------------------------------------------------------------------------------
# raw bytes, lazy mode
# ---------------------------------------------------------------------------------------


def test_raw_is_the_line_verbatim(engine, decode_one):
    line = ' {"params" : { "b" : [ 1 , 2 ] } , "jsonrpc":"2.0", "method" : "é" }\t'.encode()
    m = decode_one(line)
    assert m.raw == line
    assert isinstance(m.raw, engine.RawJson) and isinstance(m.raw, bytes)


def _behaves_like_bytes(engine, value, expected):
    """``value`` is a RawJson equal to ``expected`` that hashes, compares and keys a dict
    exactly as the bytes ``expected`` does."""
    assert type(value) is engine.RawJson
    assert value == expected and not (value != expected) and bytes(value) == expected
    assert hash(value) == hash(expected) == hash(bytes(value))
    assert value < expected + b" " and value + b"" == expected
    table = {value: "value"}
    assert table[expected] == "value" and table[value] == "value"
    table[expected] = "bytes"  # the same key: bytes and RawJson of equal contents
    assert table == {expected: "bytes"} and type(next(iter(table))) is engine.RawJson
    assert value in {expected} and expected in {value}


@pytest.mark.parametrize("split", [None, 7], ids=["one-chunk", "joined"])
def test_raw_hashes_and_compares_like_the_line_bytes(engine, lazy, split):
    # Lines with different contents (a stale or unset cached hash would collide), parsed
    # in place in the chunk or joined across two chunks, with CRLF and a batch.
    lines = [
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","n":%d}}' % i
        for i in range(3)
    ] + [
        b'{"jsonrpc":"2.0","id":7,"result":{"ok":true}}',
        b'[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"method":"b","params":[1]}]',
    ]
    data = b"\r\n".join(lines) + b"\n"
    decoder = engine.Decoder(lazy=lazy)
    if split is None:
        frames = decoder.feed(data)
    else:
        frames = decoder.feed(data[:split]) + decoder.feed(data[split:])
    frames += decoder.feed_eof()
    assert len(frames) == len(lines)
    for frame, line in zip(frames, lines):
        _behaves_like_bytes(engine, frame.raw, line)
    for i in range(3):
        _behaves_like_bytes(engine, frames[i].params_raw, b'{"sessionId":"s","n":%d}' % i)
    _behaves_like_bytes(engine, frames[3].result_raw, b'{"ok":true}')
    _behaves_like_bytes(engine, frames[4][1].raw, b'{"jsonrpc":"2.0","id":1,"method":"b","params":[1]}')
    _behaves_like_bytes(engine, frames[4][1].params_raw, b"[1]")
    assert len({frame.raw for frame in frames}) == len(lines)


def test_params_raw_is_verbatim_including_inner_whitespace(engine, decode_one):
    params = b'{ "a" : [ 1 ,\t2 ] , "b":"\\u00e9 \xc3\xa9" }'
    m = decode_one(b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + params + b'  }')
    assert m.params_raw == params
    assert isinstance(m.params_raw, engine.RawJson)
    assert m.params == {"a": [1, 2], "b": "\u00e9 \u00e9"}


def test_result_raw_is_verbatim(engine, decode_one):
    result = b'[ 1.50 , "x" , {"k" :null} ]'
    m = decode_one(b'{"jsonrpc":"2.0","id":1,"result":' + result + b"}")
    assert m.result_raw == result
    assert m.result == [1.5, "x", {"k": None}]


def test_result_raw_of_null_result_is_null(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","id":1,"result":null}')
    assert m.result is None
    assert m.result_raw == b"null"
    assert isinstance(m.result_raw, engine.RawJson)


def test_offsets_after_multibyte_characters(engine, decode_one):
    line = '{"jsonrpc":"2.0","method":"漢字😀","id":"é","params":{"é":"😀"}}'.encode()
    m = decode_one(line)
    assert m.params_raw == '{"é":"😀"}'.encode()
    assert m.id == "é"


def test_lazy_params_decoded_on_access_equal_eager(engine):
    line = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,2.5,"\\u00e9",{"b":null}],"n":123456789012345678901}}'
    eager = engine.Decoder().feed(line + b"\n")[0]
    lazy = engine.Decoder(lazy=True).feed(line + b"\n")[0]
    assert lazy.params_raw == eager.params_raw
    assert lazy.params == eager.params == json.loads(line)["params"]
    assert lazy.params is lazy.params  # decoded once, then cached


def test_lazy_result_decoded_on_access_equal_eager(engine):
    line = b'{"jsonrpc":"2.0","id":"x","result":[{"k":[true,false,null]},-0.0,1e-7]}'
    eager = engine.Decoder().feed(line + b"\n")[0]
    lazy = engine.Decoder(lazy=True).feed(line + b"\n")[0]
    assert lazy.result == eager.result == json.loads(line)["result"]
    assert lazy.result is lazy.result


def test_lazy_mode_validates_the_whole_line(engine):
    # Lazy and eager classify every line the same, even when the bad part is in params.
    for line in (
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,}}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":NaN}}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"\\ud8"}}',
        b'{"jsonrpc":"2.0","id":1,"result":1e400}',
    ):
        (m,) = engine.Decoder(lazy=True).feed(line + b"\n")
        invalid_json(engine, m, line)


def test_raw_json_decode_json(engine, decode_one):
    m = decode_one(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,"\\u00e9"]}}')
    assert m.params_raw.decode_json() == {"a": [1, "\u00e9"]}


def test_frames_survive_later_feeds(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    first = b'{"jsonrpc":"2.0","id":"first","method":"a/b","params":{"k":["v",1,2.5]}}'
    resp = b'{"jsonrpc":"2.0","id":9,"result":{"r":"\xc3\xa9"}}'
    bad = b'{"jsonrpc":"2.0","id":1.5,"method":"m"}'
    batch = b'[{"jsonrpc":"2.0","id":3,"method":"c","params":[3]},7]'
    frames = dec.feed(first + b"\n" + resp + b"\n" + bad + b"\n" + batch + b"\n" + b'{"jsonrpc":"2.0"')
    assert len(frames) == 4
    # Overwrite every internal buffer several times with longer, different lines.
    for i in range(50):
        filler = b'"x":"' + bytes([0x41 + i % 26]) * (100 * i) + b'"'
        dec.feed(b',' + filler + b',"method":"zz"}\n{"jsonrpc":"2.0","id":2,"method":"q","params":[' + b"9," * i + b"0]}\n")
        dec.feed(b'{"jsonrpc":"2.0"')
    m, r, x, b = frames
    assert (m.kind, m.id, m.method) == (engine.REQUEST, "first", "a/b")
    assert m.raw == first
    assert m.params_raw == b'{"k":["v",1,2.5]}'
    assert m.params == {"k": ["v", 1, 2.5]}
    assert engine.forward(m, 5) == first.replace(b'"first"', b"5") + b"\n"
    assert r.result_raw == b'{"r":"\xc3\xa9"}' and r.result == {"r": "\u00e9"} and r.raw == resp
    assert x.kind == engine.MALFORMED and x.raw == bad and x.reason == "invalid id"
    assert b.raw == batch
    assert b[0].raw == b'{"jsonrpc":"2.0","id":3,"method":"c","params":[3]}'
    assert b[0].params_raw == b"[3]" and b[0].params == [3]
    assert b[1].raw == b"7"
