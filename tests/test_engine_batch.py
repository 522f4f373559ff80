"""Batch frames, ``BatchReply`` slot bookkeeping and ``error_reply`` (both twins).

Reference: ``notes/protocol.md`` §1.3 and §2 (the parts the engine layer owns: parsing,
classification, slots, reply assembly; dispatch belongs to the connection layer), and
``acp_fast/_replies.py``.
"""

from __future__ import annotations

import json

import pytest

from acp_fast._replies import MAX_ECHOED_LINE


def req(i, method="m", params=None):
    d = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        d["params"] = params
    return json.dumps(d, separators=(",", ":")).encode()


def notif(method="n", params=None):
    d = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        d["params"] = params
    return json.dumps(d, separators=(",", ":")).encode()


def resp(i, result=None):
    return json.dumps({"jsonrpc": "2.0", "id": i, "result": result}, separators=(",", ":")).encode()


def batch_line(*entries: bytes) -> bytes:
    return b"[" + b",".join(entries) + b"]"


def parse_reply(line: bytes):
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    return json.loads(line)


# ---------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------


def test_batch_frame(engine, decode_one):
    line = batch_line(req(1), notif(), resp(2, [1]))
    b = decode_one(line)
    assert b.kind == engine.BATCH
    assert len(b) == 3 and len(b.entries) == 3
    assert [e.kind for e in b] == [engine.REQUEST, engine.NOTIFICATION, engine.RESPONSE]
    assert [e.kind for e in b.entries] == [b[0].kind, b[1].kind, b[2].kind]
    assert b.raw == line and isinstance(b.raw, engine.RawJson)
    assert b[2].result == [1]


def test_single_entry_batch_keeps_its_boundary(engine, decode_one):
    b = decode_one(batch_line(req(1)))
    assert b.kind == engine.BATCH and len(b) == 1 and b[0].kind == engine.REQUEST


@pytest.mark.parametrize("line", [b"[]", b"[ ]", b" [\t] ", b"[\r]"])
def test_empty_batch_is_one_invalid_request(engine, decode_one, line):
    m = decode_one(line)
    assert m.kind == engine.MALFORMED
    assert (m.code, m.reason, m.response_shaped) == (-32600, "empty batch", False)
    reply = parse_reply(engine.error_reply(m))
    assert isinstance(reply, dict)  # one standalone object, never an array
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert reply["error"]["message"] == "Invalid request"


@pytest.mark.parametrize(
    "line",
    [b"[", b"[1,", b"[1,]", b'[{"jsonrpc":"2.0","method":"m"}', b"[1 2]", b"[NaN]", b"[] []", b"[}"],
)
def test_invalid_json_starting_with_bracket_is_parse_error(engine, decode_one, line):
    m = decode_one(line)
    assert m.kind == engine.MALFORMED
    assert (m.code, m.reason, m.raw, m.response_shaped) == (-32700, "invalid JSON", line, False)
    reply = parse_reply(engine.error_reply(m))
    assert reply == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error", "data": {"line": line.decode()}}}


def test_entries_classified_independently(engine, decode_one):
    entries = [b"17", b"true", b"null", b'{"jsonrpc":"2.0","method":1}', b'"s"', b"[1]", b"[]", b"{}",
               req(1), b'{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}', b'{"jsonrpc":"2.0","id":5,"result":1,"error":null}',
               notif()]
    b = decode_one(batch_line(*entries))
    assert b.kind == engine.BATCH and len(b) == len(entries)
    expected = [
        ("not an object", False), ("not an object", False), ("not an object", False), ("invalid method", False),
        ("not an object", False), ("not an object", False), ("not an object", False), ("invalid jsonrpc version", False),
        None, ("duplicate envelope key", False), ("invalid envelope", True), None,
    ]
    for entry, raw, exp in zip(b, entries, expected, strict=True):
        assert entry.raw == raw
        if exp is None:
            assert entry.kind in (engine.REQUEST, engine.NOTIFICATION)
        else:
            assert entry.kind == engine.MALFORMED
            assert (entry.code, entry.reason, entry.response_shaped) == (-32600, *exp)


