"""The soak (``scripts/soak.py``) and the differential fuzz (``scripts/fuzz_twins.py``).

Soak: a short run ends by itself with exit 0 and its summary, on every twin; its batch
round sends an over-limit batch on purpose and expects exactly one -32600 for it (the
batch that made the soak wait forever for 10,000 answers once ``max_batch_size`` landed);
a wait that cannot end is a failure at the soak's deadline, not a hang.

Fuzz: ``Decoder.feed`` (and the other calls the fuzz makes on decoded frames) never
raises, so an exception from either twin is a finding -- also when both twins raise
alike, which the fuzz once counted as agreement; ``EncodeError``, the encoders' documented
error, is still compared as a value.

The scripts are run as subprocesses (bounded by a timeout) or imported by path.
"""

from __future__ import annotations

import importlib.util
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from fault_support import RawChild, agent_argv, child_env, count_ids, key, req, responses  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SOAK = REPO / "scripts" / "soak.py"
FUZZ = REPO / "scripts" / "fuzz_twins.py"
BOUND = 120.0  # seconds: only turns a hang into a failure


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------
# soak
# ---------------------------------------------------------------------------------------


def run_soak(tag: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SOAK), *args], env=child_env(tag), cwd=str(REPO),
                          capture_output=True, text=True, timeout=BOUND)


def test_soak_short_run_ends_with_its_summary(engine_impl: Any) -> None:
    tag = engine_impl.tag
    t0 = time.monotonic()
    proc = run_soak(tag, "--seconds", "2", "--seed", "8", "--engine", tag, "--grace", "60", "--quiet")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("soak: OK (seed 8): "), proc.stdout
    (twin,) = [line for line in lines if line.startswith(f"soak: {tag}: ")]
    # every kind of round ran, the over-limit batch among them, and the counts agree
    assert "batch 1" in twin and "kill 1" in twin and "unread 1" in twin, twin
    sent = int(twin.split(" requests and malformed lines sent, ")[0].rsplit(" ", 1)[1])
    assert f"{sent} requests and malformed lines sent, {sent} answered exactly once" in twin, twin
    assert "1 over-limit batches (max_batch_size 1024) answered by one -32600 each" in twin, twin
    assert f"{sent} requests sent, {sent} answered exactly once" in lines[-1], lines[-1]
    assert elapsed < 60, f"a 2-second soak took {elapsed:.0f} s"


def test_soak_timeout_is_a_failure_not_a_hang(engine_impl: Any) -> None:
    """No time left at all: the first wait times out at once, exit 1 with the reason."""
    proc = run_soak(engine_impl.tag, "--seconds", "0", "--grace", "0", "--seed", "8",
                    "--engine", engine_impl.tag)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("soak: FAILED (seed 8") and "timed out" in last, proc.stdout


def test_soak_batch_round_checks_the_limit_within_a_bounded_wait(engine_impl: Any) -> None:
    """The soak's batch round, three times: one batch within ``max_batch_size``, answered
    entry by entry, and one over it, answered by exactly one -32600 -- or a Timeout at the
    deadline (never a wait for answers that do not come)."""
    soak = load_script(SOAK)
    s = soak.Soak(engine_impl.tag, random.Random(8), False, time.monotonic() + 60)
    assert s.batch_limit == engine_impl.module.Decoder().max_batch_size
    try:
        for _ in range(3):
            s.round_batch()
            s.after_round()
    finally:
        s.close()
    assert s.oversize == 3
    assert s.requests == s.sent > 3


def test_soak_waits_end_at_the_deadline(engine_impl: Any) -> None:
    soak = load_script(SOAK)
    s = soak.Soak(engine_impl.tag, random.Random(8), False, time.monotonic() + 30)
    try:
        child = s.long_lived()
        s.deadline = time.monotonic() + 1
        t0 = time.monotonic()
        with pytest.raises(soak.Timeout, match="timed out"):
            s.settle(child, ["never-asked"])  # an answer that never comes
        assert time.monotonic() - t0 < 10
    finally:
        s.close()


def test_agent_answers_an_over_limit_batch_once(engine_impl: Any) -> None:
    """What the soak relies on, checked on the wire with a bounded wait: a batch one entry
    over the agent's limit gets one id-less -32600 and none of its requests an answer."""
    limit = engine_impl.module.Decoder().max_batch_size
    with RawChild(agent_argv(), child_env(engine_impl.tag)) as child:
        child.start_reading()
        entries = b",".join(req(f"b{i}", "_fault/echo", {})[:-1] for i in range(limit + 1))
        child.send(b"[" + entries + b"]\n" + req("after", "_fault/echo", {}))
        child.wait_for(lambda: count_ids(child.lines)[key("after")] == 1
                       and count_ids(child.lines)[key(None)] >= 1, 30, "the -32600 and the probe")
        time.sleep(0.2)  # a stray answer would come right behind
        counts = count_ids(child.lines)
        assert counts == {key(None): 1, key("after"): 1}, counts
        (err,) = [r for r in responses(child.lines) if r["id"] is None]
        assert err["error"]["code"] == -32600, err


# ---------------------------------------------------------------------------------------
# differential fuzz
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz(both_engines: Any) -> ModuleType:
    return load_script(FUZZ)


