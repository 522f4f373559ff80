#!/usr/bin/env python3
"""A minimal pass-through ACP proxy on raw lines (a load generator for ``conductor_cpu.py``).

It is a proxy in the conductor's protocol (protocol.md §8.2) and nothing more: a message from
its predecessor goes back to the conductor wrapped in ``_proxy/successor`` (with the same id;
``_proxy/initialize`` becomes ``initialize``), a wrapped message from its successor goes back
plain, and responses are echoed unchanged (ids are reused one to one, so they match). The
conductor writes wrapped notifications in one fixed shape, which this proxy unwraps with two
byte slices; everything else goes through ``json``. It costs little CPU per message, so the
conductor's own cost can be measured with several of them in the chain.
"""

from __future__ import annotations

import json
import os
import sys

WRAPPED = b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{'
HEAD = b'{"jsonrpc":"2.0",'


def handle(line: bytes) -> bytes:
    if line.startswith(WRAPPED):  # a wrapped notification from the successor: unwrap it
        return HEAD + line[len(WRAPPED):-1] + b"\n"
    msg = json.loads(line)
    method = msg.get("method")
    if method is None:
        return line + b"\n"  # a response: same id on both sides
    params = msg.get("params")
    if method == "_proxy/successor":  # from the successor: plain to the predecessor
        out = {"jsonrpc": "2.0", "method": params["method"]}
        if "params" in params:
            out["params"] = params["params"]
    else:  # from the predecessor: wrapped to the successor
        inner = {"method": "initialize" if method == "_proxy/initialize" else method}
        if params is not None:
            inner["params"] = params
        out = {"jsonrpc": "2.0", "method": "_proxy/successor", "params": inner}
    if "id" in msg:
        out["id"] = msg["id"]
    return json.dumps(out, separators=(",", ":")).encode() + b"\n"


def main() -> None:
    tail = b""
    while True:
        data = os.read(0, 1 << 20)
        if not data:
            return
        lines = (tail + data).split(b"\n")
        tail = lines.pop()
        out = b"".join(handle(line) for line in lines if line)
        view = memoryview(out)
        while view:
            view = view[os.write(1, view):]


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(0)
