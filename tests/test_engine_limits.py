"""Engine hardening (issue 8): bounded buffering, batch size, nesting depth, frame state.

Every test runs against both twins through the ``engine`` fixture (``py`` and ``c``).

* over-long lines: discarded as soon as they cross ``max_line_size``, never joined, the
  next line decodes;
* ``max_batch_size``: an over-large batch is ONE -32600 ``Malformed`` (no entry per element);
* ``max_depth``: at most ``MAX_DEPTH_LIMIT`` (512), decodable that deep on a 256 KiB thread
  stack and from a deep Python stack;
* ``Message``/``Batch``: never constructed from Python, and unpickling refuses spans that
  point outside the line;
* the module layout: frame kinds defined once, no pure-twin code behind the compiled
  twin's ``RawJson.decode_json``.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from acp_fast import _kinds, _rawjson, _strictjson

NOTE = b'{"jsonrpc":"2.0","method":"n"}'
REQ = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,"x"]}}'
PKG = Path(_kinds.__file__).resolve().parent  # the acp_fast under test (checkout or installed)
SRC = Path(__file__).resolve().parent.parent  # the source tree: csrc/ and the .pyx sources


def _too_long(engine: Any, f: Any) -> bool:
    return f.kind == engine.MALFORMED and (f.raw, f.code, f.reason) == (b"", -32600, "line too long")


# ---------------------------------------------------------------------------------------
# Over-long lines (issue 8 item 12)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 97, 4096])
def test_huge_line_in_many_chunks_stays_bounded(engine, lazy, chunk):
    limit = 1000
    dec = engine.Decoder(lazy=lazy, max_line_size=limit)
    assert dec.feed(NOTE + b"\n") and dec.buffered == 0
    body = b'{"jsonrpc":"2.0","method":"x","params":["' + b"y" * 20000 + b'"]}'
    frames: list[Any] = []
    for i in range(0, len(body), chunk):
        frames += dec.feed(body[i:i + chunk])
        assert dec.buffered <= limit  # never more than the limit held, at any point
    assert len(frames) == 1 and _too_long(engine, frames[0])  # reported once, when crossed
    assert dec.buffered == 0
    frames = dec.feed(b"\n" + REQ + b"\n")  # the rest of the long line ends; the next decodes
    assert [(f.kind, f.id, f.params) for f in frames] == [(engine.REQUEST, 1, {"a": [1, "x"]})]


def test_over_long_line_is_never_joined(engine):
    # The line that completes an over-long carry is checked before it is joined: no copy of
    # the carried bytes is made (tracemalloc sees the pure twin's bytes objects; the
    # compiled twin's carry buffer is outside Python's allocator and never copied either).
    limit = 4 * 1024 * 1024
    dec = engine.Decoder(max_line_size=limit)
    assert dec.feed(b"[" + b"1," * (limit // 2 - 1)) == []  # just under the limit, no newline
    assert 0 < dec.buffered <= limit
    tail = b"1" * 64 + b"]\n" + NOTE + b"\n"
    tracemalloc.start()
    try:
        frames = dec.feed(tail)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _too_long(engine, frames[0]) and frames[1].method == "n"
    assert peak < limit // 4, peak
    assert dec.buffered == 0


# ---------------------------------------------------------------------------------------
# Batch size (issue 8 item 4)
# ---------------------------------------------------------------------------------------


def _batch(n: int, entry: bytes = b'{"jsonrpc":"2.0","id":1,"method":"m"}') -> bytes:
    return b"[" + b",".join([entry] * n) + b"]"


def test_max_batch_size_is_a_constructor_argument(engine):
    assert engine.DEFAULT_MAX_BATCH_SIZE == 1024
    assert engine.Decoder().max_batch_size == 1024
    assert engine.Decoder(max_batch_size=3).max_batch_size == 3
    for bad in (0, -1):
        with pytest.raises(ValueError):
            engine.Decoder(max_batch_size=bad)


def test_batch_of_exactly_the_limit_is_a_batch(engine, lazy):
    (b,) = engine.Decoder(lazy=lazy).feed(_batch(1024) + b"\n")
    assert b.kind == engine.BATCH and len(b) == 1024


@pytest.mark.parametrize("entry", [b"1", b'{"jsonrpc":"2.0","id":1,"method":"m"}', b'{"jsonrpc":"2.0","method":"n"}'])
def test_over_large_batch_is_one_invalid_request(engine, lazy, entry):
    dec = engine.Decoder(lazy=lazy, max_batch_size=4)
    line = _batch(5, entry)
    frames = dec.feed(line + b"\n" + REQ + b"\n")
    assert len(frames) == 2
    m = frames[0]
    assert m.kind == engine.MALFORMED and m.code == -32600 and m.response_shaped is False
    assert m.reason == "batch too large (more than 4 entries)"
    assert bytes(m.raw) == line
    reply = json.loads(engine.error_reply(m))
    assert reply == {"jsonrpc": "2.0", "id": None,
                     "error": {"code": -32600, "message": "Invalid request",
                               "data": "batch too large (more than 4 entries)"}}
    assert frames[1].kind == engine.REQUEST and frames[1].id == 1  # the connection goes on


def test_huge_batch_of_small_entries_is_one_small_reply(engine, lazy):
    # The audit's case: a 2 MB line of 10**6 non-object entries made a 103 MB reply.
    line = b"[" + b"0," * (10**6 - 1) + b"0]"
    (m,) = engine.Decoder(lazy=lazy).feed(line + b"\n")
    assert m.kind == engine.MALFORMED and m.reason == "batch too large (more than 1024 entries)"
    assert len(engine.error_reply(m)) < 200


def test_over_large_batch_is_still_validated_whole(engine, lazy):
    # JSON validity comes first: a bad value past the limit makes the line invalid JSON.
    dec = engine.Decoder(lazy=lazy, max_batch_size=2)
    for line in (b"[1,2,3,{]", b"[1,2,3,NaN]", b'[1,2,3,"\\x"]', b"[1,2,3,[[[[1]]]]]"):
        (m,) = (engine.Decoder(lazy=lazy, max_batch_size=2, max_depth=3) if b"[[[[" in line else dec).feed(line + b"\n")
        assert (m.kind, m.code, m.reason) == (engine.MALFORMED, -32700, "invalid JSON"), line


# ---------------------------------------------------------------------------------------
# Nesting depth (issue 8 item 9)
# ---------------------------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    """A request nested ``depth`` containers deep (the envelope object counts)."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + (inner or b"null") + b"}"


