"""A URL is a component and a target like a command: in a conductor chain (``acp-fast conductor
agent PROXY… ws://host/acp``) and for ``acp-fast bench --agent URL``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from acp_fast import Client
from acp_fast.benchmark.probe import probe_once
from acp_fast.conductor.spec import validate
from acp_fast.testy import build
from acp_fast.transport import spawn
from acp_fast.remote import ServerPolicy, asgi_app, is_url, served

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

TIMEOUT = 60.0


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    return env


@pytest.mark.parametrize("scheme", ["ws", "http"])
def test_conductor_chain_ends_in_a_remote_agent(scheme: str, engine: ModuleType) -> None:
    async def main() -> Any:
        async with served(asgi_app(build((1,)), engine=engine)) as where:
            url = where.ws_url if scheme == "ws" else where.http_url
            chain = [sys.executable, "-m", "acp_fast.cli.main", "conductor", "agent",
                     f"{sys.executable} -m acp_fast.conductor.passthrough", url]
            texts: list[str] = []
            client = Client.builder()
            client.on_session_update(lambda u, cx: texts.append(u.payload["content"]["text"])
                                     if u.kind == "agent_message_chunk" else None)
            async with client.connect(spawn(chain, env=_env())) as conn:
                init = await conn.initialize()
                assert init["agentInfo"]["name"] == "test-agent"
                session = (await conn.build_session(cwd=".")).session
                assert await session.send_prompt("stream 50") == {"stopReason": "end_turn"}
                assert len(texts) == 50

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_bench_probe_measures_a_url() -> None:
    async def main() -> Any:
        async with served(asgi_app(build((1, 2)), policy=ServerPolicy())) as where:
            v1 = await probe_once([where.ws_url], "stream 20", protocol="1")
            v2 = await probe_once([where.http_url], "stream 20", protocol="2")
            return v1, v2

    v1, v2 = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert v1["protocol"] == 1 and v1["chunks"] >= 20
    assert v2["protocol"] == 2 and v2["chunks"] >= 20


def test_url_specs() -> None:
    for url in ("ws://h/acp", "WSS://h", "http://127.0.0.1:8000/acp", " https://x "):
        assert is_url(url) and validate(url) == url
    for spec in ("acp-fast testy", "./ws://x", ["ws://x"], "file:///x"):
        assert not is_url(spec)
