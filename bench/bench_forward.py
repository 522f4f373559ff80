"""Forward benchmark: what a proxy does with every line it relays.

Lazy feed; requests and responses are re-emitted with a new id (``forward(msg, new_id)``),
notifications verbatim; the output lines are collected. Baselines: ``orjson`` re-encodes
the decoded dict with the id replaced, ``msgspec`` re-encodes its Raw-bodied envelope.
Group: ``forward-<corpus>``.
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
def bench_forward(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                  impl: str, corpus_name: str) -> None:
    run_case(benchmark, settings, "forward", impl, corpora(corpus_name))


@pytest.mark.parametrize("corpus_name", corpus_params())
@pytest.mark.parametrize("impl", impl_params(("py", "c")))
def bench_forwarder(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                    impl: str, corpus_name: str) -> None:
    """The conductor's path: ``engine.Forwarder``, one call per chunk (group ``forwarder-<corpus>``)."""
    run_case(benchmark, settings, "forwarder", impl, corpora(corpus_name))
