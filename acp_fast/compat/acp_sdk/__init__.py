"""The official Python SDK (`agent-client-protocol`, import `acp`) on acp_fast: two drop-ins.

* this package: the **transport drop-in** (below): the SDK's `Connection` on acp_fast's wire;
* [`fast`][acp_fast.compat.acp_sdk.fast]: the **connection drop-in**: the SDK's public API dispatched on acp_fast's
  connection (`from acp_fast.compat.acp_sdk.fast import run_agent, connect_to_agent`);
* [`activate`][acp_fast.compat.acp_sdk.activate]: either one switched on from outside, for code you do not edit
  (`activate.install("connection")`, or `ACP_FAST_SDK_DROPIN` with a `sitecustomize`).

Tested with the SDK versions in `TESTED_SDK_VERSIONS`. The SDK's documented seam is
its message-level `Transport` (`acp._transport.Transport`), which `acp.run_agent`,
`acp.connect_to_agent`, `AgentSideConnection`, `ClientSideConnection` and
`Connection` accept in place of a stream pair. The switch is one line:

* an agent on stdio:

  ```python
  await acp.run_agent(MyAgent(), stdio_transport())
  # or: from acp_fast.compat.acp_sdk import run_agent   (same call as acp.run_agent)
  ```

* a client starting its agent (the SDK's `spawn_agent_process` takes no transport, so
  this one has the same parameters and yields `(ClientSideConnection, ChildProcess)`):

  ```python
  async with spawn_agent_process(MyClient(), "my-agent", "--flag") as (conn, process):
  ```

* sockets: `acp.connect_to_agent(MyClient(), tcp_transport(host, port))`, and
  `StreamTransport(stream)` around any acp_fast stream (`serve_tcp`, `memory_pair`).

What changes for the user is the wire handling (`transport`): bounded lines that
never raise `LimitOverrunError`, -32700/-32600 answered on the wire, batches unpacked and
answered as one array, coalesced writes with backpressure, `"params": null` omitted.
Everything above the transport (the SDK's `Connection`, its Task per message, pydantic
models, the `Agent`/`Client` interfaces) is the SDK's own and unchanged.

Importing this package does not import `acp`; the helpers that need it import it when
called ([`fast`][acp_fast.compat.acp_sdk.fast] imports it at once). Nor does it import acp_fast's connection, transports
or (beyond `import acp_fast`) engine: [`StreamTransport`][acp_fast.compat.acp_sdk.StreamTransport] and the constants resolve on
first access, and the functions import what they need when called, so that activating a
drop-in ([`activate`][acp_fast.compat.acp_sdk.activate]) adds next to nothing to `import acp`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .connect import (
    TESTED_SDK_VERSIONS,
    ChildProcess,
    check_sdk_version,
    run_agent,
    spawn_agent_process,
    spawn_client_process,
    spawn_transport,
    stdio_transport,
    tcp_transport,
    unix_transport,
)

if TYPE_CHECKING:  # resolved on first access (module __getattr__ below): they import the engine
    from .remote import create_asgi_app
    from .transport import DEFAULT_FLUSH_SIZE, DEFAULT_MAX_PENDING, StreamTransport
_LAZY = frozenset(("DEFAULT_FLUSH_SIZE", "DEFAULT_MAX_PENDING", "StreamTransport"))

__all__ = [
    "DEFAULT_FLUSH_SIZE",
    "DEFAULT_MAX_PENDING",
    "TESTED_SDK_VERSIONS",
    "ChildProcess",
    "StreamTransport",
    "check_sdk_version",
    "create_asgi_app",
    "run_agent",
    "spawn_agent_process",
    "spawn_client_process",
    "spawn_transport",
    "stdio_transport",
    "tcp_transport",
    "unix_transport",
]


def __getattr__(name: str) -> object:
    if name == "create_asgi_app":  # imports the SDK and the remote layer: only when asked for
        from .remote import create_asgi_app

        globals()[name] = create_asgi_app
        return create_asgi_app
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import transport

    value = getattr(transport, name)
    globals()[name] = value
    return value