def fake_twin(base: ModuleType, **overrides: Any) -> SimpleNamespace:
    """A twin that is ``base`` except for ``overrides``."""
    return SimpleNamespace(**{**vars(base), **overrides})


class Boom(RuntimeError):
    pass


def raising_decoder(base: ModuleType) -> Any:
    class Decoder:
        def __init__(self, **kw: Any) -> None:
            self._d = base.Decoder(**kw)

        def feed(self, data: bytes) -> Any:
            if b"\n" in data:
                raise Boom("feed crashed")
            return self._d.feed(data)

        def feed_eof(self) -> Any:
            return self._d.feed_eof()

        @property
        def buffered(self) -> int:
            return self._d.buffered

    return Decoder


def overbuffering_decoder(base: ModuleType) -> Any:
    class Decoder(raising_decoder(base)):  # type: ignore[misc]
        def feed(self, data: bytes) -> Any:
            return self._d.feed(data)

        @property
        def buffered(self) -> int:
            return 10**9

    return Decoder


DATA = b'{"jsonrpc":"2.0","id":1,"method":"m"}\n[1]\n'
KW = {"max_depth": 8, "max_line_size": 200, "max_batch_size": 4}
WAYS = {"whole": [], "random": [5, 20]}


def test_fuzz_twins_agree_on_sane_input(fuzz: ModuleType) -> None:
    problems, frames = fuzz.compare_decoding(DATA, WAYS, KW)
    assert problems == [] and frames == 2
    assert fuzz.compare_forwarding(DATA, [5, 20], 1, True, 0, KW) == []
    assert fuzz.check_encoders({"a": [1, "é"]}) is None


def test_fuzz_a_crash_of_one_twin_is_a_finding(fuzz: ModuleType) -> None:
    P = fuzz.P
    twins = (("py", P), ("fake", fake_twin(P, Decoder=raising_decoder(P))))
    problems, _ = fuzz.compare_decoding(DATA, WAYS, KW, twins)
    crashes = [p for p in problems if p.startswith("crash")]
    assert len(crashes) == 4 and all("fake raised Boom('feed crashed')" in p for p in crashes), problems


def test_fuzz_a_crash_of_both_twins_is_not_agreement(fuzz: ModuleType) -> None:
    P, C = fuzz.P, fuzz.C
    twins = (("py", fake_twin(P, Decoder=raising_decoder(P))), ("c", fake_twin(C, Decoder=raising_decoder(C))))
    problems, frames = fuzz.compare_decoding(DATA, WAYS, KW, twins)
    assert len(problems) == 8 and all(p.startswith("crash") for p in problems), problems
    assert {p.split(" raised ")[0].rsplit(" ", 1)[1] for p in problems} == {"py", "c"}


def test_fuzz_the_buffered_bound_is_checked_even_when_both_exceed_it(fuzz: ModuleType) -> None:
    P, C = fuzz.P, fuzz.C
    twins = (("py", fake_twin(P, Decoder=overbuffering_decoder(P))),
             ("c", fake_twin(C, Decoder=overbuffering_decoder(C))))
    problems, _ = fuzz.compare_decoding(DATA, WAYS, KW, twins)
    assert len(problems) == 8 and all("BoundExceeded" in p and "buffered=1000000000" in p for p in problems), problems


def test_fuzz_a_crash_of_both_forwarders_is_a_finding(fuzz: ModuleType) -> None:
    def forwarder(*a: Any, **kw: Any) -> Any:
        raise Boom("forwarder crashed")

    P, C = fuzz.P, fuzz.C
    twins = (("py", fake_twin(P, Forwarder=forwarder)), ("c", fake_twin(C, Forwarder=forwarder)))
    problems = fuzz.compare_forwarding(DATA, [5], 1, True, 0, KW, twins)
    assert len(problems) == 2 and all(p.startswith("crash") and "Boom" in p for p in problems), problems


def test_fuzz_encoders_compare_encode_error_but_report_other_exceptions(fuzz: ModuleType) -> None:
    P, C = fuzz.P, fuzz.C
    # EncodeError is documented: both raising it for NaN is agreement (json.dumps refuses too)
    assert fuzz.check_encoders([math.nan]) is None
    assert fuzz.check_encoders([P.RawJson(b"1\n2")]) is None

    def encode_value(v: Any) -> bytes:
        raise Boom("encoder crashed")

    twins = (("py", fake_twin(P, encode_value=encode_value)), ("c", fake_twin(C, encode_value=encode_value)))
    for value in ([1], [math.nan], [P.RawJson(b"1")]):
        problem = fuzz.check_encoders(value, twins)
        assert problem is not None and problem.startswith("crash: py raised Boom"), (value, problem)


def test_fuzz_main_reports_a_shared_crash_with_a_reproducer(fuzz: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    P, C = fuzz.P, fuzz.C
    monkeypatch.setattr(fuzz, "TWINS", (("py", fake_twin(P, Decoder=raising_decoder(P))),
                                        ("c", fake_twin(C, Decoder=raising_decoder(C)))))
    assert fuzz.main(["--seed", "3", "--count", "2"]) == 1
    out, err = capsys.readouterr()
    assert "crash" in err and "Boom" in err, err
    assert "reproduce: python scripts/fuzz_twins.py --seed 3 --count 1" in err, err
    assert "divergences=0 crashes=" in out and "crashes=0" not in out, out