def test_max_depth_has_one_ceiling(engine):
    assert engine.MAX_DEPTH_LIMIT == _strictjson.MAX_DEPTH_LIMIT == 512
    assert engine.Decoder(max_depth=512).max_depth == 512
    for bad in (513, 10**9, 0):
        with pytest.raises(ValueError):
            engine.Decoder(max_depth=bad)


def _on_small_stack(fn: Any) -> Any:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    old = threading.stack_size(256 * 1024)
    try:
        t = threading.Thread(target=run)
        t.start()
    finally:
        threading.stack_size(old)
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_deepest_allowed_nesting_on_a_256k_thread_stack(engine, lazy):
    limit = engine.MAX_DEPTH_LIMIT

    def work() -> Any:
        dec = engine.Decoder(lazy=lazy, max_depth=limit)
        ok, too_deep = dec.feed(_nested(limit) + b"\n" + _nested(limit + 1) + b"\n")
        params = ok.params  # lazy: decoded here, on the small stack too
        batch = dec.feed(b"[" + _nested(limit - 1) + b"]\n")[0]
        return ok.kind, params, too_deep.reason, batch.entries[0].params
    kind, params, reason, entry_params = _on_small_stack(work)
    assert kind == engine.REQUEST and reason == "invalid JSON"
    depth = 1
    while isinstance(params, list) and params:
        params, depth = params[0], depth + 1
    assert depth == limit - 1  # the empty innermost list is level limit - 1 below the envelope
    assert isinstance(entry_params, list)


def test_deepest_allowed_nesting_from_a_deep_python_stack(engine, lazy):
    # The pure twin's scanner recurses on the Python recursion budget; 300 frames already in
    # use (a deep call chain, a nested event loop) must still leave room for the limit.
    limit = engine.MAX_DEPTH_LIMIT
    line = _nested(limit) + b"\n"

    def descend(n: int) -> Any:
        if n:
            return descend(n - 1)
        (m,) = engine.Decoder(lazy=lazy, max_depth=limit).feed(line)
        return m.kind, m.params is not None, m.raw.decode_json()["id"]

    assert descend(300) == (engine.REQUEST, True, 1)


