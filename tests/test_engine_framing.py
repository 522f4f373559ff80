"""Framing rules of the engine (both twins, eager and lazy): line splitting, CRLF, blank
lines, EOF, ``max_line_size`` and the decoder's life cycle.

Reference: the module docstring of ``acp_fast/_engine_py.py`` and ``notes/protocol.md``
§1.1 (one JSON value per ``\\n``-terminated line; CRLF tolerated; the last unterminated line
is still delivered at EOF).
"""

from __future__ import annotations

import pytest

REQ1 = b'{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":1}}'
REQ2 = b'{"jsonrpc":"2.0","id":2,"method":"b","params":[1,2,3]}'
NOTE = b'{"jsonrpc":"2.0","method":"n"}'


def ids(frames):
    return [(f.kind, getattr(f, "id", None), getattr(f, "method", None)) for f in frames]


# ---------------------------------------------------------------------------------------
# Line splitting
# ---------------------------------------------------------------------------------------


def test_one_line_one_frame(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    frames = dec.feed(REQ1 + b"\n")
    assert len(frames) == 1
    (m,) = frames
    assert m.kind == engine.REQUEST and m.id == 1 and m.method == "a"
    assert m.params == {"x": 1}
    assert dec.buffered == 0


def test_several_lines_in_one_chunk_keep_order(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    frames = dec.feed(REQ1 + b"\n" + NOTE + b"\n" + REQ2 + b"\n")
    assert ids(frames) == [(engine.REQUEST, 1, "a"), (engine.NOTIFICATION, None, "n"), (engine.REQUEST, 2, "b")]


def test_partial_line_kept_across_feeds(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    assert dec.feed(REQ1[:10]) == []
    assert dec.buffered == 10
    assert dec.feed(REQ1[10:30]) == []
    assert dec.buffered == 30
    frames = dec.feed(REQ1[30:] + b"\n" + REQ2[:5])
    assert ids(frames) == [(engine.REQUEST, 1, "a")]
    assert frames[0].params == {"x": 1}
    assert frames[0].raw == REQ1
    assert dec.buffered == 5
    frames = dec.feed(REQ2[5:] + b"\n")
    assert ids(frames) == [(engine.REQUEST, 2, "b")]
    assert frames[0].raw == REQ2
    assert dec.buffered == 0


def test_byte_by_byte_equals_whole(engine, lazy):
    data = REQ1 + b"\n" + NOTE + b"\r\n\n" + REQ2 + b"\n"
    dec = engine.Decoder(lazy=lazy)
    frames = []
    for i in range(len(data)):
        frames += dec.feed(data[i : i + 1])
    assert ids(frames) == ids(engine.Decoder(lazy=lazy).feed(data))
    assert [f.raw for f in frames] == [REQ1, NOTE, REQ2]


def test_newline_alone_completes_buffered_line(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    assert dec.feed(REQ1) == []
    frames = dec.feed(b"\n")
    assert ids(frames) == [(engine.REQUEST, 1, "a")]


def test_empty_feed_is_a_no_op(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    assert dec.feed(b"") == []
    dec.feed(REQ1[:7])
    assert dec.feed(b"") == []
    assert dec.buffered == 7
    assert ids(dec.feed(REQ1[7:] + b"\n")) == [(engine.REQUEST, 1, "a")]


def test_feed_accepts_bytearray_and_memoryview(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    frames = dec.feed(bytearray(REQ1 + b"\n")) + dec.feed(memoryview(REQ2 + b"\n"))
    assert ids(frames) == [(engine.REQUEST, 1, "a"), (engine.REQUEST, 2, "b")]
    assert frames[1].params == [1, 2, 3]


def test_feed_rejects_str(engine):
    dec = engine.Decoder()
    with pytest.raises(TypeError):
        dec.feed(REQ1.decode() + "\n")


def test_feed_returns_a_list(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    assert type(dec.feed(REQ1 + b"\n")) is list
    assert type(dec.feed(b"")) is list
    assert type(dec.feed_eof()) is list


# ---------------------------------------------------------------------------------------
# EOF
# ---------------------------------------------------------------------------------------


def test_feed_eof_flushes_final_unterminated_line(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    assert ids(dec.feed(REQ1 + b"\n" + REQ2)) == [(engine.REQUEST, 1, "a")]
    frames = dec.feed_eof()
    assert ids(frames) == [(engine.REQUEST, 2, "b")]
    assert frames[0].params == [1, 2, 3]
    assert frames[0].raw == REQ2
    assert dec.buffered == 0
    assert dec.closed


def test_feed_eof_flushes_final_malformed_line(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    dec.feed(b'{"jsonrpc":')
    (m,) = dec.feed_eof()
    assert m.kind == engine.MALFORMED
    assert (m.code, m.reason, m.raw) == (-32700, "invalid JSON", b'{"jsonrpc":')


def test_feed_eof_final_line_with_cr(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    dec.feed(REQ1 + b"\r")
    (m,) = dec.feed_eof()
    assert m.kind == engine.REQUEST and m.raw == REQ1


@pytest.mark.parametrize("tail", [b"", b"   ", b"\r", b" \t "])
def test_feed_eof_without_pending_line_gives_nothing(engine, lazy, tail):
    dec = engine.Decoder(lazy=lazy)
    dec.feed(REQ1 + b"\n" + tail)
    assert dec.feed_eof() == []


def test_feed_after_feed_eof_raises(engine, errors):
    dec = engine.Decoder()
    assert not dec.closed
    dec.feed_eof()
    assert dec.closed
    with pytest.raises(errors.DecoderClosedError):
        dec.feed(REQ1 + b"\n")
    with pytest.raises(errors.DecoderClosedError):
        dec.feed(b"")


def test_feed_eof_twice_raises(engine, errors):
    dec = engine.Decoder()
    dec.feed_eof()
    with pytest.raises(errors.DecoderClosedError):
        dec.feed_eof()


def test_decoder_closed_error_is_acp_fast_error(engine, errors):
    dec = engine.Decoder()
    dec.feed_eof()
    with pytest.raises(errors.AcpFastError):
        dec.feed(b"x")


# ---------------------------------------------------------------------------------------
# CRLF and blank lines
# ---------------------------------------------------------------------------------------


def test_crlf_terminated_lines(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    frames = dec.feed(REQ1 + b"\r\n" + REQ2 + b"\r\n")
    assert ids(frames) == [(engine.REQUEST, 1, "a"), (engine.REQUEST, 2, "b")]
    assert [f.raw for f in frames] == [REQ1, REQ2]  # the \r is not part of the message


def test_crlf_split_between_feeds(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    assert dec.feed(REQ1 + b"\r") == []
    frames = dec.feed(b"\n")
    assert ids(frames) == [(engine.REQUEST, 1, "a")]
    assert frames[0].raw == REQ1


def test_only_one_trailing_cr_is_stripped(engine, lazy):
    # \r is JSON whitespace, so a second one is still a valid line; raw keeps it.
    dec = engine.Decoder(lazy=lazy)
    (m,) = dec.feed(REQ1 + b"\r\r\n")
    assert m.kind == engine.REQUEST
    assert m.raw == REQ1 + b"\r"


def test_malformed_raw_excludes_cr(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    (m,) = dec.feed(b"nope\r\n")
    assert m.kind == engine.MALFORMED and m.raw == b"nope"


@pytest.mark.parametrize(
    "blank",
    [b"", b" ", b"\t", b"\r", b"   \t  ", b" \r", b"\t\r", b"\r\r"],
    ids=["empty", "space", "tab", "cr", "spaces-tabs", "space-cr", "tab-cr", "cr-cr"],
)
def test_blank_and_whitespace_only_lines_are_skipped(engine, lazy, blank):
    dec = engine.Decoder(lazy=lazy)
    frames = dec.feed(blank + b"\n" + REQ1 + b"\n" + blank + b"\n" + blank + b"\n" + NOTE + b"\n")
    assert ids(frames) == [(engine.REQUEST, 1, "a"), (engine.NOTIFICATION, None, "n")]


@pytest.mark.parametrize("not_blank", [b"\x0c", b"\x0b", b"\xc2\xa0", b"\x00"], ids=["ff", "vt", "nbsp", "nul"])
def test_non_json_whitespace_line_is_invalid_json(engine, lazy, not_blank):
    dec = engine.Decoder(lazy=lazy)
    (m,) = dec.feed(not_blank + b"\n")
    assert m.kind == engine.MALFORMED
    assert (m.code, m.reason, m.raw) == (-32700, "invalid JSON", not_blank)


def test_whitespace_around_a_message_is_allowed(engine, lazy):
    dec = engine.Decoder(lazy=lazy)
    line = b" \t " + REQ1 + b" \t "
    (m,) = dec.feed(line + b"\n")
    assert m.kind == engine.REQUEST and m.id == 1
    assert m.raw == line


# ---------------------------------------------------------------------------------------
# max_line_size
# ---------------------------------------------------------------------------------------


def _too_long(engine, m):
    return m.kind == engine.MALFORMED and (m.raw, m.code, m.reason) == (b"", -32600, "line too long")


def test_limits_are_constructor_parameters(engine):
    dec = engine.Decoder()
    assert dec.max_line_size == engine.DEFAULT_MAX_LINE_SIZE == 64 * 1024 * 1024
    assert dec.max_depth == engine.DEFAULT_MAX_DEPTH == 128
    assert dec.lazy is False
    dec = engine.Decoder(lazy=True, max_line_size=100, max_depth=7)
    assert (dec.lazy, dec.max_line_size, dec.max_depth) == (True, 100, 7)


@pytest.mark.parametrize("kwargs", [{"max_line_size": 0}, {"max_line_size": -1}, {"max_depth": 0}])
def test_limits_must_be_positive(engine, kwargs):
    with pytest.raises(ValueError):
        engine.Decoder(**kwargs)


def test_line_of_exactly_max_line_size_is_accepted(engine, lazy):
    size = len(REQ1)
    dec = engine.Decoder(lazy=lazy, max_line_size=size)
    (m,) = dec.feed(REQ1 + b"\n")
    assert m.kind == engine.REQUEST and m.id == 1


def test_max_line_size_counts_the_cr(engine, lazy):
    # The limit counts the bytes before "\n", so a CRLF line may be one byte shorter.
    dec = engine.Decoder(lazy=lazy, max_line_size=len(REQ1))
    frames = dec.feed(REQ1 + b"\r\n" + REQ2 + b"\n")
    assert _too_long(engine, frames[0])
    assert ids(frames[1:]) == [(engine.REQUEST, 2, "b")]


def test_over_long_line_in_one_chunk(engine, lazy):
    dec = engine.Decoder(lazy=lazy, max_line_size=len(REQ1))
    long_line = REQ1[:-1] + b',"pad":"xx"}'
    frames = dec.feed(REQ1 + b"\n" + long_line + b"\n" + REQ2 + b"\n")
    assert len(frames) == 3
    assert ids(frames[:1]) == [(engine.REQUEST, 1, "a")]
    assert _too_long(engine, frames[1])  # reported in place, once
    assert ids(frames[2:]) == [(engine.REQUEST, 2, "b")]
    assert dec.buffered == 0


def test_over_long_line_one_byte_over(engine, lazy):
    dec = engine.Decoder(lazy=lazy, max_line_size=len(REQ1) - 1)
    frames = dec.feed(REQ1 + b"\n")
    assert len(frames) == 1 and _too_long(engine, frames[0])


def test_over_long_line_growing_over_several_feeds(engine, lazy):
    limit = 64
    dec = engine.Decoder(lazy=lazy, max_line_size=limit)
    frames = dec.feed(b'{"jsonrpc":"2.0","method":"x","params":["')
    assert frames == []
    assert 0 < dec.buffered <= limit
    reported = []
    for _ in range(20):  # grows far past the limit, 16 bytes at a time
        reported += dec.feed(b"y" * 16)
        assert dec.buffered <= limit  # memory stays bounded before any newline
    assert len(reported) == 1 and _too_long(engine, reported[0])  # reported once
    assert dec.buffered == 0
    # The rest of the long line, then its newline: nothing more is reported ...
    assert dec.feed(b"y" * 1000) == []
    assert dec.buffered <= limit
    frames = dec.feed(b'yy"]}\n' + NOTE + b"\n")
    # ... and decoding resumes with the next line.
    assert ids(frames) == [(engine.NOTIFICATION, None, "n")]


def test_over_long_line_detected_at_the_feed_that_crosses_the_limit(engine, lazy):
    limit = 40
    dec = engine.Decoder(lazy=lazy, max_line_size=limit)
    assert dec.feed(b"x" * limit) == []  # exactly the limit: still a candidate line
    assert dec.buffered == limit
    (m,) = dec.feed(b"x")  # one byte more: reported now, not at the newline
    assert _too_long(engine, m)
    assert dec.buffered == 0
    assert dec.feed(b"x" * 5 + b"\n") == []  # its newline ends the discarded line
    frames = dec.feed(NOTE + b"\n")
    assert ids(frames) == [(engine.NOTIFICATION, None, "n")]


def test_over_long_tail_of_a_chunk_is_reported_and_not_buffered(engine, lazy):
    limit = len(REQ1)
    dec = engine.Decoder(lazy=lazy, max_line_size=limit)
    frames = dec.feed(REQ1 + b"\n" + b"z" * (limit * 3))
    assert ids(frames[:1]) == [(engine.REQUEST, 1, "a")]
    assert len(frames) == 2 and _too_long(engine, frames[1])
    assert dec.buffered == 0
    assert dec.feed(b"z" * 10) == []
    frames = dec.feed(b"\n" + REQ2 + b"\n")
    assert ids(frames) == [(engine.REQUEST, 2, "b")]


def test_over_long_line_then_newline_in_same_later_chunk(engine, lazy):
    limit = 32
    dec = engine.Decoder(lazy=lazy, max_line_size=limit)
    (m,) = dec.feed(b"[" * 100)
    assert _too_long(engine, m)
    frames = dec.feed(b"]" * 100 + b"\n" + NOTE + b"\n" + b"{" * 10)
    assert ids(frames) == [(engine.NOTIFICATION, None, "n")]
    assert dec.buffered == 10


def test_discarded_line_at_eof_gives_nothing_more(engine, lazy):
    dec = engine.Decoder(lazy=lazy, max_line_size=10)
    (m,) = dec.feed(b"a" * 50)
    assert _too_long(engine, m)
    assert dec.feed_eof() == []


def test_over_long_lines_each_reported_once(engine, lazy):
    dec = engine.Decoder(lazy=lazy, max_line_size=20)
    frames = dec.feed(b"q" * 30 + b"\n" + b"r" * 30 + b"\n" + b"s" * 21 + b"\n")
    assert len(frames) == 3 and all(_too_long(engine, f) for f in frames)


def test_line_too_long_is_answered_with_invalid_request(engine):
    dec = engine.Decoder(max_line_size=8)
    (m,) = dec.feed(b"x" * 9 + b"\n")
    assert m.response_shaped is False
    assert engine.error_reply(m) == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request",'
        b'"data":"line too long"}}\n'
    )