def test_nested_array_is_not_a_nested_batch(engine, decode_one):
    b = decode_one(batch_line(batch_line(req(1))))
    assert b.kind == engine.BATCH and len(b) == 1
    assert b[0].kind == engine.MALFORMED and b[0].reason == "not an object"


def test_batch_entry_raw_is_its_own_span(engine, decode_one):
    line = b'[ {"jsonrpc":"2.0", "id" : 1, "method":"\xc3\xa9"} ,\t17 , {"jsonrpc":"2.0","id":2,"result": [ 1 ] } ]'
    b = decode_one(line)
    assert [e.raw for e in b] == [b'{"jsonrpc":"2.0", "id" : 1, "method":"\xc3\xa9"}', b"17",
                                  b'{"jsonrpc":"2.0","id":2,"result": [ 1 ] }']
    assert b.raw == line
    assert b[2].result_raw == b"[ 1 ]"


def test_batch_entries_params(engine, decode_one):
    b = decode_one(batch_line(req(1, params={"a": [1]}), notif(params=[{"b": None}]), req(2)))
    assert b[0].params == {"a": [1]} and b[0].params_raw == b'{"a":[1]}'
    assert b[1].params == [{"b": None}] and b[1].params_raw == b'[{"b":null}]'
    assert b[2].params is None and b[2].params_raw is None


def test_duplicate_ids_in_a_batch_are_distinct_entries(engine, decode_one):
    b = decode_one(batch_line(req(21, "a"), req(21, "b")))
    assert [(e.id, e.method) for e in b] == [(21, "a"), (21, "b")]


# ---------------------------------------------------------------------------------------
# BatchReply
# ---------------------------------------------------------------------------------------


def test_slots_are_requests_and_malformed_call_shaped_entries_in_source_order(engine, decode_one):
    b = decode_one(batch_line(
        notif(),                                       # 0: none
        req(1),                                        # 1: slot 0
        resp(7),                                       # 2: none
        b"17",                                         # 3: slot 1 (pre-filled)
        b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}',  # 4: none (response-shaped)
        req("x"),                                      # 5: slot 2
        b'{"jsonrpc":"2.0","method":1}',               # 6: slot 3 (pre-filled)
        notif(),                                       # 7: none
    ))
    r = engine.BatchReply(b)
    assert [r.slot(i) for i in range(8)] == [None, 0, None, 1, None, 2, 3, None]
    assert r.slot_count == 4
    assert r.needs_reply is True
    assert r.pending == 2 and not r.complete


@pytest.mark.parametrize(
    "entries",
    [
        (notif(), notif("b")),
        (resp(1), resp("2")),
        (notif(), resp(1)),
        (b'{"jsonrpc":"2.0","id":1,"result":1,"error":null}', resp(3)),
        (b'{"id":1,"result":1}', notif()),
    ],
    ids=["notifications", "responses", "mixed", "malformed-response-shaped", "bad-version-response-shaped"],
)
def test_batch_without_slots_needs_no_reply(engine, decode_one, entries):
    r = engine.BatchReply(decode_one(batch_line(*entries)))
    assert r.needs_reply is False
    assert r.slot_count == 0 and r.pending == 0 and r.complete
    assert r.encode() is None
    assert r.fill_dropped() == []
    assert all(r.slot(i) is None for i in range(len(entries)))


