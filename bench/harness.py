"""Shared machinery of the benchmark files: ground truth, verification and timing policy.

Every ``bench_*.py`` test calls :func:`run_case`, which

0. for the pure twin only, swaps in the corpus' first :attr:`Settings.py_max_lines` lines
   (it is ~20-100x slower than everything else; the row records the lines it used);
1. runs the workload once untimed (warm-up and calibration) and checks its result against
   the corpus' ground truth (:func:`expected`), recording ``extra_info["correct"]``;
2. picks the number of rounds from that run's duration (:class:`Settings`);
3. times the workload with ``benchmark.pedantic`` (one call per round) and records
   ``impl``, ``scenario``, ``corpus``, ``lines`` and ``bytes`` in ``extra_info``.

Ground truth comes from the generator (:mod:`bench.corpus`): the messages it encoded, the
bytes it wrote, and for ``forward`` the same lines with the new ids spliced in. That is
exactly what the pure-Python twin (the reference) must produce, so a ``py`` row with
``correct=True`` proves the reference right and any other row with ``correct=True``
agrees with the reference.
"""

from __future__ import annotations

import gc
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from .corpus import (
    ERROR_RESPONSE,
    NOTIFICATION,
    REQUEST,
    RESPONSE,
    Corpus,
    encode_msg,
)
from .impls import (
    FIRST_CLIENT_ID,
    FIRST_NEW_ID,
    FORWARDER_SCENARIOS,
    ForwarderInput,
    get_runner,
    get_setup,
    summarize,
)

__all__ = ["Settings", "expected", "run_case", "lazy_scenario"]

@dataclass(frozen=True)
class Settings:
    """Timing policy for one session.

    Attributes:
        scale: corpus size factor (1.0 = the documented sizes).
        target_s: wanted timed seconds per benchmark; rounds = target / calibration time.
        min_rounds: never fewer rounds (slow implementations get exactly this many).
        max_rounds: never more rounds (fast implementations stop here).
        py_max_lines: the pure twin is timed on at most this many leading lines of a
            corpus (0: no cap). It runs ~20-100x slower than everything else; a prefix
            of the same seeded stream gives the same per-line rate at a fraction of the
            suite's wall time. Its rows record the ``lines`` actually used.
    """

    scale: float = 1.0
    target_s: float = 2.0
    min_rounds: int = 3
    max_rounds: int = 15
    py_max_lines: int = 50_000

    def rounds_for(self, seconds: float) -> int:
        if seconds <= 0:
            return self.max_rounds
        return max(self.min_rounds, min(self.max_rounds, int(self.target_s / seconds + 0.999)))


def lazy_scenario(scenario: str) -> bool:
    """Whether the engine runs lazily in ``scenario`` (all but eager decode and encode)."""
    return scenario in ("decode-lazy", "route", "forward", *FORWARDER_SCENARIOS)


# ---------------------------------------------------------------------------------------
# Ground truth
# ---------------------------------------------------------------------------------------

_TRUTH: dict[tuple[str, str, int], Any] = {}


def _truth_route(corpus: Corpus) -> Any:
    counts = [0] * 6
    idsum = 0
    by_method: dict[str, int] = {}
    for kind, ident, method, _ in corpus.messages:
        if kind == ERROR_RESPONSE:
            kind = RESPONSE
        counts[kind] += 1
        if kind != NOTIFICATION:
            idsum += ident  # type: ignore[operator]
        if method is not None:
            by_method[method] = by_method.get(method, 0) + 1
    return summarize("route", (counts, idsum, by_method))


def _truth_forward(corpus: Corpus) -> Any:
    h = hashlib.blake2b(digest_size=16)
    nid = FIRST_NEW_ID
    lines = corpus.data.split(b"\n")
    for msg, line in zip(corpus.messages, lines[:-1], strict=True):
        if msg[0] == NOTIFICATION:
            h.update(line + b"\n")
        else:
            h.update(encode_msg((msg[0], nid, msg[2], msg[3])) + b"\n")
            nid += 1
    return corpus.lines, h.hexdigest()


