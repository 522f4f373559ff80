#!/usr/bin/env python3
"""Remote ACP client on the official Python SDK (``agent-client-protocol[http]``, pinned 0.12.1).

Connects to an agent served over the network instead of spawning one: ``http://…/acp`` (or
``https``) goes through the SDK's Streamable HTTP client ``acp.http.create_http_stream``,
``ws://…/acp`` (or ``wss``) through its WebSocket client ``acp.ws.create_websocket_stream``;
both hand a message transport to ``acp.connect_to_agent``. Runs one scenario and prints one
JSON line on stdout.

Usage:
  python remote_client.py URL SCENARIO [ARG] [--token T] [--protocol 1|2] [--timeout S]
                          [--text PROMPT] [--method echo|set_mode] [--h2c]

Scenarios (the prompt texts are those of ``acp-fast testy`` and of ``peers/pysdk/agent.py``):
  stream N        one prompt ``stream N chunks``: counts the ``agent_message_chunk`` updates,
                  checks that their texts carry their index in order (testy starts each
                  chunk's text with its index), reports the stop reason and the seconds
  permission      prompt ``permission 1``: the agent asks ``session/request_permission``
                  mid-prompt, the client answers with the ``allow`` option; reports the
                  outcome the agent streamed back (``permission:<optionId>``)
  cancel          a long streamed prompt; after the first update the client sends
                  ``session/cancel``; reports the stop reason (``cancelled``)
  rpc-cancel      ``$/cancel_request``: the SDK has no way to send it (reported as
                  ``supported: false``)
  roundtrips N    N sequential requests (``--method echo``: ``_test/echo``, default;
                  ``set_mode``: ``session/set_mode``), reports the seconds
  suite N         ``stream N``, ``permission``, ``cancel`` and ``rpc-cancel``, each on its
                  own connection, in one process (the SDK's import costs ~1 s of CPU):
                  ``results`` holds each one's fields, ``ok`` is true when every one is ok
                  or unsupported

Options:
  --token T       sends ``Authorization: Bearer T`` on every request and on the upgrade
  --protocol 1|2  the SDK speaks v1 only: ``2`` prints ``supported: false``
  --timeout S     bound on the whole scenario (default 30 s); a hang is reported as an error
  --text PROMPT   overrides the scenario's prompt text
  --loop L        asyncio (default) or uvloop
  --h2c           HTTP/2 without TLS (prior knowledge) through the SDK's documented
                  ``client=`` argument (an ``httpx.AsyncClient(http1=False, http2=True)``);
                  the default client asks for HTTP/2 but only gets it over TLS

Output fields: ``sdk``, ``sdkVersion``, ``transport`` (``http``/``ws``), ``protocol``,
``scenario``, ``loop`` (the running loop's kind), ``ok``, ``protocolVersion``, ``agentName``, ``initSeconds``; per scenario
``updatesAtResponse`` (stream: chunks handled when the prompt call returned),
``updatesReceived`` (all chunks, after a short wait), ``inOrder`` (in arrival order), ``stopReason``, ``seconds``, ``updatesPerSec``,
``permissionRequests``, ``permissionOutcome``, ``updatesBeforeCancel``, ``m``, ``method``,
``roundTripsPerSec``; ``closeSeconds`` (closing the connection); ``httpVersions`` (HTTP transport: the versions of the responses seen);
on failure ``ok: false`` with ``error`` ``{type, message, code?}``, the ``phase`` it failed
in and ``seconds`` since that phase started. The exit status is 0 whenever the JSON line
was printed (2 for a usage error).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from typing import Any, cast

import acp
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    RequestPermissionResponse,
)

SDK_VERSION = "0.12.1"
SCENARIOS = ("stream", "permission", "cancel", "rpc-cancel", "roundtrips", "suite")
#: Scenarios that take a count argument, and its default.
COUNTED = {"stream": 1000, "roundtrips": 100, "suite": 1000}
#: What ``suite N`` runs, each on its own connection.
SUITE = ("stream", "permission", "cancel", "rpc-cancel")
_INDEX = re.compile(r"\d+")


class RemoteClient:
    """The client side the SDK calls back into (the ``acp.Client`` protocol, structurally).

    Records every ``agent_message_chunk`` text in arrival order and answers permission
    requests with the option whose id is ``allow`` (else the first ``allow_*`` kind).
    """

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.updates = 0
        self.permission_requests = 0
        self.first_update = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Counts the update; keeps the text of message chunks."""
        self.updates += 1
        if getattr(update, "session_update", None) == "agent_message_chunk":
            content = getattr(update, "content", None)
            if getattr(content, "type", None) == "text":
                self.texts.append(content.text)  # type: ignore[union-attr]
        self.first_update.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        """Answers ``session/request_permission`` with the allow option."""
        self.permission_requests += 1
        chosen = next((o for o in options if o.option_id == "allow"), None)
        if chosen is None:
            chosen = next((o for o in options if str(o.kind).startswith("allow")), options[0])
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    def reset(self) -> None:
        """Forgets what the previous phase recorded."""
        self.texts.clear()
        self.updates = 0
        self.first_update = asyncio.Event()


