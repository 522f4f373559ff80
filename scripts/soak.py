#!/usr/bin/env python3
"""Soak the connection layer with injected faults (the long form of tests/test_faults.py).

Runs random fault rounds against child agents (``tests/helpers/fault_agent.py`` on the
public builder API) until ``--seconds`` have passed, checking after every round the
invariant of issue 8: every request gets exactly one response, and memory stays under a
stated bound. A long-lived agent per engine twin takes the survivable faults round after
round, so a leak shows up as resident-set drift; short-lived agents take the fatal ones.

Rounds (every kind once first, in a random order, then weighted at random):

* ``concurrent``: up to 10,000 requests (sync, async, sleeping, unknown) in one write;
* ``batch``: a batch of up to ``max_batch_size`` entries (the agent's engine's limit,
  read from the twin's configuration) with notifications and malformed entries, then a
  batch over that limit (up to 10,000 entries), which must be answered by exactly one
  -32600 error (and none of its requests by anything);
* ``malformed``: a flood of malformed, blank and stray-response lines between echoes;
* ``unread``: a 1 KiB-echo flood while the client reads nothing, then reads everything;
* ``eof``: a fresh agent gets requests in flight, then EOF: all answered, clean exit;
* ``kill``: a fresh agent is killed mid-line (half a line, exit 3) or by SIGKILL
  mid-stream; the raw wire must hold nothing but whole answers before the cut.

On the long-lived agent every answer must be one the round expects: an answer to an id
that was not asked for (or asked for in an earlier round) is a violation too.

No wait is unbounded: every wait (for answers, for a write to go through, for a child to
exit) ends at the soak's deadline, ``--seconds`` plus ``--grace`` seconds from the start,
and running into it is a failure ("timed out ..."); a watchdog ends the process (exit 1)
should anything still block a little after that.

Usage::

    python scripts/soak.py --seconds 600 --seed 8 [--engine py|c|both] [--grace 60] [--quiet]

Exit status 0 when every round held the invariant, 1 otherwise (the first violation or
timeout is printed with its round, seed and engine, so ``--seed`` reproduces the sequence).
The last line is ``soak: OK (seed N): ...`` or ``soak: FAILED (seed N): ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Iterator
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
    responses,
)

#: Peak-RSS growth (KiB) of the long-lived agent over its warmed-up resident set, across the
#: whole soak. The biggest rounds are 10,000 concurrent requests and a 10,000-entry
#: over-limit batch line; 64 MiB allows for allocator fragmentation over many rounds, while a leak
#: of even a few hundred bytes per request exceeds it within minutes.
SOAK_BOUND_KIB = 64 * 1024
#: Resident-set drift (KiB) allowed between the middle and the last quiet measurement of the
#: long-lived agent (after a round, once everything was answered): a leak detector that
#: ignores the allocator's early growth to its plateau.
DRIFT_BOUND_KIB = 24 * 1024
GRACE = 60.0  # default seconds past --seconds before a wait counts as hung (--grace)
WATCHDOG = 30.0  # seconds past that deadline before the watchdog ends the process
OVERSIZE_MAX = 10_000  # the largest over-limit batch sent

METHODS = ("_fault/echo", "_fault/aecho", "_fault/sleep", "_fault/unknown")
JUNK = [b"hello", b"[", b"{", b"{}", b"[]", b"1", b'"s"', b"null", b'{"jsonrpc":"2.0","id":7}',
        b'{"jsonrpc":"1.0","id":8,"method":"x"}', b'{"jsonrpc":"2.0","id":9,"method":5}',
        b"\xff\xfe\x00garbage", b"[[[[[[[[[[", b'{"jsonrpc":"2.0","method":"n","params":3}',
        b'{"jsonrpc":"2.0","id":{},"method":"x"}', b'{"a":1}']
SILENT = [b"", b"   ", b'{"jsonrpc":"2.0","id":"stray","result":1}']


class Violation(AssertionError):
    pass


class Timeout(Violation):
    """A wait ran into the soak's deadline."""


def batch_limit(engine: str) -> int:
    """The ``max_batch_size`` the agent's connection has on twin ``engine``.

    The fault agent serves ``Agent.builder()`` with the engine's defaults, so its limit is
    what a default-configured decoder of that twin reports.
    """
    module = importlib.import_module(f"acp_fast._engine_{engine}")
    return int(module.Decoder().max_batch_size)


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Violation(what)


