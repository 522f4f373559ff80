"""Checks that only make sense for the compiled twin (acp_fast._engine_c).

Behaviour shared by both twins is pinned by the differential tests; here: buffer lifetimes
(frames must survive later feeds), zero-copy references, interning, big buffers, the
padding path at chunk ends, re-entrant encoders and the nesting cap.
"""

from __future__ import annotations

import gc
import sys

import pytest

from acp_fast import _engine_py as P
from acp_fast import _replies

try:
    import acp_fast._engine_c as C
except ImportError as exc:  # an ERROR in every test below (never a skip): see the fixture
    C = None
    _C_IMPORT_ERROR: ImportError | None = exc
else:
    _C_IMPORT_ERROR = None

pytestmark = pytest.mark.c_extension  # deselected with --no-c-extensions / ACP_FAST_NO_EXTENSIONS=1


@pytest.fixture(autouse=True)
def _compiled_twin_is_importable() -> None:
    """The compiled twin is expected whenever these tests are selected: its absence errors."""
    if _C_IMPORT_ERROR is not None:
        raise _C_IMPORT_ERROR


def _msg(i: int, text: str = "hello") -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"s","text":"%s"}}'
        % (i, text.encode())
    )


def _snapshot(frame):
    if frame.kind == C.MALFORMED:
        return ("M", frame.raw, frame.code, frame.reason, frame.response_shaped)
    if frame.kind == C.BATCH:
        return ("B", bytes(frame.raw), tuple(_snapshot(e) for e in frame))
    return (frame.kind, frame.id, frame.method, bytes(frame.raw),
            frame.params_raw and bytes(frame.params_raw), frame.params, frame.result,
            C.forward(frame, id=99) if frame.kind != C.NOTIFICATION else C.forward(frame))


def test_identity_with_pure_twin():
    assert C.IMPLEMENTATION == "c"
    assert C.__all__ == P.__all__
    assert C.RawJson is P.RawJson
    assert C.BatchReply is _replies.BatchReply
    assert C.error_reply is _replies.error_reply
    for name in ("REQUEST", "NOTIFICATION", "RESPONSE", "BATCH", "MALFORMED",
                 "DEFAULT_MAX_LINE_SIZE", "DEFAULT_MAX_DEPTH", "MAX_DEPTH_LIMIT",
                 "DEFAULT_MAX_BATCH_SIZE"):
        assert getattr(C, name) == getattr(P, name)
    walker, stage1 = C._simdjson_implementation()
    assert isinstance(walker, str) and isinstance(stage1, str)


@pytest.mark.parametrize("lazy", [False, True])
def test_frames_survive_later_feeds(lazy):
    d = C.Decoder(lazy=lazy)
    kept = []
    # whole lines, a line split across chunks, a line at the very end of a chunk (copied
    # for padding), a batch and a malformed line
    kept += d.feed(_msg(1) + b"\n" + _msg(2)[:30])
    kept += d.feed(_msg(2)[30:] + b"\n[" + _msg(3) + b",1]\n{bad\n" + _msg(4) + b"\n")
    before = [_snapshot(f) for f in kept]
    for i in range(2000):  # churn every internal buffer
        d.feed(_msg(100 + i, "x" * (i % 300)) + b"\n" + b'{"partial":')
        d.feed(b'"yes"}\n')
    gc.collect()
    assert [_snapshot(f) for f in kept] == before


def test_zero_copy_chunk_reference():
    chunk = _msg(1) + b"\n" + b" " * 100 + b"\n"  # the line has padding room in the chunk
    before = sys.getrefcount(chunk)
    frames = C.Decoder(lazy=True).feed(chunk)
    assert len(frames) == 1
    assert sys.getrefcount(chunk) == before + 1  # the frame references the chunk itself
    del frames
    assert sys.getrefcount(chunk) == before


def test_method_and_keys_are_interned():
    d = C.Decoder()
    a, b = d.feed(_msg(1) + b"\n" + _msg(2) + b"\n")
    assert a.method is b.method
    ka = next(iter(a.params))
    kb = next(iter(b.params))
    assert ka == kb == "sessionId" and ka is kb
    C._clear_caches()
    (c,) = d.feed(_msg(3) + b"\n")
    assert c.method == a.method


def _fresh(s: str) -> str:
    """An equal str that is a new object (never the interned one)."""
    return "".join(list(s))


def _is_interned(s: str) -> bool:
    """Whether ``s`` itself is the interpreter's interned str for its text (asked through an
    equal fresh copy, so asking interns nothing new under ``s``)."""
    return sys.intern(_fresh(s)) is s


