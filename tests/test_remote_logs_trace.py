"""`acp-fast serve --trace DIR` (`AcpApp(trace_dir=...)`): each remote connection's messages in
the conductor's trace format, one file per connection, read back by the trace viewer.

Engine behaviour (the trace decodes every message) runs on both twins through the ``engine``
fixture, with and without metrics (the traced connection with metrics is a class of its own).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import websockets

from acp_fast.conductor.trace_view import analyse, load_events, summary_table
from acp_fast.remote import asgi_app, served
from acp_fast.remote.metrics import ServerMetrics
from acp_fast.remote._wire import SseParser
from acp_fast.testy import build

JSON = {"content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
NEW = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}


def prompt(sid: str, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}}


async def _sse_until(c: httpx.AsyncClient, url: str, headers: dict[str, str], rid: int) -> dict[str, Any]:
    parser = SseParser()
    async with c.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as resp:
        async for chunk in resp.aiter_bytes():
            for data in parser.feed(chunk):
                m = json.loads(data)
                if m.get("id") == rid:
                    return m  # type: ignore[no-any-return]
    raise AssertionError("the stream ended")


@pytest.mark.parametrize("with_metrics", [False, True], ids=["trace", "trace+metrics"])
def test_each_connection_traced_in_the_conductors_format(engine: ModuleType, tmp_path: Path,
                                                         with_metrics: bool) -> None:
    metrics = ServerMetrics() if with_metrics else None
    app = asgi_app(build((1, 2)), engine=engine, metrics=metrics, trace_dir=tmp_path)

    async def main() -> list[str]:
        async with served(app) as where, httpx.AsyncClient() as c:
            url = where.http_url
            r = await c.post(url, json=INIT)
            cid = r.headers["acp-connection-id"]
            h = {"acp-connection-id": cid}
            reply = asyncio.ensure_future(_sse_until(c, url, h, 1))
            await asyncio.sleep(0.1)
            await c.post(url, json=NEW, headers=h)
            sid = (await reply)["result"]["sessionId"]
            turn = asyncio.ensure_future(_sse_until(c, url, {**h, "acp-session-id": sid}, 2))
            await asyncio.sleep(0.1)
            await c.post(url, json=prompt(sid, "stream 5"), headers=h)
            assert (await turn)["result"]["stopReason"] == "end_turn"
            await c.delete(url, headers=h)
            async with websockets.connect(where.ws_url) as ws:
                ws_cid = ws.response.headers["acp-connection-id"]
                await ws.send(json.dumps(INIT))
                await ws.recv()
                await ws.send(json.dumps(NEW))
                ws_sid = json.loads(await ws.recv())["result"]["sessionId"]
                await ws.send(json.dumps(prompt(ws_sid, "stream 3")))
                while json.loads(await ws.recv()).get("id") != 2:
                    pass
        return [cid, ws_cid]

    cids = asyncio.run(asyncio.wait_for(main(), 60))
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == 2
    for cid, updates in zip(cids, (5, 3)):
        (path,) = [f for f in files if f.name.endswith(f"-{cid[:8]}.jsonl")]
        events, warnings = load_events(path)
        assert not warnings
        calls = [(e["type"], e["from"], e["to"], e.get("method"), e.get("id")) for e in events if e["type"] != "notification"]
        assert calls == [("request", "Client", "Agent", "initialize", 0), ("response", "Agent", "Client", None, 0),
                         ("request", "Client", "Agent", "session/new", 1), ("response", "Agent", "Client", None, 1),
                         ("request", "Client", "Agent", "session/prompt", 2), ("response", "Agent", "Client", None, 2)]
        notes = [e for e in events if e["type"] == "notification" and e["method"] == "session/update"]
        assert len(notes) >= updates and all(e["from"] == "Agent" and e["session"] for e in notes)
        assert events[-1]["payload"] == {"stopReason": "end_turn"}
        assert "session/prompt" in summary_table(analyse(events))
