"""The remote server's connection events as JSON log lines (``acp_fast.remote.logs``), and
``acp-fast serve --log-format json --metrics-port`` end to end.

Every line is parsed as JSON; each event names the connection by its short id and none
carries a message body. Engine behaviour runs on both twins through the ``engine`` fixture.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from acp_fast.remote import ServerPolicy, asgi_app, gateway_app, served
from acp_fast.remote.logs import EVENTS_LOGGER, JsonFormatter
from acp_fast.testy import build

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from scripted_agent import scripted_agent  # noqa: E402

HANG_GUARD = 60.0
JSON = {"content-type": "application/json"}
SECRET = "SECRET-BODY-TEXT"
INIT = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": 1, "clientCapabilities": {}}}).encode()
NEW = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                  "params": {"cwd": f"/tmp/{SECRET}", "mcpServers": []}}).encode()


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, HANG_GUARD)

    return asyncio.run(guarded())


@pytest.fixture()
def event_log() -> Iterator[io.StringIO]:
    """The events logger at INFO, written as JSON lines to a buffer (restored afterwards)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    events = logging.getLogger(EVENTS_LOGGER)
    level = events.level
    events.addHandler(handler)
    events.setLevel(logging.INFO)
    try:
        yield out
    finally:
        events.removeHandler(handler)
        events.setLevel(level)


def parsed(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def eventually(pred: Any, what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_connection_events_as_json_lines(engine: ModuleType, event_log: io.StringIO) -> None:
    """open, refusal (401, and a 409 with the connection it named), resume served and
    refused, close with its cause; one JSON object a line, the short id in each, no body."""
    app = asgi_app(build((1, 2)), policy=ServerPolicy(token="t", replay_window=1024), engine=engine)
    auth = {"authorization": "Bearer t"}

    async def main() -> str:
        async with served(app) as where, httpx.AsyncClient() as c:
            url = where.http_url
            assert (await c.post(url, content=INIT, headers=JSON)).status_code == 401
            r = await c.post(url, content=INIT, headers={**JSON, **auth})
            cid = r.headers["acp-connection-id"]
            h = {**auth, "acp-connection-id": cid}
            assert (await c.post(url, content=NEW, headers={**JSON, **h})).status_code == 202
            sse = {**h, "accept": "text/event-stream"}
            async with c.stream("GET", url, headers=sse) as stream:
                assert stream.status_code == 200
                async for chunk in stream.aiter_bytes():
                    if SECRET.encode() in chunk or b'"id":1' in chunk:
                        break
                assert (await c.get(url, headers=sse)).status_code == 409  # a second reader
            async with c.stream("GET", url, headers={**sse, "last-event-id": "1"}) as resumed:
                assert resumed.status_code == 200
            assert (await c.get(url, headers={**sse, "last-event-id": "99"})).status_code == 409
            assert (await c.delete(url, headers=h)).status_code == 202
            await eventually(lambda: app.connections == 0, "closed")
        return cid

    cid = run(main())
    lines = parsed(event_log.getvalue())
    assert SECRET not in event_log.getvalue()
    assert all(line["logger"] == EVENTS_LOGGER and line["level"] == "INFO" for line in lines)
    events = [(line["event"], line.get("status") or line.get("cause") or line.get("served")) for line in lines]
    assert events == [("refusal", 401), ("open", None), ("refusal", 409), ("resume", True), ("resume", False),
                      ("refusal", 409), ("close", "client")]
    assert [line["connection"] for line in lines] == [None] + [cid[:8]] * 6
    assert lines[1]["transport"] == "http"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", lines[0]["ts"])


def test_agent_exit_logged_with_its_stderr_tail(tmp_path: Path, event_log: io.StringIO) -> None:
    """A gateway child that fails: its exit status and stderr tail in the agent_exit event,
    the connection closed with cause `agent`; the message that made it fail is not logged."""
    agent = scripted_agent(tmp_path, """
        sys.stderr.write('the tail of a failure\\n'); sys.stderr.flush(); sys.exit(3)
    """)
    app = gateway_app(agent)

    async def main() -> str:
        async with served(app) as where, httpx.AsyncClient() as c:
            r = await c.post(where.http_url, content=INIT, headers=JSON)
            cid = r.headers["acp-connection-id"]
            await c.post(where.http_url, content=NEW, headers={**JSON, "acp-connection-id": cid})
            await eventually(lambda: '"agent_exit"' in event_log.getvalue(), "the exit logged")
        return cid

    cid = run(main())
    lines = {line["event"]: line for line in parsed(event_log.getvalue())}
    assert SECRET not in event_log.getvalue()
    assert lines["agent_exit"]["connection"] == cid[:8]
    assert lines["agent_exit"]["cause"] == "failed" and lines["agent_exit"]["status"] == 3
    assert lines["agent_exit"]["stderr_tail"] == "the tail of a failure\n"
    assert lines["close"]["cause"] == "agent"


def _read_until(proc: subprocess.Popen[str], pattern: str, seen: list[str], limit: float = 30.0) -> re.Match[str]:
    assert proc.stderr is not None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
    raise AssertionError(f"no {pattern!r} in {seen}")


def test_serve_with_json_logs_and_a_metrics_port() -> None:
    """`acp-fast serve --testy --log-format json --metrics-port 0`: the metrics endpoint on
    loopback counts a session; every log line is JSON, the HTTP server's own (access and
    start-up lines at INFO) included, and the shutdown closes the connection with cause
    `shutdown`."""
    cmd = [sys.executable, "-m", "acp_fast.cli.main", "serve", "--testy", "--port", "0", "--metrics-port", "0",
           "--log-format", "json"]
    env = {**os.environ, "ACP_FAST_LOG": "INFO"}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    seen: list[str] = []
    try:
        metrics_url = _read_until(proc, r"metrics at (\S+)", seen).group(1)
        acp_url = _read_until(proc, r"listening on (\S+)", seen).group(1)
        assert metrics_url.startswith("http://127.0.0.1:")
        with httpx.Client() as c:
            r = c.post(acp_url, content=INIT, headers=JSON)
            assert r.status_code == 200
            text = c.get(metrics_url).text
        samples = {(s.name, frozenset(s.labels.items())): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert samples["acp_fast_connections_open", frozenset({("transport", "http")})] == 1
        assert samples["acp_fast_requests_total", frozenset({("method", "initialize"), ("outcome", "ok")})] == 1
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
        seen.extend(rest.splitlines())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    logs = [json.loads(line) for line in seen if not line.startswith("acp-fast serve:") and line.strip()]
    events = [(line["event"], line.get("cause")) for line in logs if "event" in line]
    assert events == [("open", None), ("close", "shutdown")], seen
    assert [line["connection"] for line in logs if "event" in line][0] == r.headers["acp-connection-id"][:8]
    assert any(line["logger"] == "uvicorn.access" and "POST" in line["message"] for line in logs), seen
    assert not any("color_message" in line for line in logs)