def test_schema_names_are_pinned_interned_keys_and_tags():
    from acp_fast.protocol._schema_names import PROPERTY_NAMES, STRING_CONSTANTS

    assert sorted(C._pinned_names()) == sorted(set(PROPERTY_NAMES + STRING_CONSTANTS))
    line = (b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
            b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}\n')
    C._clear_caches()
    for _ in range(2):  # a cache miss (first) and a cache hit give the same objects
        (m,) = C.Decoder().feed(line)
        update = m.params["update"]
        keys = [*m.params, *update, *update["content"]]
        assert keys == ["sessionId", "update", "sessionUpdate", "content", "type", "text"]
        assert all(_is_interned(k) for k in keys)
        assert _is_interned(update["sessionUpdate"]) and _is_interned(update["content"]["type"])
        assert not _is_interned(update["content"]["text"])  # "hi": a value, not a schema name


def test_fresh_keys_are_neither_pinned_nor_interned():
    before = sorted(C._pinned_names())
    d = C.Decoder()
    keys = []
    for i in range(0, 4000, 100):
        chunk = b"".join(b'{"jsonrpc":"2.0","method":"x","params":{"k%dz":1}}\n' % j for j in range(i, i + 100))
        keys += [next(iter(m.params)) for m in d.feed(chunk)]
    assert len(keys) == 4000 and keys[17] == "k17z"
    assert sorted(C._pinned_names()) == before  # a fixed set: a peer's keys never join it
    assert not any(_is_interned(k) for k in keys)


def _line_of(m):
    """The bytes object a message's frames point into (the line, for a joined line)."""
    return m.__reduce__()[1][4]


@pytest.mark.parametrize("lazy", [False, True])
def test_large_joined_lines_reuse_a_block_only_once_it_is_free(lazy):
    def big(ch: str) -> bytes:
        return P.encode_notification("session/update", {"text": ch * 200_000})

    def feed(d, line):
        (m,) = d.feed(line[:70_000]) + d.feed(line[70_000:])  # joined across two reads
        return m

    d = C.Decoder(lazy=lazy)
    m1 = feed(d, big("a"))
    kept = _line_of(m1)
    m2 = feed(d, big("b"))  # m1 still holds its line: a fresh block
    assert _line_of(m2) is not kept
    assert bytes(m1.raw) + b"\n" == big("a") and m1.params == {"text": "a" * 200_000}
    spare_id = id(_line_of(m2))
    line2 = _line_of(m2)
    h = hash(line2)  # a holder hashes the line, then lets it go
    del m2, line2
    m3 = feed(d, big("c"))
    line3 = _line_of(m3)
    assert id(line3) == spare_id  # the free block was reused (the old one is gone only now)
    assert line3 == big("c")[:-1] and m3.params == {"text": "c" * 200_000}
    fresh_copy = line3[:-1] + line3[-1:]
    assert hash(line3) == hash(fresh_copy) != h  # no stale cached hash
    assert bytes(m1.raw) + b"\n" == big("a")  # the kept frame never changed


def test_lazy_payload_is_decoded_once():
    (m,) = C.Decoder(lazy=True).feed(_msg(1) + b"\n")
    p = m.params
    assert p == {"sessionId": "s", "text": "hello"}
    assert m.params is p
    assert bytes(m.params_raw) == b'{"sessionId":"s","text":"hello"}'


@pytest.mark.parametrize("lazy", [False, True])
def test_big_line(lazy):
    text = "é" * (3 * 1024 * 1024)
    line = P.encode_notification("big", {"text": text})
    d = C.Decoder(lazy=lazy)
    frames = []
    for i in range(0, len(line), 65536):
        frames += d.feed(line[i:i + 65536])
    (m,) = frames
    assert m.params["text"] == text
    assert bytes(m.raw) + b"\n" == line
    # and the decoder keeps working with small lines afterwards
    assert d.feed(_msg(7) + b"\n")[0].id == 7


def test_line_too_long_across_many_chunks():
    d = C.Decoder(max_line_size=1000)
    out = []
    for _ in range(50):
        out += d.feed(b"x" * 100)
    assert [(f.reason, f.raw) for f in out] == [("line too long", b"")]
    assert d.buffered == 0
    out = d.feed(b"yyy\n" + _msg(1) + b"\n")
    assert [f.kind for f in out] == [C.REQUEST]


def test_padding_path_matches_pure_twin():
    # Lines ending within SIMDJSON_PADDING bytes of the chunk end are parsed from a copy.
    line = _msg(5, "abc")
    for extra in range(0, 80):
        data = line + b"\n" + b" " * extra
        for lazy in (False, True):
            c = C.Decoder(lazy=lazy).feed(data)
            p = P.Decoder(lazy=lazy).feed(data)
            assert [repr(f) for f in c] == [repr(f) for f in p]
            assert [bytes(f.params_raw) for f in c] == [bytes(f.params_raw) for f in p]


def test_deep_nesting_far_beyond_the_cap_is_invalid_not_a_crash():
    d = C.Decoder(max_depth=C.MAX_DEPTH_LIMIT)
    for lazy_line in (b"[" * 200000 + b"]" * 200000, b'{"a":' * 200000 + b"1" + b"}" * 200000):
        (f,) = d.feed(lazy_line + b"\n")
        assert (f.kind, f.reason) == (C.MALFORMED, "invalid JSON")


