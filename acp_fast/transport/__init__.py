"""Transports: asyncio `Protocol` glue between byte streams and one `Connection`.

This is the I/O layer, between the sans-IO engine (`acp_fast.engine`) and the JSON-RPC
connection (`acp_fast.jsonrpc`). It knows bytes, pipes, sockets, processes and event
loops; it knows nothing about JSON-RPC. Every helper returns a [`Stream`][acp_fast.transport.Stream], which a
[`Connection`][acp_fast.jsonrpc.Connection] consumes. One module per idea:

* `stream` -- [`Stream`][acp_fast.transport.Stream] (the interface a connection uses) and its protocol glue,
  the write-buffer water marks;
* `stdio` -- [`connect_stdio`][acp_fast.transport.connect_stdio]: this process's own stdin/stdout (an agent's side),
  including files, `/dev/null` and closed descriptors;
* `child` -- [`spawn`][acp_fast.transport.spawn]: a child process from a command line (a client's side),
  protocol.md §8.6, and [`parse_command`][acp_fast.transport.parse_command];
* `sockets` -- [`connect_tcp`][acp_fast.transport.connect_tcp] / [`serve_tcp`][acp_fast.transport.serve_tcp] (loopback by default, no
  authentication), [`connect_unix`][acp_fast.transport.connect_unix] / [`serve_unix`][acp_fast.transport.serve_unix];
* `memory` -- [`memory_pair`][acp_fast.transport.memory_pair]: two connected in-memory streams
  (the conductor's in-process components, the remote server's in-process agent, the remote
  client's bridge, tests), through the same `asyncio.Protocol` callbacks as the real
  transports;
* `loop` -- [`run`][acp_fast.transport.run] / [`new_event_loop`][acp_fast.transport.new_event_loop]:
  the event loop acp_fast's runners use (uvloop by default where installed; `loop=` or
  `ACP_FAST_LOOP` to choose), [`available_loops`][acp_fast.transport.available_loops] and
  [`loop_name`][acp_fast.transport.loop_name] for the commands' `--loop` flags and reports.

Every name is importable from `acp_fast.transport` itself. The remote transports (Streamable
HTTP and WebSocket), which read and route JSON-RPC, live above this layer in `acp_fast.remote`.
"""

from __future__ import annotations

from .child import KILL_GRACE, MINIMAL_ENV, STDERR_TAIL, ChildExitError, ChildStream, parse_command, spawn
from .loop import LOOP_CHOICES, LOOP_ENV, available_loops, loop_name, new_event_loop, resolve_loop, run
from .memory import memory_pair
from .sockets import DEFAULT_HOST, OnStream, connect_tcp, connect_unix, serve_tcp, serve_unix
from .stdio import connect_stdio
from .stream import WRITE_HIGH_WATER, WRITE_LOW_WATER, OnData, OnEof, OnWritable, Stream, logger

__all__ = [
    "DEFAULT_HOST",
    "KILL_GRACE",
    "LOOP_CHOICES",
    "LOOP_ENV",
    "MINIMAL_ENV",
    "STDERR_TAIL",
    "WRITE_HIGH_WATER",
    "WRITE_LOW_WATER",
    "ChildExitError",
    "ChildStream",
    "OnData",
    "OnEof",
    "OnStream",
    "OnWritable",
    "Stream",
    "available_loops",
    "connect_stdio",
    "connect_tcp",
    "connect_unix",
    "logger",
    "loop_name",
    "memory_pair",
    "new_event_loop",
    "parse_command",
    "resolve_loop",
    "run",
    "serve_tcp",
    "serve_unix",
    "spawn",
]
