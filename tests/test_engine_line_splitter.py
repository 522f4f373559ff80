"""``LineSplitter`` (both twins): the lines a ``Decoder`` frames, without decoding them.

The contract is differential: for any bytes cut into any chunks, each ``feed`` returns exactly
``[frame.raw for frame in decoder.feed(chunk)]`` of a ``Decoder`` with the same
``max_line_size`` (a line over the limit is ``b""`` in both), and ``feed_eof`` likewise.
"""

from __future__ import annotations

import random

import pytest

REQ = b'{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":1}}'
NOTE = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","text":"\xc3\xa9"}}'
#: lines of every kind the framing rules tell apart
PIECES = [REQ, NOTE, b"", b" ", b"\t", b"\r", b" \t\r", b"\r\r", b" " + REQ + b" ", REQ + b"\r",
          b"not json", b"\xff\xfe bad utf-8", b"\x0c", b"[" * 40, b"x" * 70, b"y" * 64, b"{}"]


def _raws(decoder, chunk):
    return [frame.raw for frame in decoder.feed(chunk)]


def _stream(rng: random.Random) -> bytes:
    lines = [rng.choice(PIECES) for _ in range(rng.randint(1, 12))]
    data = b"\n".join(lines)
    return data + (b"\n" if rng.random() < 0.8 else b"")


def _chunks(rng: random.Random, data: bytes) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 6)))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@pytest.mark.parametrize("limit", [64, 1 << 20])
def test_feed_gives_the_decoders_raw_lines_for_any_cut(engine, limit):
    rng = random.Random(limit)
    for _ in range(400):
        data = _stream(rng)
        splitter = engine.LineSplitter(max_line_size=limit)
        decoder = engine.Decoder(lazy=True, max_line_size=limit)
        for chunk in _chunks(rng, data):
            assert splitter.feed(chunk) == _raws(decoder, chunk), (data, chunk)
            assert splitter.buffered == decoder.buffered <= limit
        assert splitter.feed_eof() == [frame.raw for frame in decoder.feed_eof()], data


#: how the engines begin a request or a notification
CALL = b'{"jsonrpc":"2.0","method":'


def test_calls_counts_the_lines_that_begin_as_the_engines_begin_a_call(engine):
    """`calls` (with `count_calls`): after each `feed` / `feed_eof`, how many of the lines it returned begin with
    CALL (a request written with its id first, a response, a line with a leading space or
    a shorter line do not), for any cut of any mix."""
    response = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    pieces = [*PIECES, NOTE + b"\r", b" " + NOTE, CALL, CALL[:-1], response, engine.encode_notification("a", None)[:-1]]
    rng = random.Random(7)
    seen = 0
    for _ in range(400):
        data = b"\n".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) + b"\n"
        splitter = engine.LineSplitter(max_line_size=1 << 20, count_calls=True)
        assert splitter.calls == 0
        for chunk in [*_chunks(rng, data), None]:
            out = splitter.feed(chunk) if chunk is not None else splitter.feed_eof()
            assert splitter.calls == sum(line.startswith(CALL) for line in out), (data, chunk, out)
            seen += splitter.calls
    assert seen > 0
    splitter = engine.LineSplitter(count_calls=True)
    assert splitter.feed(NOTE + b"\n" + NOTE + b"\n") == [NOTE, NOTE] and splitter.calls == 2
    assert splitter.feed(NOTE + b"\n" + response + b"\n") == [NOTE, response] and splitter.calls == 1
    assert splitter.feed(b"\n") == [] and splitter.calls == 0
    uncounted = engine.LineSplitter()
    assert uncounted.feed(NOTE + b"\n") == [NOTE] and uncounted.calls == 0  # not asked: not counted


def test_lines_come_as_written_without_the_newline_or_one_cr(engine):
    splitter = engine.LineSplitter()
    assert splitter.feed(REQ + b"\r\n" + b" \t\n\n" + NOTE + b"\r\r\n" + b"bad\npart") == [REQ, NOTE + b"\r", b"bad"]
    assert splitter.buffered == 4
    assert splitter.feed(b"ial\r\n") == [b"partial"]
    assert all(type(line) is bytes for line in splitter.feed(REQ + b"\n"))


def test_a_line_over_the_limit_is_an_empty_line_and_never_buffered(engine):
    splitter = engine.LineSplitter(max_line_size=8)
    assert splitter.feed(b"12345678\n123456789\nok\n") == [b"12345678", b"", b"ok"]
    assert splitter.feed(b"1234567") == []
    assert splitter.feed(b"89") == [b""]  # reported when it crosses the limit
    assert splitter.buffered == 0
    assert splitter.feed(b"more of it, still not kept") == []
    assert splitter.buffered == 0
    assert splitter.feed(b"...\nnext\n") == [b"next"]


def test_accepts_bytes_like_and_rejects_str(engine):
    splitter = engine.LineSplitter()
    assert splitter.feed(bytearray(b"a\n")) == [b"a"]
    assert splitter.feed(memoryview(b"b\n")) == [b"b"]
    with pytest.raises(TypeError):
        splitter.feed("c\n")


def test_life_cycle(engine, errors):
    splitter = engine.LineSplitter(max_line_size=100)
    assert splitter.max_line_size == 100 and not splitter.closed
    assert splitter.feed(b"last") == []
    assert splitter.feed_eof() == [b"last"]
    assert splitter.closed
    with pytest.raises(errors.DecoderClosedError):
        splitter.feed(b"x\n")
    with pytest.raises(errors.DecoderClosedError):
        splitter.feed_eof()
    with pytest.raises(ValueError, match="max_line_size must be >= 1"):
        engine.LineSplitter(max_line_size=0)
