"""Support for the interop tests of the remote server against the SDKs' remote clients (not a
test module).

* :class:`ServedThread`: :class:`~acp_fast.remote.AcpApp` s served by uvicorn, granian or
  hypercorn on ``127.0.0.1`` port 0, in one thread and event loop of their own, so that the
  test thread is free to run peer processes and its own clients;
* :func:`dying_agent`: an in-process agent that answers ``initialize`` (v1 or v2) and
  ``session/new``, streams a few updates of the first prompt and then ends its connection;
* :func:`pysdk_client`, :func:`ts_client`: the command lines of ``peers/pysdk/remote_client.py``
  and ``peers/ts/remote_client.mjs``; :func:`run_peers`: several of them at once, each bounded
  by a timeout (killed when it runs over), each answering its JSON line or a failure record;
* :func:`pysdk_available`, :func:`ts_available`: whether a peer can run, asked without
  skipping (the tests themselves go through the fixtures of ``tests/interop/conftest.py``);
* :class:`Recorder`: what the server received and sent, per client run (the run's URL names
  it in a ``case`` query parameter, which the SDK clients keep on every request).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from acp_fast.remote import Served, served
from acp_fast.transport.stream import Stream

REPO = Path(__file__).resolve().parent.parent.parent
PYSDK_CLIENT = REPO / "peers" / "pysdk" / "remote_client.py"
TS_CLIENT = REPO / "peers" / "ts" / "remote_client.mjs"

__all__ = [
    "PYSDK_CLIENT",
    "TS_CLIENT",
    "Recorder",
    "ServedThread",
    "dying_agent",
    "pysdk_available",
    "pysdk_client",
    "run_peers",
    "ts_available",
    "ts_client",
]


class ServedThread:
    """Serves ASGI apps, each made by its factory (called in the server thread's event loop)
    and served by its ASGI server, while the ``with`` block runs; :attr:`where` says where
    each listens, in the order given.

    All of them share one thread and one event loop: the compiled engine decodes lazy
    payloads with one module-level parser, which only the GIL guards, so acp_fast code runs
    in one thread here (see the notes of ``tests/interop/test_remote_server_interop.py``).

    Args:
        apps: ``(make_app, server)`` pairs; ``server`` names an ASGI server (``"uvicorn"``, ``"hypercorn"``, ``"granian"``).
        start_timeout: seconds to wait for every server to listen.
    """

    def __init__(self, apps: Sequence[tuple[Callable[[], Any], str]], *, start_timeout: float = 20.0) -> None:
        self._apps = list(apps)
        self._start_timeout = start_timeout
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._where: list[Served] = []
        self._thread = threading.Thread(target=self._run, name="remote-servers", daemon=True)

    @property
    def where(self) -> list[Served]:
        """Where each server listens, in the order of ``apps``."""
        assert len(self._where) == len(self._apps), "the servers are not running"
        return self._where

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test thread by __enter__
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            for make_app, server in self._apps:
                self._where.append(await stack.enter_async_context(served(make_app(), server=server)))  # type: ignore[arg-type]
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> ServedThread:
        self._thread.start()
        if not self._ready.wait(self._start_timeout):
            raise RuntimeError(f"the servers did not start within {self._start_timeout} s")
        if self._error is not None or len(self._where) != len(self._apps):
            raise RuntimeError(f"the servers failed to start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop already ended
                pass
        self._thread.join(30.0)


def dying_agent(after: int = 3) -> Callable[[Stream], Awaitable[None]]:
    """An agent (``serve(stream)`` for :func:`~acp_fast.remote.asgi_app`) that dies
    mid-turn: it answers ``initialize`` (v1 or v2, as asked) and ``session/new``, sends
    ``after`` ``agent_message_chunk`` updates for the first ``session/prompt`` and then
    closes its stream without answering the prompt. Other requests get -32601."""

    async def serve(stream: Stream) -> None:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        pending = bytearray()

        def send(message: dict[str, Any]) -> None:
            stream.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

        def handle(message: dict[str, Any]) -> None:
            method, ident = message.get("method"), message.get("id")
            if method is None or "id" not in message:
                return
            raw = message.get("params")
            params: dict[str, Any] = raw if isinstance(raw, dict) else {}
            if method == "initialize":
                if params.get("protocolVersion") == 2:
                    result = {"protocolVersion": 2, "info": {"name": "dying-agent", "version": "0"},
                              "capabilities": {}}
                else:
                    result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": [],
                              "agentInfo": {"name": "dying-agent", "version": "0"}}
                send({"jsonrpc": "2.0", "id": ident, "result": result})
            elif method == "session/new":
                send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "dying-session"}})
            elif method == "session/prompt":
                for i in range(after):
                    send({"jsonrpc": "2.0", "method": "session/update", "params": {
                        "sessionId": params.get("sessionId", "dying-session"),
                        "update": {"sessionUpdate": "agent_message_chunk", "messageId": "dying-message",
                                   "content": {"type": "text", "text": f"{i}xxxx"}}}})
                stream.close()
                if not finished.done():
                    finished.set_result(None)
            else:
                send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}})

        def on_data(data: bytes) -> None:
            pending.extend(data)
            while not finished.done():
                end = pending.find(b"\n")
                if end < 0:
                    return
                line = bytes(pending[:end])
                del pending[: end + 1]
                if line.strip():
                    handle(json.loads(line))

        def on_eof(exc: BaseException | None) -> None:
            if not finished.done():
                finished.set_result(None)

        stream.attach(on_data, on_eof, lambda ok: None)
        await finished

    return serve


def pysdk_available() -> bool:
    """Whether the pinned Python SDK with its HTTP extra is importable here."""
    from importlib import metadata

    try:
        version = metadata.version("agent-client-protocol")
        import httpx  # noqa: F401
        import websockets  # noqa: F401
    except (metadata.PackageNotFoundError, ImportError):
        return False
    return version == "0.12.1"


def ts_available() -> bool:
    """Whether ``node`` (>= 20) and the pinned TS SDK in ``peers/ts/node_modules`` are there."""
    node = shutil.which("node")
    pkg = REPO / "peers" / "ts" / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    if node is None or not pkg.is_file():
        return False
    try:
        out = subprocess.run([node, "--version"], check=False, capture_output=True, text=True, timeout=30).stdout
        major = int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return False
    return major >= 20 and json.loads(pkg.read_text()).get("version") == "2.4.0"


def pysdk_client(url: str, scenario: str, *args: str) -> list[str]:
    """The Python SDK remote client's command line."""
    return [sys.executable, str(PYSDK_CLIENT), url, scenario, *args]


def ts_client(url: str, scenario: str, *args: str) -> list[str]:
    """The TS SDK remote client's command line."""
    return [shutil.which("node") or "node", str(TS_CLIENT), url, scenario, *args]


def _run_one(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(list(argv), check=False, capture_output=True, text=True, env=dict(env),
                              cwd=REPO, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:  # subprocess.run killed it
        return {"peerFailed": f"no result within {timeout} s", "stderr": str(exc.stderr or "")[-2000:]}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"peerFailed": f"exit {proc.returncode}", "stdout": proc.stdout[-2000:],
                "stderr": proc.stderr[-2000:]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def run_peers(commands: Mapping[str, Sequence[str]], env: Mapping[str, str], *, timeout: float = 60.0,
              parallel: int = 4) -> dict[str, dict[str, Any]]:
    """Runs the peer command lines (``parallel`` at a time), each killed after ``timeout``
    seconds; returns each one's JSON line by name, or ``{"peerFailed": why, ...}``."""
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {name: pool.submit(_run_one, argv, env, timeout) for name, argv in commands.items()}
        return {name: f.result() for name, f in futures.items()}


class Recorder:
    """ASGI middleware that records, per value of the URL's ``case`` query parameter, what
    the server received (POST bodies, WebSocket text frames) and what it sent (SSE body
    chunks, WebSocket text frames), so a test can assert what our side saw of a client that
    reports only its own view.

    Attributes:
        received: ``case -> [bytes]``; sent: ``case -> [bytes]``.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.path = app.path
        self.received: dict[str, list[bytes]] = {}
        self.sent: dict[str, list[bytes]] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        from urllib.parse import parse_qs

        case = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("case", [""])[0]
        got = self.received.setdefault(case, [])
        out = self.sent.setdefault(case, [])

        async def receiving() -> Any:
            message = await receive()
            data = message.get("body") or (message.get("text") or "").encode()
            if data:
                got.append(data)
            return message

        sse = False

        async def sending(message: dict[str, Any]) -> None:
            nonlocal sse
            data = message.get("body") or (message.get("text") or "").encode()
            kind = message["type"]
            if kind == "websocket.close":
                data = b"websocket.close %d" % message.get("code", 1000)
            elif kind == "http.response.start":
                sse = (b"content-type", b"text/event-stream") in message.get("headers", [])
            elif kind == "http.response.body" and sse and not message.get("more_body", False):
                data += b"sse.end"
            if data:
                out.append(data)
            await send(message)

        await self.app(scope, receiving, sending)

    def methods(self, case: str) -> list[str]:
        """The methods of the calls received for ``case``, in order."""
        found: list[str] = []
        for data in self.received.get(case, []):
            try:
                value = json.loads(data)
            except ValueError:
                continue
            for m in value if isinstance(value, list) else [value]:
                if isinstance(m, dict) and isinstance(m.get("method"), str):
                    found.append(m["method"])
        return found

    def sent_count(self, case: str, needle: bytes) -> int:
        """How often ``needle`` occurs in what was sent for ``case``."""
        return sum(chunk.count(needle) for chunk in self.sent.get(case, []))
