"""Sanity checks of the suite itself (not timed): corpora shapes and the correctness flag.

They run with the suite (same corpora, same scale) so a benchmark table is never built on
a corpus that drifted from its definition, or on a ``correct`` flag that cannot fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .corpus import (
    CHUNK_SIZE,
    ERROR_RESPONSE,
    NOTIFICATION,
    REQUEST,
    RESPONSE,
    Corpus,
    build_corpus,
)
from .harness import expected
from .impls import summarize

#: Documented mean line sizes (bytes) and the tolerance a scaled-down corpus must meet.
MEAN_LINE = {"mixed": 343, "small": 120, "large": 17_000}


def test_corpus_is_deterministic() -> None:
    a, b = build_corpus("mixed", 300), build_corpus("mixed", 300)
    assert a.data == b.data
    assert a.data != build_corpus("small", 300).data


@pytest.mark.parametrize("name", ["mixed", "small", "large"])
def test_corpus_shape(corpora: Callable[[str], Corpus], name: str) -> None:
    corpus = corpora(name)
    tolerance = 0.1 if corpus.lines >= 1000 else 0.25
    assert abs(corpus.mean_line / MEAN_LINE[name] - 1) < tolerance, corpus.mean_line
    assert b"".join(corpus.chunks) == corpus.data
    assert all(len(c) <= CHUNK_SIZE for c in corpus.chunks)
    if len(corpus.chunks) > 1:
        assert any(not c.endswith(b"\n") for c in corpus.chunks[:-1]), "no line straddles a chunk"
    assert corpus.data.count(b"\n") == corpus.lines
    assert not corpus.data.isascii(), "corpus has no non-ASCII text"


def test_mixed_proportions(corpora: Callable[[str], Corpus]) -> None:
    corpus = corpora("mixed")
    n = corpus.lines
    counts = [0] * 6
    chunks = tool = 0
    for kind, _, method, params in corpus.messages:
        counts[kind] += 1
        if method == "session/update":
            su = params["update"]["sessionUpdate"]
            chunks += su == "agent_message_chunk"
            tool += su in ("tool_call", "tool_call_update")
    tol = 0.02 if n >= 10_000 else 0.08
    assert abs(chunks / n - 0.70) < tol
    assert abs(tool / n - 0.10) < tol
    assert abs(counts[REQUEST] / n - 0.10) < tol
    assert abs((counts[RESPONSE] + counts[ERROR_RESPONSE]) / n - 0.10) < tol
    assert counts[NOTIFICATION] == chunks + tool


def test_correct_flag_can_fail(corpora: Callable[[str], Corpus]) -> None:
    corpus = corpora("small")
    lines = [line + b"\n" for line in corpus.data.split(b"\n")[:-1]]
    assert summarize("encode", lines) == expected("encode", corpus)
    lines[len(lines) // 2] = lines[len(lines) // 2].replace(b'"2.0"', b'"2.1"')
    assert summarize("encode", lines) != expected("encode", corpus)
    frames = list(corpus.messages)
    kind, ident, method, payload = frames[0]
    frames[0] = (kind, ident, (method or "") + "x", payload)
    assert summarize("decode-eager", frames) != expected("decode-eager", corpus)
