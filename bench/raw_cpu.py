"""In-process cost of a lazy ``Decoder`` per line, and of reading each frame's ``raw``.

A chunk of 64 ``session/update`` notification lines (~190 bytes each, texts all different)
is fed to ``Decoder(lazy=True)`` once per round; ``raw`` mode also reads ``.raw`` of every
frame (the verbatim line as a ``RawJson``), ``params_raw`` mode its ``params_raw``. No I/O
and no event loop, so the figures are repeatable under ``valgrind --tool=callgrind``
(instructions do not depend on what else the machine runs).

Usage (the difference of two runs cancels start-up; every run builds the same chunk)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.raw_cpu raw --rounds 600
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m bench.raw_cpu raw --rounds 100
    # (instructions of the first - the second) / (500 * 64) = instructions per line

``feed`` mode (``Decoder.feed`` alone) gives the decoder's share; ``raw`` minus ``feed`` is
the cost of ``raw``. ``--impl py`` measures the pure twin. Without valgrind it prints the
wall-clock time per line too (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

LINES = 64
SESSION = "sess-1"


def chunk(lines: int = LINES, size: int = 190) -> bytes:
    """``lines`` notification lines of ``size`` bytes each (with the newline)."""
    out = []
    for i in range(lines):
        head = {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": SESSION, "update": {"sessionUpdate": "agent_message_chunk",
                                             "content": {"type": "text", "text": ""}}}}
        bare = len(json.dumps(head, separators=(",", ":"))) + 1
        text = str(i) + "x" * (size - bare - len(str(i)))
        head["params"]["update"]["content"]["text"] = text
        line = json.dumps(head, separators=(",", ":")).encode() + b"\n"
        assert len(line) == size, len(line)
        out.append(line)
    return b"".join(out)


def run(mode: str, rounds: int, impl: str) -> dict[str, Any]:
    if impl == "py":
        from acp_fast import _engine_py as eng
    else:
        from acp_fast import _engine_c as eng  # type: ignore[no-redef]
    data = chunk()
    decoder = eng.Decoder(lazy=True)
    feed = decoder.feed
    total = 0
    t0 = time.perf_counter()
    if mode == "feed":
        for _ in range(rounds):
            total += len(feed(data))
    elif mode == "raw":
        for _ in range(rounds):
            for frame in feed(data):
                total += len(frame.raw)
    else:
        for _ in range(rounds):
            for frame in feed(data):
                total += len(frame.params_raw)
    secs = time.perf_counter() - t0
    return {"mode": mode, "impl": impl, "rounds": rounds, "lines": rounds * LINES,
            "total": total, "nsPerLine": round(secs / (rounds * LINES) * 1e9, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["feed", "raw", "params_raw"])
    ap.add_argument("--rounds", type=int, default=600, help="chunks of 64 lines fed")
    ap.add_argument("--impl", choices=["c", "py"], default="c")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.mode, args.rounds, args.impl)))


if __name__ == "__main__":
    main()