def exactly_once(counts: Any, ids: Any, what: str) -> None:
    bad = [rid for rid in ids if counts[key(rid)] != 1]
    check(not bad, f"{what}: {len(bad)} ids not answered exactly once, e.g. {bad[:5]}")


class Soak:
    def __init__(self, engine: str, rng: random.Random, verbose: bool, deadline: float,
                 children: list[RawChild] | None = None) -> None:
        self.engine = engine
        self.rng = rng
        self.verbose = verbose
        self.deadline = deadline  # time.monotonic() after which every wait has timed out
        self.children = children if children is not None else []  # for the watchdog
        self.batch_limit = batch_limit(engine)
        self.next_id = 0
        self.sent = 0  # requests and malformed lines sent that must be answered
        self.requests = 0  # ... of which answered exactly once (checked)
        self.oversize = 0  # over-limit batches answered by exactly one -32600
        self.rounds: dict[str, int] = {}
        # every kind of round once first (in a random order): even a short soak runs them all
        self.first = self.rng.sample(list(self.ROUNDS), len(self.ROUNDS))
        self.agent: RawChild | None = None
        self.base = 0
        self.quiet_rss: list[int] = []

    # -- bounded waits ----------------------------------------------------------------

    def left(self, what: str) -> float:
        """Seconds left until the deadline; :class:`Timeout` if none."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout(f"timed out (soak deadline passed) before {what}")
        return left

    def wait_for(self, child: RawChild, pred: Any, what: str) -> None:
        try:
            child.wait_for(pred, self.left(what), what)
        except Timeout:
            raise
        except AssertionError as exc:  # RawChild's "hung waiting for ..."
            raise Timeout(f"timed out at the soak deadline: {exc}") from None

    def send(self, child: RawChild, data: bytes, what: str = "a write") -> None:
        """Write ``data`` to the child from a thread, waiting at most until the deadline."""
        flood = child.send_in_background(data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20))
        if not flood.wait(self.left(what)):
            flood.stop()
            raise Timeout(f"timed out at the soak deadline writing {what} ({flood.written_bytes} of "
                          f"{len(data)} bytes written: the agent stopped reading)")
        check(flood.error is None, f"{what} could not be written: {flood.error!r}")

    def wait_exit(self, child: RawChild, what: str) -> int:
        try:
            return child.proc.wait(self.left(what))
        except subprocess.TimeoutExpired:
            raise Timeout(f"timed out at the soak deadline waiting for {what}") from None

    def wait_eof(self, child: RawChild, what: str) -> None:
        try:
            child.wait_eof(self.left(what))
        except Timeout:
            raise
        except AssertionError as exc:
            raise Timeout(f"timed out at the soak deadline waiting for {what}: {exc}") from None

    def spawn(self) -> RawChild:
        child = RawChild(agent_argv(), child_env(self.engine))
        self.children.append(child)  # killed by the watchdog, closed at the end
        return child

    @contextlib.contextmanager
    def fresh_agent(self) -> Iterator[RawChild]:
        """A short-lived agent, killed (if need be) and reaped when the block ends."""
        child = self.spawn()
        try:
            yield child
        finally:
            child.close()
            self.children.remove(child)

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"{self.engine}-{self.next_id}"

    # -- the long-lived agent ---------------------------------------------------------

    def long_lived(self) -> RawChild:
        if self.agent is None:
            self.agent = self.spawn()
            self.agent.start_reading()
            self.send(self.agent, req("warm", "_fault/rss"), "the warm-up request")
            self.wait_for(self.agent, lambda: bool(count_ids(self.agent.lines)), "the warm-up answer")
            self.agent.clear_lines()
            self.base = self.agent.status()["rss"]
        return self.agent

    def settle(self, child: RawChild, ids: list[Any], extra_nulls: int = 0) -> list[dict[str, Any]]:
        """Wait until every id (and ``extra_nulls`` id-less errors) was answered; check once.

        Returns the answers (batch replies flattened) and forgets them.

        Every answer on the wire must be one of these: an answer to any other id (an
        earlier round's, or a request that must not be answered) is a violation.
        """
        want = {key(r) for r in ids}
        self.sent += len(ids) + extra_nulls
        self.wait_for(child, lambda: want.issubset(set(count_ids(child.lines))) and
                      count_ids(child.lines)[key(None)] >= extra_nulls,
                      f"every answer ({len(ids)} ids, {extra_nulls} id-less errors)")
        counts = count_ids(child.lines)
        exactly_once(counts, ids, "answers")
        check(counts[key(None)] == extra_nulls, f"{counts[key(None)]} id-less errors, expected {extra_nulls}")
        stray = [k for k in counts if k not in want and k != key(None)]
        check(not stray, f"{len(stray)} answers to ids not asked for in this round, e.g. {stray[:5]}")
        self.requests += len(ids) + extra_nulls
        answers = responses(child.lines)
        child.clear_lines()  # keep this process's memory flat over a long soak
        return answers

    def after_round(self) -> None:
        child = self.long_lived()
        probe = self.fresh_id()
        self.send(child, req(probe, "_fault/echo", {}), "the probe request")
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
        self.send(child, b"".join(req(rid, self.rng.choice(METHODS), {"s": 0.001 * self.rng.randrange(10)})
                                  for rid in ids), "the concurrent requests")
        self.settle(child, ids)

    def batch_entries(self, n: int) -> tuple[list[Any], list[Any], int]:
        """``n`` random batch entries: (ids of the requests, entries, malformed entries)."""
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
        return ids, entries, malformed

    def round_batch(self) -> None:
        child = self.long_lived()
        limit = self.batch_limit
        # within the limit: every entry is answered (in one batch reply)
        ids, entries, malformed = self.batch_entries(self.rng.randrange(1, limit + 1))
        self.send(child, json.dumps(entries).encode() + b"\n", "a batch")
        if ids or malformed:
            self.settle(child, ids, malformed)
        # over the limit on purpose: one -32600 for the whole line, no entry answered (an
        # answer to one of its ids is a stray answer for the probe's settle below)
        n = limit + 1 + self.rng.choice([0, self.rng.randrange(limit), self.rng.randrange(OVERSIZE_MAX - limit)])
        _, entries, _ = self.batch_entries(n)
        self.send(child, json.dumps(entries).encode() + b"\n", f"an over-limit batch of {n} entries")
        (err,) = self.settle(child, [], 1)
        check(isinstance(err.get("error"), dict) and err["error"].get("code") == -32600,
              f"a batch of {n} entries (limit {limit}) was answered by {err!r}, not by one -32600 error")
        self.oversize += 1

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
        self.send(child, b"\n".join(parts) + b"\n", "the malformed flood")
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
        if not flood.wait(self.left("the end of the unread flood")):
            flood.stop()
            raise Timeout(f"timed out at the soak deadline: the unread flood never finished "
                          f"({flood.written_chunks} chunks written)")
        check(flood.error is None, f"the unread flood could not be written: {flood.error!r}")
        self.settle(child, ids)

    def round_eof(self) -> None:
        with self.fresh_agent() as child:
            child.start_reading()
            ids = [self.fresh_id() for _ in range(self.rng.randrange(1, 2000))]
            self.send(child, b"".join(req(rid, self.rng.choice(METHODS[:3]), {"s": 0.001 * self.rng.randrange(50)})
                                      for rid in ids), "the requests before EOF")
            self.sent += len(ids)
            child.close_stdin()
            self.wait_eof(child, "the agent's EOF after ours")
            status = self.wait_exit(child, "the agent's exit after EOF")
            check(status == 0, f"agent exit status {status} after EOF")
            exactly_once(count_ids(child.lines), ids, "EOF with requests in flight")
            self.requests += len(ids)

    def round_kill(self) -> None:
        with self.fresh_agent() as child:
            child.start_reading()
            ids = [self.fresh_id() for _ in range(self.rng.randrange(1, 500))]
            self.send(child, b"".join(req(rid, "_fault/echo", {}) for rid in ids), "the requests before the kill")
            self.sent += len(ids)
            self.send(child, req("stream", "_fault/stream", {"n": 10**9, "size": 100, "drain": True}),
                      "the stream request")
            self.wait_for(child, lambda: sum(1 for m in child.lines if isinstance(m, dict) and m.get("method")) > 20,
                          "the stream")
            if self.rng.random() < 0.5:
                self.send(child, req("die", "_fault/die", {"how": "midline"}), "the die request")
            else:
                child.kill(signal.SIGKILL)
            self.wait_eof(child, "the killed agent's EOF")
            whole = [m for m in child.lines if isinstance(m, (dict, list))]
            cut = [m for m in child.lines if not isinstance(m, (dict, list))]
            check(len(cut) <= 1, f"more than one broken line on the wire: {cut[:2]!r}")
            exactly_once(count_ids(whole), ids, "answers before the kill")
            self.requests += len(ids)

    ROUNDS = {"concurrent": 3, "batch": 2, "malformed": 2, "unread": 2, "eof": 1, "kill": 1}

    def one(self) -> str:
        if self.first:
            name = self.first.pop()
        else:
            name = self.rng.choices(list(self.ROUNDS), weights=list(self.ROUNDS.values()))[0]
        getattr(self, f"round_{name}")()
        self.after_round()
        self.rounds[name] = self.rounds.get(name, 0) + 1
        return name

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()


def start_watchdog(at: float, seed: int, children: list[RawChild]) -> threading.Timer:
    """End the process (exit 1) at ``at`` (monotonic) if the soak is still running then.

    Every wait of the soak ends at its deadline already; this is for anything else that
    might block (a write to a wedged pipe in a thread that was not stopped, ``/proc``...).
    """

    def fire() -> None:
        print(f"soak: FAILED (seed {seed}): watchdog: still running {WATCHDOG:g} s after the soak "
              "deadline (a wait that is not bounded?); killing the agents", flush=True)
        for child in children:
            child.kill()
        os._exit(1)

    timer = threading.Timer(max(0.0, at - time.monotonic()), fire)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="how long to soak (default 60; at least one round of every kind runs)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--engine", choices=("py", "c", "both"), default="both")
    parser.add_argument("--grace", type=float, default=GRACE,
                        help=f"seconds after --seconds by which every wait must be over (default {GRACE:g}): "
                             "the last round may end that late; a wait still going then is a failure")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    engines = ["py", "c"] if args.engine == "both" else [args.engine]
    print(f"soak: seed {seed}, engines {', '.join(engines)}, {args.seconds:g} s (+ {args.grace:g} s grace)",
          flush=True)
    rng = random.Random(seed)
    start = time.monotonic()
    deadline = start + args.seconds + args.grace
    children: list[RawChild] = []
    watchdog = start_watchdog(deadline + WATCHDOG, seed, children)
    try:
        soaks = [Soak(e, random.Random(rng.random()), not args.quiet, deadline, children) for e in engines]
    except ImportError as exc:
        print(f"soak: FAILED (seed {seed}): an engine twin is not available: {exc}", flush=True)
        return 1
    last_print = 0.0
    failed = None
    total_rounds = 0
    try:
        while time.monotonic() - start < args.seconds or any(s.first for s in soaks):
            for s in soaks:
                if time.monotonic() - start >= args.seconds and not s.first:
                    continue  # (this twin has run every kind of round; the other has not yet)
                try:
                    name = s.one()
                except AssertionError as exc:  # a Violation, or a Timeout of a wait
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
        for child in children:
            child.close()
    sent = answered = 0
    for s in soaks:
        # from the middle of the soak on: the allocator's plateau is reached, a leak keeps growing
        drift = (s.quiet_rss[-1] - s.quiet_rss[len(s.quiet_rss) // 2]) if len(s.quiet_rss) > 1 else 0
        rounds = ", ".join(f"{k} {v}" for k, v in sorted(s.rounds.items()))
        print(f"soak: {s.engine}: {sum(s.rounds.values())} rounds ({rounds}); {s.sent} requests and "
              f"malformed lines sent, {s.requests} answered exactly once; {s.oversize} over-limit batches "
              f"(max_batch_size {s.batch_limit}) answered by one -32600 each; peak growth "
              f"{s.agent.peak_kib - s.base if s.agent else 0} KiB (bound {SOAK_BOUND_KIB}); "
              f"quiet RSS drift {drift} KiB (bound {DRIFT_BOUND_KIB})", flush=True)
        if failed is None and drift > DRIFT_BOUND_KIB:
            failed = f"engine {s.engine}: RSS drifted by {drift} KiB over the soak (a leak?)"
        if failed is None and s.requests != s.sent:
            failed = f"engine {s.engine}: {s.sent} sent but {s.requests} answered exactly once"
        sent += s.sent
        answered += s.requests
    watchdog.cancel()
    elapsed = time.monotonic() - start
    if failed:
        print(f"soak: FAILED (seed {seed}, after {elapsed:.1f} s): {failed}", flush=True)
        return 1
    print(f"soak: OK (seed {seed}): {total_rounds} rounds on {', '.join(engines)} in {elapsed:.1f} s; "
          f"{sent} requests sent, {answered} answered exactly once", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
