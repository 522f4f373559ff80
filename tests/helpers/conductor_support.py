"""Shared helpers of the conductor tests (not a test module).

* :class:`Wire` is a raw JSON-line client over a :class:`roles_support.RawPeer`: ``call``
  returns ``(response, messages before it)``;
* :func:`cmd_testy` / :func:`proxy_cmd` are component specs for ``acp-fast testy`` and the
  example proxies as child processes (the engine twin chosen by ``--engine`` / env);
* :func:`component_env` makes the children import this checkout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from roles_support import REPO, RawPeer

EXAMPLES = REPO / "examples" / "proxies"
HELPERS = Path(__file__).resolve().parent


def component_env(engine: ModuleType) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path}
    if engine.IMPLEMENTATION == "py":
        env["ACP_FAST_NO_EXTENSIONS"] = "1"
    return env


def cmd_testy(engine: ModuleType, *args: str) -> list[str]:
    return [sys.executable, "-m", "acp_fast.cli.main", "testy", "--engine", engine.IMPLEMENTATION, *args]


def proxy_cmd(name: str = "passthrough") -> list[str]:
    return [sys.executable, str(EXAMPLES / f"{name}.py")]


class Wire:
    """A raw JSON-line client: ``call`` sends a request and returns ``(response, messages before it)``."""

    def __init__(self, peer: RawPeer) -> None:
        self.peer = peer
        self.next_id = 0
        self.backlog: list[Any] = []

    async def recv(self) -> Any:
        if self.backlog:
            return self.backlog.pop(0)
        return await self.peer.recv()

    def send_request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.peer.send(msg)
        return self.next_id

    async def until(self, pred: Any) -> tuple[Any, list[Any]]:
        seen = []
        while True:
            msg = await self.recv()
            if pred(msg):
                return msg, seen
            seen.append(msg)

    async def call(self, method: str, params: Any = None) -> tuple[Any, list[Any]]:
        rid = self.send_request(method, params)
        return await self.until(lambda m: m.get("id") == rid and "method" not in m)

    async def result(self, method: str, params: Any = None) -> Any:
        reply, _ = await self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]

    def notify(self, method: str, params: Any) -> None:
        self.peer.notify(method, params)

    def answer(self, request: Any, result: Any) -> None:
        self.peer.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def text_prompt(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


def updates(msgs: list[Any]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in msgs if m.get("method") == "session/update"]


class LinePeer(RawPeer):
    """A :class:`RawPeer` that also keeps each raw line: ``recv_raw`` gives ``(obj, bytes)``."""

    def _data(self, data: bytes) -> None:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if line.strip():
                self.lines.put_nowait((json.loads(line), line))

    async def recv_raw(self) -> tuple[Any, bytes]:
        item = await self.lines.get()
        if item is EOFError:
            raise EOFError("peer closed the stream")
        return item  # type: ignore[no-any-return]

    async def recv(self) -> Any:
        return (await self.recv_raw())[0]


class Scripted:
    """A chain component served in-process whose far end the test drives as raw lines.

    The conductor starts it like any builder (``serve(stream, engine=...)``); ``starts``
    counts how often, ``await peer()`` gives the :class:`LinePeer` once started, and
    ``close()`` ends it as if the component exited.
    """

    def __init__(self) -> None:
        self.starts = 0
        self._peer: LinePeer | None = None

    async def serve(self, stream: Any, engine: Any = None) -> None:
        self.starts += 1
        self._peer = LinePeer(stream)
        await self._peer.eof

    async def peer(self) -> LinePeer:
        import asyncio

        while self._peer is None:
            await asyncio.sleep(0.005)
        return self._peer

    def close(self) -> None:
        assert self._peer is not None
        self._peer.stream.close()
