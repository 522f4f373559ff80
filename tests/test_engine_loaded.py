"""The compiled twin is really loaded, and both twins expose one API.

``test_compiled_twin_is_active`` is the guard against a silent fallback: unless
``ACP_FAST_NO_EXTENSIONS`` is set, ``acp_fast`` must run on the compiled twin. The other
tests check that the twins agree on their public surface and share the pure-logic pieces
(``BatchReply``/``error_reply`` and the errors) by identity, so they cannot drift.
"""

from __future__ import annotations

import pytest

import acp_fast
import acp_fast.engine
import acp_fast._replies
import acp_fast.errors
from acp_fast import _compat

KIND_NAMES = ("REQUEST", "NOTIFICATION", "RESPONSE", "BATCH", "MALFORMED")


@pytest.mark.c_extension
@pytest.mark.skipif(_compat.NO_EXTENSIONS, reason="ACP_FAST_NO_EXTENSIONS is set: the pure twin is expected")
def test_compiled_twin_is_active():
    assert acp_fast.engine.IMPLEMENTATION == "c"
    assert acp_fast.IMPLEMENTATION == "c"
    assert acp_fast.engine.Decoder.__module__ == "acp_fast._engine_c"


@pytest.mark.skipif(not _compat.NO_EXTENSIONS, reason="only when ACP_FAST_NO_EXTENSIONS is set")
def test_pure_twin_is_active_when_extensions_are_disabled():
    assert acp_fast.engine.IMPLEMENTATION == "py"
    assert acp_fast.IMPLEMENTATION == "py"
    assert acp_fast.engine.Decoder.__module__ == "acp_fast._engine_py"


def test_implementation_tag(engine, engine_impl):
    assert engine.IMPLEMENTATION == engine_impl.tag


def test_identical_all(both_engines):
    py, c = both_engines
    assert list(c.__all__) == list(py.__all__)
    for name in py.__all__:
        assert hasattr(c, name), name
        assert hasattr(py, name), name


def test_identical_kinds_and_defaults(both_engines):
    py, c = both_engines
    for name in KIND_NAMES + ("DEFAULT_MAX_LINE_SIZE", "DEFAULT_MAX_DEPTH"):
        assert getattr(c, name) == getattr(py, name), name
        assert type(getattr(c, name)) is int, name


def test_kind_constants(engine):
    assert [getattr(engine, n) for n in KIND_NAMES] == [0, 1, 2, 3, 4]
    # _replies mirrors two of them; it must agree with every twin.
    assert acp_fast._replies._REQUEST == engine.REQUEST
    assert acp_fast._replies._MALFORMED == engine.MALFORMED
    assert engine.DEFAULT_MAX_LINE_SIZE == 64 * 1024 * 1024
    assert engine.DEFAULT_MAX_DEPTH == 128


def test_frame_classes_carry_their_kind(engine):
    assert engine.Batch.kind == engine.BATCH
    assert engine.Malformed.kind == engine.MALFORMED


def test_batch_reply_and_error_reply_are_shared(engine):
    assert engine.BatchReply is acp_fast._replies.BatchReply
    assert engine.error_reply is acp_fast._replies.error_reply


def test_rawjson_is_a_bytes_subclass(engine):
    assert issubclass(engine.RawJson, bytes)


@pytest.mark.parametrize("name", ["EncodeError", "DecoderClosedError"])
def test_errors_come_from_acp_fast_errors(engine, name):
    assert getattr(engine, name) is getattr(acp_fast.errors, name)


def test_raised_errors_are_the_shared_classes(engine):
    with pytest.raises(acp_fast.errors.EncodeError) as info:
        engine.encode_value(float("nan"))
    assert type(info.value) is acp_fast.errors.EncodeError
    dec = engine.Decoder()
    dec.feed_eof()
    with pytest.raises(acp_fast.errors.DecoderClosedError) as info2:
        dec.feed(b"{}\n")
    assert type(info2.value) is acp_fast.errors.DecoderClosedError


def test_decoder_signature(engine):
    dec = engine.Decoder(lazy=True, max_line_size=10, max_depth=3)
    assert (dec.lazy, dec.max_line_size, dec.max_depth, dec.buffered, dec.closed) == (True, 10, 3, 0, False)
    with pytest.raises(TypeError):
        engine.Decoder(True)  # keyword-only


def test_engine_namespace_holds_the_primitives_and_the_top_level_does_not():
    for name in ("Decoder", "Message", "Batch", "Malformed", "RawJson", "encode_request", "forward",
                 "BatchReply", "error_reply"):
        assert name in acp_fast.engine.__all__
        assert not hasattr(acp_fast, name), name  # engine primitives live in acp_fast.engine
    assert acp_fast.IMPLEMENTATION == acp_fast.engine.IMPLEMENTATION