def _forwarder_lines(corpus: Corpus) -> list[bytes]:
    """What the client's hop receives in the ``forwarder`` scenarios, line by line: the
    agent's requests keep their ids (the hop counts from 1, like the generator), the
    responses get the client's ids back (``FIRST_CLIENT_ID + k`` for the k-th response)."""
    out = []
    k = 0
    for msg, line in zip(corpus.messages, corpus.data.split(b"\n")[:-1], strict=True):
        if msg[0] in (RESPONSE, ERROR_RESPONSE):
            out.append(encode_msg((msg[0], FIRST_CLIENT_ID + k, msg[2], msg[3])) + b"\n")
            k += 1
        else:
            out.append(line + b"\n")
    return out


def responses_in(corpus: Corpus) -> int:
    return sum(1 for m in corpus.messages if m[0] in (RESPONSE, ERROR_RESPONSE))


def _truth_forwarder(corpus: Corpus, scenario: str) -> Any:
    lines = _forwarder_lines(corpus)
    if scenario == "forwarder":
        h = hashlib.blake2b(digest_size=16)
        for line in lines:
            h.update(line)
        return len(lines), h.hexdigest()
    requests = sum(1 for m in corpus.messages if m[0] == REQUEST)
    return sum(map(len, lines)), requests, 0


def expected(scenario: str, corpus: Corpus) -> Any:
    """The summary a correct implementation produces for ``scenario`` on ``corpus``.

    Cached per ``(scenario family, corpus, size)``; computed from the generator only.
    """
    family = "decode" if scenario.startswith("decode") else scenario
    key = (family, corpus.name, corpus.lines)
    value = _TRUTH.get(key)
    if value is None:
        if family == "decode":
            value = summarize("decode-eager", corpus.messages)
        elif family == "route":
            value = _truth_route(corpus)
        elif family == "forward":
            value = _truth_forward(corpus)
        elif family in FORWARDER_SCENARIOS:
            value = _truth_forwarder(corpus, family)
        elif family == "encode":
            value = (corpus.lines, hashlib.blake2b(corpus.data, digest_size=16).hexdigest())
        else:
            raise LookupError(scenario)
        _TRUTH[key] = value
    return value


# ---------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------


def _calibrate(scenario: str, runner: Any, inp: Any, setup: Any = None) -> tuple[float, Any]:
    """One untimed-by-pytest run with GC off: ``(seconds, summary of its result)``."""
    lazy = lazy_scenario(scenario)
    if setup is not None:
        inp = setup(inp)
    enabled = gc.isenabled()
    gc.disable()
    try:
        if scenario.startswith("decode"):
            kept: list[Any] = []
            t0 = time.perf_counter()
            runner(inp, kept.extend)
            seconds = time.perf_counter() - t0
            result: Any = kept
        else:
            t0 = time.perf_counter()
            result = runner(inp)
            seconds = time.perf_counter() - t0
        summary = summarize(scenario, result, lazy)
        del result
    finally:
        if enabled:
            gc.enable()
    return seconds, summary


def run_case(benchmark: Any, settings: Settings, scenario: str, impl: str, corpus: Corpus) -> None:
    """Verify, then time ``scenario`` × ``impl`` on ``corpus`` (see module docs)."""
    if impl == "py":
        corpus = corpus.prefix(settings.py_max_lines)
    runner = get_runner(scenario, impl)
    inp: Any = corpus.messages if scenario == "encode" else corpus.chunks
    if scenario in FORWARDER_SCENARIOS:
        inp = ForwarderInput(corpus.chunks, responses_in(corpus))
    setup = get_setup(scenario, impl)
    seconds, summary = _calibrate(scenario, runner, inp, setup)
    correct = summary == expected(scenario, corpus)

    benchmark.group = f"{scenario}-{corpus.name}"
    benchmark.extra_info.update(
        impl=impl,
        scenario=scenario,
        corpus=corpus.name,
        lines=corpus.lines,
        bytes=corpus.nbytes,
        scale=settings.scale,
        correct=correct,
        calibration_s=round(seconds, 6),
    )
    if setup is not None:  # untimed per round (a fresh forwarder with its pending table)
        benchmark.pedantic(runner, setup=lambda: ((setup(inp),), {}),
                           rounds=settings.rounds_for(seconds), iterations=1)
    else:
        benchmark.pedantic(runner, args=(inp,), rounds=settings.rounds_for(seconds), iterations=1)