def order_report(texts: list[str]) -> dict[str, Any]:
    """Whether chunk ``i``'s text starts with ``i`` for every chunk (the index testy writes)."""
    for i, text in enumerate(texts):
        m = _INDEX.match(text)
        if m is None or int(m.group(0)) != i:
            return {"inOrder": False, "firstOutOfOrder": i, "firstOutOfOrderText": text[:40]}
    return {"inOrder": True}


def error_info(exc: BaseException) -> dict[str, Any]:
    """A JSON description of a failure (the JSON-RPC code when the SDK raised a RequestError)."""
    info: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:500]}
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        info["code"] = code
        data = getattr(exc, "data", None)
        if data is not None:
            info["data"] = data
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        info["status"] = status
    return info


class Run:
    """One scenario on its own connection to the URL; collects the JSON result in :attr:`out`."""

    def __init__(self, args: argparse.Namespace, scenario: str, count: int) -> None:
        self.args = args
        self.scenario_name = scenario
        self.count = count
        self.transport_kind = "ws" if args.url.startswith(("ws://", "wss://")) else "http"
        self.client = RemoteClient()
        self.http_versions: set[str] = set()
        self.phase = "connect"
        self.phase_started = time.perf_counter()
        self.out: dict[str, Any] = {
            "sdk": "pysdk",
            "sdkVersion": SDK_VERSION,
            "transport": self.transport_kind,
            "protocol": args.protocol,
            "scenario": scenario,
            "loop": "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio",
            "ok": False,
        }
        self.conn: acp.ClientSideConnection | None = None
        self.transport: Any = None
        self._owned_http_client: Any = None

    def enter(self, phase: str) -> None:
        """Marks the start of a phase (named in the error report when it fails)."""
        self.phase = phase
        self.phase_started = time.perf_counter()

    def headers(self) -> dict[str, str]:
        """Extra headers for every request: the bearer token when one was given."""
        return {"Authorization": f"Bearer {self.args.token}"} if self.args.token else {}

    async def connect(self) -> acp.ClientSideConnection:
        """Opens the SDK transport for the URL's scheme and wraps it in a client connection."""
        if self.transport_kind == "ws":
            from acp.ws import create_websocket_stream

            self.transport = await create_websocket_stream(self.args.url, headers=self.headers() or None)
        else:
            import httpx
            from acp.http import create_http_stream

            async def seen(response: httpx.Response) -> None:
                self.http_versions.add(response.http_version)

            # Equivalent to the SDK's own default client (HTTP/2 enabled, no read timeout on
            # the long-lived SSE streams) plus a hook that records the HTTP version in use.
            client = httpx.AsyncClient(
                http2=True,
                http1=not self.args.h2c,
                timeout=httpx.Timeout(None),
                event_hooks={"response": [seen]},
            )
            self.transport = create_http_stream(self.args.url, client=client, headers=self.headers() or None)
            self._owned_http_client = client
        return acp.connect_to_agent(cast(acp.Client, self.client), self.transport)

    async def start(self) -> tuple[acp.ClientSideConnection, str]:
        """``initialize`` and ``session/new``; returns the connection and the session id."""
        self.enter("connect")
        conn = self.conn = await self.connect()
        self.enter("initialize")
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=False, write_text_file=False)
            ),
            client_info=Implementation(name="pysdk-remote-client", version="0.1.0"),
        )
        self.out["initSeconds"] = round(time.perf_counter() - self.phase_started, 4)
        self.out["protocolVersion"] = init.protocol_version
        self.out["agentName"] = init.agent_info.name if init.agent_info else None
        self.enter("session/new")
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        return conn, session.session_id

    async def settle(self, expected: int) -> None:
        """Waits until ``expected`` chunks arrived, or 100 ms passed without a new one."""
        last, quiet_since = len(self.client.texts), time.perf_counter()
        while len(self.client.texts) < expected and time.perf_counter() - quiet_since < 0.1:
            await asyncio.sleep(0.005)
            if len(self.client.texts) != last:
                last, quiet_since = len(self.client.texts), time.perf_counter()

    async def prompt(self, conn: acp.ClientSideConnection, sid: str, text: str) -> str:
        """One ``session/prompt``; returns the stop reason."""
        resp = await conn.prompt(session_id=sid, prompt=[acp.text_block(text)])
        return str(resp.stop_reason)

    async def scenario(self) -> None:
        """Runs the scenario named on the command line, filling :attr:`out`."""
        a = self.args
        name, count = self.scenario_name, self.count
        if a.protocol == 2:
            self.out.update(supported=False, reason="the Python SDK 0.12.1 speaks ACP v1 only")
            return
        if name == "rpc-cancel":
            self.out.update(supported=False,
                            reason="the Python SDK 0.12.1 cannot send $/cancel_request (no API for it)")
            return
        conn, sid = await self.start()
        c = self.client
        if name == "stream":
            self.enter("prompt")
            stop = await self.prompt(conn, sid, a.text or f"stream {count} chunks")
            secs = time.perf_counter() - self.phase_started
            # The SDK's prompt() returns once the response arrived and the updates received
            # before it were handled; updates that come after the response are counted too
            # (a short wait) and reported apart.
            at_response = len(c.texts)
            await self.settle(count)
            self.out.update(n=count, updatesAtResponse=at_response, updatesReceived=len(c.texts), allUpdates=c.updates,
                            stopReason=stop, seconds=round(secs, 4),
                            updatesPerSec=round(at_response / secs) if secs > 0 else None, **order_report(c.texts))
        elif name == "permission":
            self.enter("prompt")
            stop = await self.prompt(conn, sid, a.text or "permission 1")
            # testy and agent.py stream ``permission:<optionId>`` (remote_server.py --number
            # puts the chunk index before it)
            found = (re.search(r"permission:(.*)$", t) for t in c.texts)
            outcome = next((m.group(1) for m in found if m), None)
            self.out.update(permissionRequests=c.permission_requests, permissionOutcome=outcome, stopReason=stop,
                            updatesReceived=len(c.texts), seconds=round(time.perf_counter() - self.phase_started, 4))
        elif name == "cancel":
            self.enter("prompt")
            turn = asyncio.ensure_future(self.prompt(conn, sid, a.text or "stream 100000000 chunks"))
            first = asyncio.ensure_future(c.first_update.wait())
            try:
                await asyncio.wait((turn, first), return_when=asyncio.FIRST_COMPLETED)
                if turn.done():  # the prompt ended (or failed) before any update
                    self.out.update(stopReason=turn.result(), cancelSent=False, updatesReceived=len(c.texts))
                    self.out["ok"] = True
                    return
                before = len(c.texts)
                self.enter("cancel")
                await conn.cancel(session_id=sid)
                stop = await turn
            finally:
                first.cancel()
                turn.cancel()
            self.out.update(stopReason=stop, cancelSent=True, updatesBeforeCancel=before,
                            updatesReceived=len(c.texts), cancelSeconds=round(time.perf_counter() - self.phase_started, 4))
        elif name == "roundtrips":
            self.enter("roundtrips")
            if a.method == "set_mode":
                modes = ("plan", "chat")
                for i in range(count):
                    await conn.set_session_mode(session_id=sid, mode_id=modes[i % 2])
            else:
                for i in range(count):
                    r = await conn.ext_method("test/echo", {"i": i})
                    if r.get("i") != i:
                        raise RuntimeError(f"echo mismatch at {i}: {r!r}")
            secs = time.perf_counter() - self.phase_started
            self.out.update(m=count, method=a.method, seconds=round(secs, 4),
                            roundTripsPerSec=round(count / secs) if secs > 0 else None)
        self.out["ok"] = True

    async def close(self) -> None:
        """Closes the connection (the HTTP transport DELETEs it), bounded to 5 s."""
        try:
            if self.conn is not None:
                await asyncio.wait_for(self.conn.close(), 5)
            elif self.transport is not None:
                await asyncio.wait_for(self.transport.close(), 5)
        except Exception as exc:  # a close failure is reported, never raised
            self.out["closeError"] = error_info(exc)
        client = self._owned_http_client
        if client is not None:
            try:
                await asyncio.wait_for(client.aclose(), 5)
            except Exception:
                pass

    async def main(self) -> dict[str, Any]:
        """The scenario under the overall timeout; failures become ``ok: false`` fields."""
        t0 = time.perf_counter()
        task = asyncio.ensure_future(self.scenario())
        done, _ = await asyncio.wait({task}, timeout=self.args.timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=5)
            self.out.update(ok=False, phase=self.phase, error={"type": "timeout",
                            "message": f"no result within {self.args.timeout} s"},
                            seconds=round(time.perf_counter() - self.phase_started, 4),
                            updatesReceived=len(self.client.texts))
        elif task.exception() is not None:
            self.out.update(ok=False, phase=self.phase, error=error_info(task.exception()),  # type: ignore[arg-type]
                            seconds=round(time.perf_counter() - self.phase_started, 4),
                            updatesReceived=len(self.client.texts))
        t_close = time.perf_counter()
        await self.close()
        self.out["closeSeconds"] = round(time.perf_counter() - t_close, 4)
        if self.http_versions:
            self.out["httpVersions"] = sorted(self.http_versions)
        self.out["totalSeconds"] = round(time.perf_counter() - t0, 4)
        return self.out


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="remote_client.py", description="Remote ACP client (official Python SDK)")
    p.add_argument("url", help="http(s)://host:port/acp or ws(s)://host:port/acp")
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("count", nargs="?", type=int, default=None, help="N for stream / roundtrips")
    p.add_argument("--token", default=None)
    p.add_argument("--protocol", type=int, choices=(1, 2), default=1)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--text", default=None, help="prompt text instead of the scenario's")
    p.add_argument("--method", choices=("echo", "set_mode"), default="echo")
    p.add_argument("--h2c", action="store_true", help="HTTP/2 with prior knowledge over plain http")
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="event loop (default asyncio; the benchmark runs every Python side on the same loop)")
    a = p.parse_args(argv)
    if not a.url.startswith(("http://", "https://", "ws://", "wss://")):
        p.error(f"unsupported URL scheme: {a.url}")
    if a.count is None:
        a.count = COUNTED.get(a.scenario, 0)
    return a


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """One scenario, or for ``suite`` each of :data:`SUITE` on its own connection."""
    if args.scenario != "suite":
        return await Run(args, args.scenario, args.count).main()
    results = {name: await Run(args, name, args.count if name == "stream" else 0).main() for name in SUITE}
    return {
        "sdk": "pysdk",
        "sdkVersion": SDK_VERSION,
        "transport": "ws" if args.url.startswith(("ws://", "wss://")) else "http",
        "protocol": args.protocol,
        "scenario": "suite",
        "ok": all(r["ok"] or r.get("supported") is False for r in results.values()),
        "results": results,
    }


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    if args.loop == "uvloop":
        import uvloop

        result = uvloop.run(main(args))
    else:
        result = asyncio.run(main(args))
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