def test_mixed_batch_example_gives_four_elements_in_order(engine, decode_one):
    # protocol.md §2.14: [req id1 ok, notif ok, 17, req id2 bad-params, req id3 handler-error,
    # {"id":99,"result":null,"error":{...}}, notif bad-params, notif handler-error]
    b = decode_one(batch_line(
        req(1, "ok", {"x": 1}),
        notif("ok", {"x": 1}),
        b"17",
        req(2, "typed", {"wrong": True}),
        req(3, "fails"),
        b'{"jsonrpc":"2.0","id":99,"result":null,"error":{"code":1,"message":"x"}}',
        notif("typed", {"wrong": True}),
        notif("fails"),
    ))
    assert [e.kind for e in b] == [engine.REQUEST, engine.NOTIFICATION, engine.MALFORMED, engine.REQUEST,
                                   engine.REQUEST, engine.MALFORMED, engine.NOTIFICATION, engine.NOTIFICATION]
    assert b[5].response_shaped is True
    r = engine.BatchReply(b)
    assert r.slot_count == 4 and r.pending == 3
    # Dispatch in source order; the connection layer fills the slots of the requests.
    assert r.fill(r.slot(0), engine.encode_result(1, {"ok": True}))
    assert r.fill(r.slot(3), engine.encode_error(2, -32602, data={"error": "missing field"}))
    assert r.fill(r.slot(4), engine.encode_error(3, -32603, data="boom"))
    assert r.complete and r.fill_dropped() == []
    out = r.encode()
    assert out.endswith(b"\n") and b"\n" not in out[:-1]
    reply = json.loads(out)
    assert isinstance(reply, list) and len(reply) == 4
    assert reply[0] == {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}
    assert reply[1] == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid request", "data": "not an object"}}
    assert (reply[2]["id"], reply[2]["error"]["code"]) == (2, -32602)
    assert (reply[3]["id"], reply[3]["error"]["code"]) == (3, -32603)


def test_reply_array_is_the_slot_lines_joined(engine, decode_one):
    b = decode_one(batch_line(req(1), req(2)))
    r = engine.BatchReply(b)
    a, c = engine.encode_result(1, "a"), engine.encode_result(2, "c")
    r.fill(1, c)
    r.fill(0, a)
    assert r.encode() == b"[" + a[:-1] + b"," + c[:-1] + b"]\n"


def test_malformed_call_shaped_entries_are_prefilled(engine, decode_one):
    b = decode_one(batch_line(b"true", b'{"jsonrpc":"2.0","id":1,"method":"m","params":3}'))
    r = engine.BatchReply(b)
    assert r.slot_count == 2 and r.complete and r.pending == 0
    reply = json.loads(r.encode())
    assert [x["error"]["data"] for x in reply] == ["not an object", "invalid params"]
    assert all(x["id"] is None and x["error"]["code"] == -32600 for x in reply)
    assert r.fill(0, engine.encode_result(1, 1)) is False  # pre-filled: first fill wins


def test_duplicate_ids_keep_distinct_slots(engine, decode_one):
    b = decode_one(batch_line(req(21, "a"), req(21, "b")))
    r = engine.BatchReply(b)
    assert (r.slot(0), r.slot(1)) == (0, 1)
    r.fill(r.slot(1), engine.encode_result(21, "second"))
    assert not r.complete
    r.fill(r.slot(0), engine.encode_result(21, "first"))
    reply = json.loads(r.encode())
    assert reply == [{"jsonrpc": "2.0", "id": 21, "result": "first"}, {"jsonrpc": "2.0", "id": 21, "result": "second"}]


def test_fill_first_wins(engine, decode_one):
    r = engine.BatchReply(decode_one(batch_line(req(1))))
    assert r.fill(0, engine.encode_result(1, "first")) is True
    assert r.fill(0, engine.encode_result(1, "second")) is False
    assert r.pending == 0
    assert json.loads(r.encode()) == [{"jsonrpc": "2.0", "id": 1, "result": "first"}]


def test_fill_dropped(engine, decode_one):
    b = decode_one(batch_line(req(1, "kept"), req("x", "session/prompt"), notif(), req(None, "other")))
    r = engine.BatchReply(b)
    r.fill(0, engine.encode_error(1, -32000))  # an answered error wins over the fallback
    assert r.fill_dropped() == [1, 2]
    assert r.complete and r.fill_dropped() == []
    reply = json.loads(r.encode())
    assert reply[0]["error"]["code"] == -32000
    assert reply[1] == {"jsonrpc": "2.0", "id": "x", "error": {
        "code": -32603, "message": "Internal error",
        "data": "request handler dropped its responder for `session/prompt`"}}
    assert reply[2]["id"] is None
    assert reply[2]["error"]["data"] == "request handler dropped its responder for `other`"


