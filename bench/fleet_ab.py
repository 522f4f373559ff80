"""Which of two builds of the fleet makes faster round trips: A/B side by side, in one run.

This machine's speed drifts by ±20 % over minutes, so two separate runs of a fleet cannot tell
a 5 % change from the drift. This script runs both fleets at once, each a `redis-server`, an
agent host (`acp-fast host --testy`) and a front (`acp-fast serve --redis`) whose processes
import `acp_fast` from their own source tree, and times pairs of client bursts against them
(`acp_fast.benchmark.remote_client URL roundtrips N`: sequential WebSocket round trips, the
client of the `fleet` rows of `acp-fast bench --remote`), A then B, then B then A, and so on.
Within a pair both fleets see the same machine; the median of the pairs' ratios (B's time per
round trip over A's) is what it prints, with how many pairs B won.

    python -m bench.fleet_ab --a TREE_A --b TREE_B [--n 1000] [--pairs 20] [--host-args "ARGS"]

A tree is a directory holding an `acp_fast` package with its compiled modules, e.g. a copy of
this checkout's `acp_fast/` with one change undone (`git archive HEAD~1 acp_fast | tar -x -C
/tmp/a`, then the `*.so` files copied in); `--a .` is this checkout. The client always runs
this checkout's. `--host-args` adds arguments to both hosts' command line (e.g.
`"--window-entries 64 --window-bytes 16384"`: a smaller replay window). An A/A run (the same
tree twice) shows the noise: 20 pairs of 1,000 round trips gave a median ratio within 2 % of 1
here. Needs `redis-server` (>= 7) on PATH and the `fleet` and `remote` extras; every server
binds 127.0.0.1 on a free port and is stopped.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.fleet_relay_floor import _cli, _free_port, _Procs, _roundtrips


def _start(procs: _Procs, server: str, tree: Path, workdir: str, host_args: list[str]) -> str:
    """A fleet (Redis, a host, a front) importing acp_fast from `tree`: its WebSocket URL."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    redis_port, port = _free_port(), _free_port()
    procs.start([server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", workdir], port=redis_port)
    url = f"redis://127.0.0.1:{redis_port}/0"
    procs.start(_cli("host", "--redis", url, "--testy", "--versions", "1", "--slots", "4", "--loop", "uvloop",
                     *host_args),
                ready="registered at", env=env, cwd=workdir)
    procs.start(_cli("serve", "--redis", url, "--port", str(port), "--loop", "uvloop"), port=port, env=env, cwd=workdir)
    return f"ws://127.0.0.1:{port}/acp"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the source tree of fleet A (holds acp_fast/)")
    ap.add_argument("--b", type=Path, required=True, help="the source tree of fleet B")
    ap.add_argument("--n", type=int, default=1000, help="round trips per burst")
    ap.add_argument("--pairs", type=int, default=20, help="pairs of bursts (A and B each once)")
    ap.add_argument("--host-args", default="", help="more arguments of both hosts (`acp-fast host ...`)")
    args = ap.parse_args()
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server is not on PATH")
    trees = [args.a.resolve(), args.b.resolve()]
    for tree in trees:
        if not (tree / "acp_fast" / "__init__.py").is_file():
            sys.exit(f"{tree} holds no acp_fast package")
    times: list[list[float]] = [[], []]
    ratios: list[float] = []
    procs = _Procs()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            urls = [_start(procs, server, tree, workdir, shlex.split(args.host_args)) for tree in trees]
            for k in range(args.pairs):
                got = [0.0, 0.0]
                for side in ((0, 1) if k % 2 == 0 else (1, 0)):
                    got[side] = _roundtrips(urls[side], args.n, warmup=100)
                    times[side].append(got[side])
                ratios.append(got[1] / got[0])
                print(f"pair {k + 1}/{args.pairs}: A {got[0]:.0f} us, B {got[1]:.0f} us per round trip", file=sys.stderr)
        finally:
            procs.stop()
    wins = sum(r < 1 for r in ratios)
    print(f"{args.pairs} pairs of {args.n} WebSocket round trips, uvloop, load {os.getloadavg()[0]:.2f} at the end")
    print(f"A {trees[0]}: median {statistics.median(times[0]):.0f} us per round trip")
    print(f"B {trees[1]}: median {statistics.median(times[1]):.0f} us per round trip")
    print(f"B/A: median {statistics.median(ratios):.3f} (pairs {min(ratios):.3f} to {max(ratios):.3f}); "
          f"B faster in {wins} of {args.pairs} pairs")


if __name__ == "__main__":
    main()
