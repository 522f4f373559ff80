#!/usr/bin/env python3
"""Soak the connection layer with injected faults (the long form of tests/test_faults.py).

Runs random fault rounds against child agents (``tests/helpers/fault_agent.py`` on the
public builder API) until ``--seconds`` have passed, checking after every round the
invariant of issue 8: every request gets exactly one response, and memory stays under a
stated bound. A long-lived agent per engine twin takes the survivable faults round after
round, so a leak shows up as resident-set drift; short-lived agents take the fatal ones.

Rounds:

* ``concurrent``: up to 10,000 requests (sync, async, sleeping, unknown) in one write;
* ``batch``: a batch of up to 10,000 entries with notifications and malformed entries;
* ``malformed``: a flood of malformed, blank and stray-response lines between echoes;
* ``unread``: a 1 KiB-echo flood while the client reads nothing, then reads everything;
* ``eof``: a fresh agent gets requests in flight, then EOF: all answered, clean exit;
* ``kill``: a fresh agent is killed mid-line (half a line, exit 3) or by SIGKILL
  mid-stream; the raw wire must hold nothing but whole answers before the cut.

Usage::

    python scripts/soak.py --seconds 600 --seed 8 [--engine py|c|both] [--quiet]

Exit status 0 when every round held the invariant, 1 otherwise (the first violation is
printed with its round, seed and engine, so ``--seed`` reproduces the sequence).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from fault_support import (  # noqa: E402
    RawChild,
    agent_argv,
    child_env,
    count_ids,
    key,
    note,
    req,
)

#: Peak-RSS growth (KiB) of the long-lived agent over its warmed-up resident set, across the
#: whole soak. The biggest round is a 10,000-entry batch (~20 MiB: every entry's handler
#: runs at once); 64 MiB allows for allocator fragmentation over many rounds, while a leak
#: of even a few hundred bytes per request exceeds it within minutes.
SOAK_BOUND_KIB = 64 * 1024
#: Resident-set drift (KiB) allowed between the middle and the last quiet measurement of the
#: long-lived agent (after a round, once everything was answered): a leak detector that
#: ignores the allocator's early growth to its plateau.
DRIFT_BOUND_KIB = 24 * 1024
HANG = 120.0  # seconds a round may take before it counts as hung

METHODS = ("_fault/echo", "_fault/aecho", "_fault/sleep", "_fault/unknown")
JUNK = [b"hello", b"[", b"{", b"{}", b"[]", b"1", b'"s"', b"null", b'{"jsonrpc":"2.0","id":7}',
        b'{"jsonrpc":"1.0","id":8,"method":"x"}', b'{"jsonrpc":"2.0","id":9,"method":5}',
        b"\xff\xfe\x00garbage", b"[[[[[[[[[[", b'{"jsonrpc":"2.0","method":"n","params":3}',
        b'{"jsonrpc":"2.0","id":{},"method":"x"}', b'{"a":1}']
SILENT = [b"", b"   ", b'{"jsonrpc":"2.0","id":"stray","result":1}']


class Violation(AssertionError):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Violation(what)


def exactly_once(counts: Any, ids: Any, what: str) -> None:
    bad = [rid for rid in ids if counts[key(rid)] != 1]
    check(not bad, f"{what}: {len(bad)} ids not answered exactly once, e.g. {bad[:5]}")


class Soak:
    def __init__(self, engine: str, rng: random.Random, verbose: bool) -> None:
        self.engine = engine
        self.rng = rng
        self.verbose = verbose
        self.next_id = 0
        self.requests = 0
        self.rounds: dict[str, int] = {}
        self.agent: RawChild | None = None
        self.base = 0
        self.quiet_rss: list[int] = []

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"{self.engine}-{self.next_id}"

    # -- the long-lived agent ---------------------------------------------------------

    def long_lived(self) -> RawChild:
        if self.agent is None:
            self.agent = RawChild(agent_argv(), child_env(self.engine))
            self.agent.send(req("warm", "_fault/rss"))
            self.agent.response("warm", HANG)
            self.base = self.agent.status()["rss"]
        return self.agent

    def settle(self, child: RawChild, ids: list[Any], extra_nulls: int = 0) -> None:
        """Wait until every id (and ``extra_nulls`` id-less errors) was answered; check once."""
        want = {key(r) for r in ids}
        child.wait_for(lambda: want.issubset(set(count_ids(child.lines))) and
                       count_ids(child.lines)[key(None)] >= extra_nulls, HANG, "every answer")
        counts = count_ids(child.lines)
        exactly_once(counts, ids, "answers")
        check(counts[key(None)] == extra_nulls, f"{counts[key(None)]} id-less errors, expected {extra_nulls}")
        self.requests += len(ids) + extra_nulls
        child.clear_lines()  # keep this process's memory flat over a long soak

    def after_round(self) -> None:
        child = self.long_lived()
        probe = self.fresh_id()
        child.send(req(probe, "_fault/echo", {}))
        self.settle(child, [probe])
        st = child.status()
        self.quiet_rss.append(st["rss"])
        check(st["hwm"] - self.base <= SOAK_BOUND_KIB,
              f"peak RSS grew by {st['hwm'] - self.base} KiB (> {SOAK_BOUND_KIB})")

    # -- rounds -----------------------------------------------------------------------

    def round_concurrent(self) -> None:
        child = self.long_lived()
        n = self.rng.randrange(1, 10_001)
        ids = [self.fresh_id() for _ in range(n)]
        child.send(b"".join(req(rid, self.rng.choice(METHODS), {"s": 0.001 * self.rng.randrange(10)}) for rid in ids))
        self.settle(child, ids)

    def round_batch(self) -> None:
        child = self.long_lived()
        n = self.rng.randrange(1, 10_001)
        ids, entries, malformed = [], [], 0
        for _ in range(n):
            r = self.rng.random()
            if r < 0.8:
                ids.append(self.fresh_id())
                entries.append({"jsonrpc": "2.0", "id": ids[-1], "method": self.rng.choice(METHODS),
                                "params": {"s": 0}})
            elif r < 0.9:
                entries.append(json.loads(note("_fault/ignored", {})))
            else:
                entries.append(self.rng.choice([1, "x", None, {}, []]))
                malformed += 1
        child.send(json.dumps(entries).encode() + b"\n")
        if ids or malformed:
            self.settle(child, ids, malformed)

    def round_malformed(self) -> None:
        child = self.long_lived()
        ids, junk, parts = [], 0, []
        for _ in range(self.rng.randrange(100, 20_000)):
            r = self.rng.random()
            if r < 0.4:
                parts.append(self.rng.choice(JUNK))
                junk += 1
            elif r < 0.5:
                parts.append(self.rng.choice(SILENT))
            else:
                ids.append(self.fresh_id())
                parts.append(req(ids[-1], "_fault/echo", {"p": "x" * self.rng.randrange(2000)})[:-1])
        data = b"\n".join(parts) + b"\n"
        flood = child.send_in_background(data[i:i + 65536] for i in range(0, len(data), 65536))
        check(flood.wait(HANG) and flood.error is None, "the malformed flood could not be written")
        self.settle(child, ids, junk)

    def round_unread(self) -> None:
        child = self.long_lived()
        child.stop_reading()
        ids: list[str] = []

        def chunks() -> Any:
            for _ in range(self.rng.randrange(16, 384)):
                batch_ids = [self.fresh_id() for _ in range(64)]
                ids.extend(batch_ids)
                yield b"".join(req(rid, "_fault/echo", {"p": "u" * 1000}) for rid in batch_ids)

        flood = child.send_in_background(chunks())
        flood.wait(self.rng.random() * 2)
        peak = child.status()["hwm"] - self.base
        check(peak <= SOAK_BOUND_KIB, f"unread flood: peak RSS grew by {peak} KiB")
        child.start_reading()
        check(flood.wait(HANG) and flood.error is None, "the unread flood never finished")
        self.settle(child, ids)

    def round_eof(self) -> None:
        with RawChild(agent_argv(), child_env(self.engine)) as child:
            child.start_reading()
            ids = [self.fresh_id() for _ in range(self.rng.randrange(1, 2000))]
            child.send(b"".join(req(rid, self.rng.choice(METHODS[:3]), {"s": 0.001 * self.rng.randrange(50)})
                                for rid in ids))
            child.close_stdin()
            child.wait_eof(HANG)
            check(child.proc.wait(HANG) == 0, f"agent exit status {child.proc.returncode} after EOF")
            exactly_once(count_ids(child.lines), ids, "EOF with requests in flight")
            self.requests += len(ids)

    def round_kill(self) -> None:
        with RawChild(agent_argv(), child_env(self.engine)) as child:
            child.start_reading()
            ids = [self.fresh_id() for _ in range(self.rng.randrange(1, 500))]
            child.send(b"".join(req(rid, "_fault/echo", {}) for rid in ids))
            child.send(req("stream", "_fault/stream", {"n": 10**9, "size": 100, "drain": True}))
            child.wait_for(lambda: sum(1 for m in child.lines if isinstance(m, dict) and m.get("method")) > 20,
                           HANG, "the stream")
            if self.rng.random() < 0.5:
                child.send(req("die", "_fault/die", {"how": "midline"}))
            else:
                child.kill(signal.SIGKILL)
            child.wait_eof(HANG)
            whole = [m for m in child.lines if isinstance(m, (dict, list))]
            cut = [m for m in child.lines if not isinstance(m, (dict, list))]
            check(len(cut) <= 1, f"more than one broken line on the wire: {cut[:2]!r}")
            exactly_once(count_ids(whole), ids, "answers before the kill")
            self.requests += len(ids)

    ROUNDS = {"concurrent": 3, "batch": 2, "malformed": 2, "unread": 2, "eof": 1, "kill": 1}

    def one(self) -> str:
        name = self.rng.choices(list(self.ROUNDS), weights=list(self.ROUNDS.values()))[0]
        getattr(self, f"round_{name}")()
        self.after_round()
        self.rounds[name] = self.rounds.get(name, 0) + 1
        return name

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to soak (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--engine", choices=("py", "c", "both"), default="both")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    engines = ["py", "c"] if args.engine == "both" else [args.engine]
    print(f"soak: seed {seed}, engines {', '.join(engines)}, {args.seconds:g} s", flush=True)
    rng = random.Random(seed)
    soaks = [Soak(e, random.Random(rng.random()), not args.quiet) for e in engines]
    start = time.monotonic()
    last_print = 0.0
    failed = None
    total_rounds = 0
    try:
        while time.monotonic() - start < args.seconds:
            for s in soaks:
                try:
                    name = s.one()
                except AssertionError as exc:  # a Violation, or a hang caught by a wait
                    failed = f"engine {s.engine}, round {total_rounds + 1}: {exc}"
                    break
                total_rounds += 1
                now = time.monotonic() - start
                if not args.quiet and (now - last_print >= 5 or total_rounds == 1):
                    last_print = now
                    peak = (s.agent.status().get("hwm", 0) - s.base) if s.agent else 0
                    print(f"[{now:7.1f} s] {s.engine}: round {total_rounds} ({name}), "
                          f"{s.requests} requests answered once, peak growth {peak} KiB", flush=True)
            if failed:
                break
    finally:
        for s in soaks:
            s.close()
    for s in soaks:
        # from the middle of the soak on: the allocator's plateau is reached, a leak keeps growing
        drift = (s.quiet_rss[-1] - s.quiet_rss[len(s.quiet_rss) // 2]) if len(s.quiet_rss) > 1 else 0
        rounds = ", ".join(f"{k} {v}" for k, v in sorted(s.rounds.items()))
        print(f"soak: {s.engine}: {sum(s.rounds.values())} rounds ({rounds}); {s.requests} requests and "
              f"malformed lines answered exactly once; peak growth {s.agent.peak_kib - s.base if s.agent else 0} "
              f"KiB (bound {SOAK_BOUND_KIB}); quiet RSS drift {drift} KiB (bound {DRIFT_BOUND_KIB})")
        if failed is None and drift > DRIFT_BOUND_KIB:
            failed = f"engine {s.engine}: RSS drifted by {drift} KiB over the soak (a leak?)"
    if failed:
        print(f"soak: FAILED (seed {seed}): {failed}", flush=True)
        return 1
    print(f"soak: OK (seed {seed})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