def test_reentrant_encoder():
    class Sneaky(list):
        def __iter__(self):
            C.encode_value({"inner": [1, 2, 3]})  # re-enters while the outer encode runs
            return super().__iter__()

    value = {"a": Sneaky([1, "x", 2.5]), "b": [Sneaky([None])]}
    assert C.encode_value(value) == P.encode_value(value)
    assert C.encode_request(1, "m", value) == P.encode_request(1, "m", value)


def test_forward_accepts_pure_messages():
    (pm,) = P.Decoder().feed(_msg(3) + b"\n")
    assert C.forward(pm, id="z") == P.forward(pm, id="z")
    assert C.forward(pm) == P.forward(pm)


def _run_lines():
    """Valid and invalid lines of every kind, for the indexed-run path (feed indexes many
    complete lines with one stage 1 call and falls back line by line when the run fails)."""
    good = [
        _msg(1), _msg(2, "a\\nb"), _msg(3, "caf\\u00e9 \\ud83d\\ude00"), _msg(4, 'q\\"q\\\\'),
        _msg(5, "日本語 — ok"), b'{"jsonrpc":"2.0","method":"n"}',
        b'{"jsonrpc":"2.0","id":"s1","result":{"a":[1,2.5,{"b":null,"c":true}],"d":-0.0}}',
        b'{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"nope","data":[1]}}',
        b'  {"jsonrpc" : "2.0" , "id" : 12345678901234567890 , "method" : "m" }  ',
        b'{"jsonrpc":"2.0","id":3,"method":"m","params":[]}',
        b'[' + _msg(6) + b',1,{"jsonrpc":"2.0","id":1,"result":2}]', b"[]",
        _msg(7) + b"\r",
    ]
    bad = [
        b'{"jsonrpc":"2.0","method":"x","params":{"a":"\\x"}}',
        b'{"jsonrpc":"2.0","method":"x","params":{"a":"\\ud800"}}',
        b'{"jsonrpc":"2.0","method":"x","params":{"a":"\\udc00\\ud800"}}',
        b'{"jsonrpc":"2.0","method":"x","params":{"a":"\xff"}}',
        b'{"jsonrpc":"2.0","method":"x","params":{"a":"b',
        b'{"jsonrpc":"2.0","method":"x","params":{"a":"b\x01"}}',
        b"\xef\xbb\xbf" + _msg(8),
        b"[" * 200 + b"]" * 200,
        b'{"jsonrpc":"2.0","method":"x","params":{"a":',
        b'{"jsonrpc":"2.0","method":"x","params":[1,',
        b"{}x", b"{} {}", b"123", b'"str"', b"true", b"nul", b"[1,", b"{}\\", b'"a\\',
        b'{"jsonrpc":"2.0","id":1,"result":1e400}', b'{"jsonrpc":"2.0","id":1.5,"result":1}',
        b'{"a":1}', b"1 2", b"]", b"}", b'{"jsonrpc":"2.0","method":"x"}}',
        b"", b"   ", b"\r", b"\t\r", b"x" * 1000,
    ]
    return good, bad


@pytest.mark.parametrize("seed", range(6))
def test_indexed_runs_match_pure_twin(seed):
    import random

    rng = random.Random(seed)
    good, bad = _run_lines()
    # mostly good lines (so that runs do index), some bad ones in some of the runs
    lines = [rng.choice(good) if rng.random() > (0.02 if seed % 2 else 0.2) else rng.choice(bad)
             for _ in range(400)]
    data = b"\n".join(lines) + b"\n"
    for size in (len(data), 65536, 4096, 1000, 333, 97):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        for lazy in (False, True):
            got, want = [], []
            c, p = C.Decoder(lazy=lazy, max_line_size=900), P.Decoder(lazy=lazy, max_line_size=900)
            for chunk in chunks:
                got += c.feed(chunk)
                want += p.feed(chunk)
            got += c.feed_eof()
            want += p.feed_eof()
            assert ([(_snapshot(f), getattr(f, "error", None)) for f in got]
                    == [(_snapshot(f), getattr(f, "error", None)) for f in want]), (size, lazy)


def test_line_after_a_huge_line_still_parses():
    # The index of a > 16 MiB line is given back; the next (mid-sized) line must still fit.
    d = C.Decoder()
    (f,) = d.feed(b'"' + b"a" * (17 * 1024 * 1024) + b'"\n')
    assert (f.kind, f.reason) == (C.MALFORMED, "not an object")
    line = b'{"jsonrpc":"2.0","method":"x","params":["' + b"a" * 5000 + b'"]}'
    (m,) = d.feed(line + b"\n")
    assert m.kind == C.NOTIFICATION and m.params == ["a" * 5000]