def test_raw_json_decode_json_is_bounded_by_the_ceiling(engine):
    ok = engine.RawJson(b"[" * 512 + b"]" * 512)
    assert _on_small_stack(ok.decode_json) == _on_small_stack(lambda: json.loads(ok))
    with pytest.raises(ValueError):
        engine.RawJson(b"[" * 513 + b"]" * 513).decode_json()
    for bad in (b"[1,", b"NaN", b"\xff", b"", b"1 2", b'[1,{"a":}]', b'[{"a":1},{"b":[}]', b"\xef\xbb\xbf1"):
        with pytest.raises(_strictjson.InvalidJson):
            engine.RawJson(bad).decode_json()
    for good in (b"[]", b'[{"a":1},2,{"jsonrpc":"2.0","id":1}]', b" 1\r", b'"\\ud800"',
                 b"[" + b'{"k":[1,2]},' * 3000 + b"0]"):
        assert engine.RawJson(good).decode_json() == json.loads(good)


# ---------------------------------------------------------------------------------------
# Message / Batch state (issue 8 item 10)
# ---------------------------------------------------------------------------------------


def _frames(engine: Any, lazy: bool) -> tuple[Any, Any]:
    dec = engine.Decoder(lazy=lazy)
    m, b = dec.feed(REQ + b"\n" + b"[" + REQ + b",7]\n")
    return m, b


def test_message_and_batch_cannot_be_constructed(engine):
    for cls in (engine.Message, engine.Batch):
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(TypeError):
            cls(b"{}", 0, 2)


def test_message_made_with_new_does_not_read_memory(engine):
    m = engine.Message.__new__(engine.Message)
    for name in ("raw", "params_raw"):
        with pytest.raises((ValueError, AttributeError)):
            getattr(m, name)
    try:
        assert m.params is None  # nothing decoded, nothing read
    except AttributeError:
        pass  # the pure twin: an unset slot
    with pytest.raises((ValueError, AttributeError)):
        engine.forward(m)
    b = engine.Batch.__new__(engine.Batch)
    with pytest.raises((ValueError, AttributeError)):
        b.raw


def test_frames_pickle_round_trip(engine, lazy):
    m, b = _frames(engine, lazy)
    m2 = pickle.loads(pickle.dumps(m))
    assert (m2.kind, m2.id, m2.method, m2.params, bytes(m2.raw)) == (m.kind, m.id, m.method, m.params, bytes(m.raw))
    assert engine.forward(m2, "z") == engine.forward(m, "z")
    b2 = pickle.loads(pickle.dumps(b))
    assert bytes(b2.raw) == bytes(b.raw) and [repr(e) for e in b2] == [repr(e) for e in b]


class _Crafted:
    """Pickles as a call of ``fn(*args)``: how a hostile pickle names the restore function."""

    def __init__(self, fn: Any, args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.fn, self.args)


# Message.__reduce__ args: kind, id, method, error, line, start, end, ids, ide, ps, pe, value, unset
@pytest.mark.parametrize(
    "patch",
    [
        {6: 10**6},  # end past the line
        {5: -5},  # negative start
        {5: 30, 6: 10},  # start after end
        {9: 10, 10: 10**9, 12: True},  # payload span past the line (lazy decode reads it)
        {7: 50, 8: 3},  # id span out of order
        {4: "not bytes"},
        {4: bytearray(REQ)},
        {0: 7},  # unknown kind
        {6: 1.5},
        {1: 1.5},  # an id no decoder makes
    ],
)
def test_crafted_message_pickle_is_refused(engine, patch):
    m, _ = _frames(engine, True)
    fn, args = m.__reduce__()
    args = list(args)
    for i, v in patch.items():
        args[i] = v
    data = pickle.dumps(_Crafted(fn, tuple(args)))
    with pytest.raises((ValueError, TypeError)):
        pickle.loads(data)


@pytest.mark.parametrize("patch", [{3: 10**6}, {2: -1}, {1: "x"}, {0: [object()]}, {0: []}, {0: "ab"}])
def test_crafted_batch_pickle_is_refused(engine, patch):
    _, b = _frames(engine, True)
    fn, args = b.__reduce__()
    args = list(args)
    for i, v in patch.items():
        args[i] = v
    data = pickle.dumps(_Crafted(fn, tuple(args)))
    with pytest.raises((ValueError, TypeError)):
        pickle.loads(data)


