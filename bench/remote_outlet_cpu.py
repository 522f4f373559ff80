"""In-process cost of one agent message on the remote server's outgoing side, for instruction counts.

No network, no agent process, no event loop: an ACP connection of the remote server
(``acp_fast.remote.server._Connection``) on a stand-in stream is handed ``R`` chunks of 64
agent ``session/update`` notifications (~190 bytes each, as a pipe delivers them), and after
each chunk its outlet is drained as the network side drains it (``take``, the transport's
encoder, ``sent``) without sending anything. Paths:

* ``ws``: a WebSocket, one text frame per message;
* ``ws-batch``: a WebSocket whose client asked for batch frames (acp_fast's own client does);
* ``sse`` / ``sse-batch``: the session's SSE stream, with the default replay window (``id:``
  cursors), one event per message or per batch.

Usage (the difference of two runs cancels start-up; 500 rounds x 64 = 32,000 messages)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/remote_outlet_cpu.py ws --rounds 600
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/remote_outlet_cpu.py ws --rounds 100
    # (instructions of the first - the second) / 32000 = instructions per message

``--metrics``: the connection of an app with metrics (``acp_fast.remote.metrics``), with a
client's prompt in flight as in a streamed turn (the A/B of the metrics' cost per message).

Run it as a file (not ``-m``) from outside a source tree to measure the ``acp_fast`` that the
interpreter has installed, e.g. an older checkout's. Without valgrind it prints the
wall-clock time per message too (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
import types
from typing import Any

SESSION = "sess-1"
PER_CHUNK = 64


def _chunk(round_: int) -> bytes:
    lines = []
    for i in range(PER_CHUNK):
        text = f"{round_}.{i} " + "x" * 60
        lines.append(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": SESSION, "update": {"sessionUpdate": "agent_message_chunk",
                                             "content": {"type": "text", "text": text}}}},
                                separators=(",", ":")).encode() + b"\n")
    return b"".join(lines)


class _Stream:
    """The agent's side as the connection sees it: nothing to read, nothing to write."""

    def attach(self, on_data: Any, on_eof: Any, on_writable: Any) -> None:
        pass

    def pause_reading(self) -> None:
        raise AssertionError("the outlet is drained after every chunk: the agent is never paused")

    def resume_reading(self) -> None:
        pass


#: acp_fast.remote._outlet (one outlet for SSE and WebSocket), or None in an earlier layout
_OUTLETS: list[Any] = [None]


def _drain(conn: Any, path: str, window: int) -> int:
    """Drain the connection's outlet as the network side does; returns the characters made."""
    from acp_fast.remote import server

    batches = path.endswith("batch")
    outlet = conn.streams[None if path.startswith("ws") else SESSION]
    outlets = _OUTLETS[0]
    if outlets is not None:
        items, size = outlet.take(window if path.startswith("sse") else 0)
        if path.startswith("ws"):
            made = sum(map(len, outlets.ws_frames(items, batches)))
        else:
            made = len(outlets.sse_chunk(items, bool(window), batches))
        conn.sent(size)
        return made
    # the earlier layout: a WebSocket's own queue of lines and groups
    if path.startswith("sse"):
        items, size = outlet.take(window)
        made = len(getattr(server, "_sse_chunk")(items, bool(window), batches))
        conn.sent(size)
        return made
    lines = conn.ws_lines
    size = made = 0
    while lines:
        item = lines.popleft()
        if isinstance(item, list):
            if len(item) == 1:
                line = item[0]
                size += len(line)
            else:
                line = b"[" + b",".join(item) + b"]"
                size += len(line) - len(item) - 1
        else:
            line = item
            size += len(line)
        made += len(line.decode("utf-8", "replace"))
    conn.sent(size)
    return made


def run(path: str, rounds: int, metrics: bool = False) -> dict[str, Any]:
    from acp_fast import engine
    from acp_fast.remote import server
    from acp_fast.remote.policy import ServerPolicy

    try:
        _OUTLETS[0] = importlib.import_module("acp_fast.remote._outlet")
    except ImportError:
        pass
    policy = ServerPolicy()
    app = types.SimpleNamespace(policy=policy, engine=engine)
    websocket, batches = path.startswith("ws"), path == "ws-batch"
    if metrics:
        from acp_fast.remote._wire import id_key
        from acp_fast.remote.metrics import ServerMetrics

        conn = server._MeteredConnection(app, "0" * 32, _Stream(), websocket, ServerMetrics(),  # type: ignore[arg-type]
                                         ws_batches=batches)
        conn.pending[id_key(2)] = ("session/prompt", time.monotonic())  # the turn's prompt
    else:
        conn = None
    try:  # the client's choice of batch frames, known when the connection opens
        conn = conn or server._Connection(app, "0" * 32, _Stream(), websocket=websocket,  # type: ignore[arg-type]
                                  ws_batches=batches)
    except TypeError:  # an earlier layout: set afterwards
        conn = server._Connection(app, "0" * 32, _Stream(), websocket=websocket)  # type: ignore[arg-type]
        conn.ws_batches = batches
    conn.sessions.add(SESSION)
    chunks = [_chunk(r) for r in range(8)]  # the same work for any number of rounds
    on_data = conn._on_data
    window = policy.replay_window
    made = 0
    t0 = time.perf_counter()
    for r in range(rounds):
        on_data(chunks[r & 7])
        made += _drain(conn, path, window)
    secs = time.perf_counter() - t0
    assert conn.queued == 0, conn.queued
    return {"path": path, "messages": rounds * PER_CHUNK, "made": made,
            "usPerMessage": round(secs / (rounds * PER_CHUNK) * 1e6, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=("ws", "ws-batch", "sse", "sse-batch"))
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--metrics", action="store_true", help="the connection of an app with metrics")
    args = parser.parse_args()
    print(json.dumps(run(args.path, args.rounds, args.metrics)))


if __name__ == "__main__":
    main()
