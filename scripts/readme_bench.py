#!/usr/bin/env python3
"""Regenerate the benchmark tables of README.md from the raw JSON committed in docs/bench/.

Each table block of the README sits between two markers::

    <!-- bench:NAME begin: COMMAND -->
    ... the output of COMMAND, verbatim ...
    <!-- bench:NAME end -->

and COMMAND re-renders the block from a JSON file that a benchmark run wrote (nothing is
measured again). Markdown headings in the output are nested two levels deeper (``#`` becomes
``###``), so that they sit under the README section that holds the block. ``python scripts/readme_bench.py`` rewrites every block in place;
``--check`` only compares and exits 1 when a block differs from what its command prints
(``tests/test_readme.py`` runs the same comparison). To refresh a table, run the benchmark
with ``--json``/``--write-json`` into ``docs/bench/``, then this script.

The commands run from the repository root with this interpreter (``python`` in a command is
``sys.executable``), so the ``acp_fast`` they use is the one this interpreter imports.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BLOCK = re.compile(r"^<!-- bench:(?P<name>[\w-]+) begin: (?P<command>.+?) -->\n(?P<body>.*?)"
                   r"^<!-- bench:(?P=name) end -->$", flags=re.M | re.S)


@dataclass(frozen=True)
class Block:
    name: str
    command: str
    body: str
    start: int
    end: int  # span of the body in the README text


def blocks(text: str) -> list[Block]:
    """The bench blocks of ``text``, in order."""
    return [Block(m["name"], m["command"], m["body"], m.start("body"), m.end("body")) for m in BLOCK.finditer(text)]


def render(command: str) -> str:
    """What ``command`` prints (from the repository root), ending in one newline."""
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "acp-fast":
        argv[:1] = [sys.executable, "-m", "acp_fast.cli.main"]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{command!r} exited {proc.returncode}: {proc.stderr[-2000:]}")
    text = re.sub(r"^(#+) ", r"##\1 ", proc.stdout, flags=re.M)  # nested under the README's section
    return text.rstrip("\n") + "\n"


def differences(text: str) -> list[str]:
    """One unified diff per block whose body is not what its command prints now."""
    out = []
    for b in blocks(text):
        fresh = render(b.command)
        if fresh != b.body:
            out.append("".join(difflib.unified_diff(b.body.splitlines(True), fresh.splitlines(True),
                                                    f"README.md bench:{b.name}", f"{b.command}")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a block differs")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    found = blocks(text)
    if not found:
        print("readme_bench: no bench blocks in README.md", file=sys.stderr)
        return 2
    if args.check:
        diffs = differences(text)
        for d in diffs:
            print(d)
        print(f"readme_bench: {len(found) - len(diffs)} of {len(found)} blocks match their JSON")
        return 1 if diffs else 0
    for b in reversed(found):  # from the end, so the earlier spans stay valid
        text = text[:b.start] + render(b.command) + text[b.end:]
    README.write_text(text, encoding="utf-8")
    print(f"readme_bench: {len(found)} blocks rewritten: {', '.join(b.name for b in found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
