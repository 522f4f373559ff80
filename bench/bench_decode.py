"""Decode benchmarks: eager (params as Python objects) and lazy (envelope only).

Every implementation is fed the corpus in 64 KiB chunks; each chunk's frames go to a sink
that drops them (a stream keeps memory bounded). Groups: ``decode-eager-<corpus>`` and
``decode-lazy-<corpus>``. The ``orjson`` baseline has no lazy mode: its lazy rows decode
everything; the ``msgspec`` lazy rows decode an envelope Struct with ``msgspec.Raw`` bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .conftest import corpus_params, impl_params
from .corpus import Corpus
from .harness import Settings, run_case


@pytest.mark.parametrize("corpus_name", corpus_params())
@pytest.mark.parametrize("impl", impl_params())
@pytest.mark.parametrize("mode", ["eager", "lazy"])
def bench_decode(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                 mode: str, impl: str, corpus_name: str) -> None:
    run_case(benchmark, settings, f"decode-{mode}", impl, corpora(corpus_name))
