"""A stdio agent written for one test: it answers `initialize` and runs the test's own
Python lines for every other message (`m`, decoded; `put(text)` writes and flushes stdout)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

_HEAD = """\
import json, sys, time
def put(text):
    sys.stdout.write(text); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if m.get('method') == 'initialize':
        put(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocolVersion': 1}}) + '\\n')
        continue
"""


def scripted_agent(folder: Path, on_message: str) -> list[str]:
    """The command of an agent whose answer to any message but `initialize` is `on_message`
    (Python statements, run with `m` the message), written in `folder`."""
    script = folder / "scripted_agent.py"
    script.write_text(_HEAD + textwrap.indent(textwrap.dedent(on_message), "    "))
    return [sys.executable, str(script)]