def test_fill_dropped_one_slot(engine, decode_one):
    b = decode_one(batch_line(req(1, "a"), req(2, "b"), req(3, "c")))
    r = engine.BatchReply(b)
    assert r.fill_dropped(1) == [1]
    assert r.pending == 2
    assert r.fill_dropped(1) == []  # already filled
    assert r.fill(1, engine.encode_result(2, "late")) is False  # the fallback won
    r.fill(0, engine.encode_result(1, "ok"))
    assert r.fill_dropped(0) == []
    assert r.fill_dropped() == [2]
    reply = json.loads(r.encode())
    assert reply[0] == {"jsonrpc": "2.0", "id": 1, "result": "ok"}
    assert reply[1]["id"] == 2 and reply[1]["error"]["data"] == "request handler dropped its responder for `b`"
    assert reply[2]["id"] == 3 and reply[2]["error"]["data"] == "request handler dropped its responder for `c`"


def test_encode_before_complete_raises(engine, decode_one):
    r = engine.BatchReply(decode_one(batch_line(req(1), req(2))))
    with pytest.raises(RuntimeError):
        r.encode()
    r.fill(0, engine.encode_result(1, None))
    with pytest.raises(RuntimeError):
        r.encode()
    r.fill(1, engine.encode_result(2, None))
    assert json.loads(r.encode()) == [{"jsonrpc": "2.0", "id": 1, "result": None}, {"jsonrpc": "2.0", "id": 2, "result": None}]


# ---------------------------------------------------------------------------------------
# error_reply for standalone malformed values
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}',
     b'{"jsonrpc":"2.0","id":1.5,"result":1}',
     b'{"jsonrpc":"2.0","id":1,"error":{"code":1}}',
     b'{"jsonrpc":"2.0","result":1}',
     b'{"jsonrpc":"2.0","id":1,"result":1,"result":2}',
     b'{"jsonrpc":"1.0","id":1,"result":1}'],
)
def test_response_shaped_malformed_is_never_answered(engine, decode_one, line):
    m = decode_one(line)
    assert m.kind == engine.MALFORMED and m.response_shaped is True
    assert engine.error_reply(m) is None


@pytest.mark.parametrize(
    "line,reason",
    [(b"17", "not an object"), (b'{"jsonrpc":"2.0","method":"m","params":1}', "invalid params"),
     (b'{"jsonrpc":"2.0","id":[1],"method":"m"}', "invalid id"), (b"[]", "empty batch")],
)
def test_invalid_request_reply(engine, decode_one, line, reason):
    out = engine.error_reply(decode_one(line))
    assert out == (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request","data":"'
                   + reason.encode() + b'"}}\n')


def test_parse_error_reply_echoes_the_line(engine, decode_one):
    line = '{"jsonrpc":"2.0","method":"é'.encode()
    out = engine.error_reply(decode_one(line))
    assert out == ('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error",'
                   '"data":{"line":"{\\"jsonrpc\\":\\"2.0\\",\\"method\\":\\"é"}}}\n').encode()


def test_parse_error_reply_truncates_long_lines(engine, decode_one):
    line = b'{"x":"' + b"a" * (MAX_ECHOED_LINE * 3)
    out = engine.error_reply(decode_one(line))
    reply = parse_reply(out)
    assert reply["error"]["data"]["line"] == line[:MAX_ECHOED_LINE].decode()
    assert len(out) < MAX_ECHOED_LINE + 200


def test_parse_error_reply_of_invalid_utf8(engine, decode_one):
    line = b'{"m":"\xff\xfe"}'
    m = decode_one(line)
    assert m.reason == "invalid UTF-8"
    reply = parse_reply(engine.error_reply(m))
    assert reply["error"]["code"] == -32700
    assert reply["error"]["data"]["line"] == '{"m":"\ufffd\ufffd"}'


def test_error_reply_has_no_embedded_newline(engine, decode_one):
    m = decode_one(b'"a\\nb" x \xe2\x80\xa8')
    out = engine.error_reply(m)
    assert out.count(b"\n") == 1 and out.endswith(b"\n")