# ---------------------------------------------------------------------------------------
# Layout (issue 9 §4)
# ---------------------------------------------------------------------------------------


def test_frame_kinds_are_defined_once(engine):
    for name in _kinds.__all__:
        assert getattr(engine, name) == getattr(_kinds, name)
    assert (_kinds.REQUEST, _kinds.NOTIFICATION, _kinds.RESPONSE, _kinds.BATCH, _kinds.MALFORMED) == (0, 1, 2, 3, 4)
    # The C++ half mirrors them as an enum with the very same numbers.
    header = (SRC / "csrc" / "acp_common.h").read_text()
    for name in _kinds.__all__:
        assert re.search(rf"\bKIND_{name} = {getattr(_kinds, name)},", header), name
    # No other engine module assigns them (the compiled twin imports them too).
    for path in ("_engine_py.py", "_engine_c.pyx", "_replies.py", "_rawjson.py", "_strictjson.py"):
        text = (SRC / "acp_fast" / path if path.endswith(".pyx") else PKG / path).read_text()
        for name in _kinds.__all__:
            assert not re.search(rf"^(cdef \w+ )?_?{name}\s*=", text, re.M), (path, name)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_shared_engine_modules_import_no_twin():
    for name in ("_rawjson.py", "_strictjson.py", "_kinds.py", "_replies.py"):
        assert not {i for i in _imports(PKG / name) if "_engine" in i}, name


def test_compiled_raw_json_does_not_run_the_pure_decoder(engine_c, monkeypatch):
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the pure twin's reader ran")

    monkeypatch.setattr(_strictjson, "loads_bytes", boom)
    monkeypatch.setattr(_strictjson, "loads_strict", boom)
    assert _rawjson._decoder is not None
    assert engine_c.RawJson(b'{"a":[1,"\\u00e9",2.5,null]}').decode_json() == {"a": [1, "é", 2.5, None]}
    with pytest.raises(_strictjson.InvalidJson):
        engine_c.RawJson(b"[1,").decode_json()


# ---------------------------------------------------------------------------------------
# What the connection makes of it (over an in-memory pair, both twins)
# ---------------------------------------------------------------------------------------


def _serve(engine: Any, wire: list[bytes]) -> list[bytes]:
    """Write ``wire`` to a Connection serving ``echo``; the reply lines up to the probe's."""
    import asyncio

    from acp_fast.jsonrpc import Connection
    from acp_fast.transport import memory_pair

    async def main() -> list[bytes]:
        a, b = memory_pair()
        conn = Connection(a, engine=engine)
        conn.on_request("echo", lambda ctx: ctx.params)
        got: list[bytes] = []
        done = asyncio.Event()
        buf = [b""]

        def data(chunk: bytes) -> None:
            *lines, buf[0] = (buf[0] + chunk).split(b"\n")
            for line in lines:
                got.append(line)
                if b'"probe"' in line:
                    done.set()

        b.attach(data, lambda exc: done.set(), lambda ok: None)
        for chunk in wire:
            b.write(chunk)
        b.write(b'{"jsonrpc":"2.0","id":"probe","method":"echo","params":[1]}\n')
        await asyncio.wait_for(done.wait(), 30)
        return got

    return asyncio.run(main())


def test_connection_answers_an_over_large_batch_once_and_goes_on(engine):
    entry = b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":1}}'
    *replies, probe = _serve(engine, [_batch(100_000, entry) + b"\n"])
    assert [json.loads(r) for r in replies] == [
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32600, "message": "Invalid request",
                   "data": "batch too large (more than 1024 entries)"}}]
    assert json.loads(probe) == {"jsonrpc": "2.0", "id": "probe", "result": [1]}


def test_connection_echoes_lone_surrogates_as_escapes(engine):
    # A TS peer's JSON.stringify output for a lone surrogate: answered, not -32700.
    line = b'{"jsonrpc":"2.0","id":"\\ud800","method":"echo","params":{"t":"a\\udc00b","\\ud83d":1}}\n'
    reply, _probe = _serve(engine, [line])
    reply.decode("utf-8")  # valid UTF-8 on the wire
    assert json.loads(reply) == {"jsonrpc": "2.0", "id": "\ud800", "result": {"t": "a\udc00b", "\ud83d": 1}}
    assert b"\\ud800" in reply and b"\\udc00" in reply
