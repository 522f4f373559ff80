"""Objects per message in lazy mode: "no Python object per message beyond the frame itself".

For each implementation, the lazy decoder is fed a prefix of the corpus (about
:data:`SAMPLE_LINES` lines, in the usual 64 KiB chunks) and every frame is held. Then:

* ``objects_per_msg`` -- live allocations made during the feed (``tracemalloc``: every
  Python-allocator block still alive, objects of any size) divided by the frame count;
  the frame itself is one of them, so ``objects_beyond_frame = objects_per_msg - 1``;
* ``objects_per_msg_routed`` -- the same after reading ``kind``, ``id`` and ``method`` of
  every held frame (catches ids/methods materialised and cached on first access);
* ``blocks_per_msg`` -- cross-check without tracemalloc: growth of
  ``sys.getallocatedblocks()`` per frame (CPython counts every object-allocator block
  there, small or large, so the two figures should agree).

Allocations the engine makes with C++ ``new``/``malloc`` are invisible to both counters
(they are not Python objects). Objects taken from a free list (Cython ``@freelist``,
CPython's tuple/dict free lists) are not allocations either, so two lazy feeds of the same
prefix is held first ("drain") and every counted frame stays alive until both counts are
taken, so those lists are empty while counting. Per-chunk objects (a shared buffer) amortise to ~1/lines
per chunk. The timed part of the benchmark is a plain lazy feed of the same prefix (group
``objects-<corpus>``); the counts go to ``extra_info`` and the report's objects table.
"""

from __future__ import annotations

import gc
import math
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from .conftest import corpus_params, impl_params
from .corpus import CHUNK_SIZE, Corpus
from .harness import Settings
from .impls import get_runner

#: Lines (about) of each corpus' prefix that are held and counted.
SAMPLE_LINES = 10_000
#: Frames held before counting; larger than any free list (Cython's are 16-256 entries,
#: CPython's tuple free list 2000 per size).
DRAIN_FRAMES = 4096


def _prefix(corpus: Corpus, lines: int) -> list[bytes]:
    """The first chunks of ``corpus`` covering about ``lines`` lines (at least one chunk)."""
    k = max(1, math.ceil(lines * corpus.mean_line / CHUNK_SIZE))
    return corpus.chunks[:k]


def _route_access(frames: Sequence[Any]) -> None:
    """Read kind, id and method of every frame, whatever its implementation."""
    seen: list[Any] = []
    for f in frames:
        if type(f) is tuple:
            seen.append(f[:3])
        elif hasattr(f, "kind"):
            seen.append((f.kind, f.id, f.method))
        else:  # msgspec Envelope
            seen.append((f.id, f.method))
        seen.clear()  # read, then let go: only what the frames cache stays alive


def count_objects(run: Callable[..., int], chunks: Sequence[bytes]) -> dict[str, float]:
    """Live allocations per held frame after a lazy feed, and after route access."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    held: list[Any] = []  # every frame stays alive until the end: free lists stay empty
    try:
        while len(held) < DRAIN_FRAMES:  # drain: empties the free lists
            run(chunks, held.extend)
        # 1) object-allocator block count, no tracing overhead.
        frames: list[Any] = []
        before = sys.getallocatedblocks()
        run(chunks, frames.extend)
        blocks = sys.getallocatedblocks() - before
        n = len(frames)
        held.append(frames)

        # 2) tracemalloc: every live block allocated since start(), whatever its size.
        frames = []
        tracemalloc.start()
        try:
            run(chunks, frames.extend)
            fed = len(tracemalloc.take_snapshot().traces)
            _route_access(frames)
            routed = len(tracemalloc.take_snapshot().traces)
        finally:
            tracemalloc.stop()
        held.append(frames)
        del frames
    finally:
        del held
        if was_enabled:
            gc.enable()
    n = max(1, n)
    return {
        "messages": n,
        "objects_per_msg": round(fed / n, 3),
        "objects_beyond_frame": round(fed / n - 1, 3),
        "objects_per_msg_routed": round(routed / n, 3),
        "blocks_per_msg": round(blocks / n, 3),
    }


@pytest.mark.parametrize("corpus_name", corpus_params())
@pytest.mark.parametrize("impl", impl_params())
def bench_lazy_objects(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                       impl: str, corpus_name: str) -> None:
    corpus = corpora(corpus_name)
    chunks = _prefix(corpus, SAMPLE_LINES)
    run = get_runner("decode-lazy", impl)
    counts = count_objects(run, chunks)

    benchmark.group = f"objects-{corpus.name}"
    benchmark.extra_info.update(
        impl=impl,
        scenario="objects",
        corpus=corpus.name,
        lines=counts["messages"],
        bytes=sum(map(len, chunks)),
        scale=settings.scale,
        correct=True,
        **counts,
    )
    benchmark.pedantic(run, args=(chunks,), rounds=settings.min_rounds, iterations=1)
