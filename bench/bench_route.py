"""Route-only benchmark: lazy feed, then read ``kind``, ``id`` and ``method`` of every frame.

Nothing touches ``params``/``result``. The per-frame work (count kinds, sum ids, count
methods in a dict, like a dispatch-table lookup) is identical for every implementation.
Group: ``route-<corpus>``.
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
def bench_route(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                impl: str, corpus_name: str) -> None:
    run_case(benchmark, settings, "route", impl, corpora(corpus_name))


@pytest.mark.parametrize("corpus_name", corpus_params())
@pytest.mark.parametrize("impl", impl_params(("py", "c")))
def bench_forwarder_route(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                          impl: str, corpus_name: str) -> None:
    """``engine.Forwarder`` routing with the output dropped (group ``forwarder-route-<corpus>``)."""
    run_case(benchmark, settings, "forwarder-route", impl, corpora(corpus_name))
