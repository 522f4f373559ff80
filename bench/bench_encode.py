"""Encode benchmark: the corpus' messages from Python objects back to lines.

Engines use ``encode_notification``/``encode_request``/``encode_result``/``encode_error``;
the baselines serialise the equivalent envelope dict (``orjson.dumps`` with
``OPT_APPEND_NEWLINE``; ``msgspec.json.Encoder().encode`` plus a newline). Output must be
byte-identical to the corpus. Group: ``encode-<corpus>``.
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
def bench_encode(benchmark: Any, settings: Settings, corpora: Callable[[str], Corpus],
                 impl: str, corpus_name: str) -> None:
    run_case(benchmark, settings, "encode", impl, corpora(corpus_name))
