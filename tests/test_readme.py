"""Every Python snippet of README.md runs as written (and the shell commands name real things).

The agent snippet is served as a real child process and driven with acp_fast clients of
both versions through its router; the client snippet is run as a script against
``acp-fast testy``; the engine snippet runs in-process.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_fast import Client, spawn
from acp_fast.roles import V1Session, V2Session

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
TIMEOUT = 60.0


def _block(marker: str) -> str:
    found = [b for b in BLOCKS if marker in b]
    assert len(found) == 1, f"expected one README python block containing {marker!r}"
    return found[0]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    return env


def test_the_readme_has_the_snippets_this_module_runs() -> None:
    assert len(BLOCKS) == 7
    for block in BLOCKS:
        assert "..." not in block  # no elisions: every snippet is complete


def test_agent_snippet_serves_v1_and_v2(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(_block("run_agent_stdio(Agent.protocol_router()"))

    async def drive(version: int) -> Any:
        texts: list[str] = []
        client = Client.builder() if version == 1 else Client.v2()
        client.on_session_update(lambda u, cx: texts.append(u.payload["content"]["text"])
                                 if u.kind == "agent_message_chunk" else None)
        async with client.connect(spawn([sys.executable, str(script)], env=_env())) as conn:
            init = await conn.initialize()
            assert init["protocolVersion"] == version
            session = (await conn.build_session(cwd=str(tmp_path))).session
            if version == 1:
                assert isinstance(session, V1Session)
                result = await session.send_prompt("hi")
                assert result == {"stopReason": "end_turn"} and "".join(texts) == "hello world"
            else:
                assert isinstance(session, V2Session)
                epoch = session.idle_epoch
                assert await session.send_prompt("hi") == {"messageId": "m1"}
                stop = await session.wait_idle(after=epoch)
                assert stop is not None and stop.kind == "end_turn" and texts == ["hello"]

    async def both() -> None:
        await asyncio.wait_for(drive(1), TIMEOUT)
        await asyncio.wait_for(drive(2), TIMEOUT)

    asyncio.run(both())


def test_client_snippet_runs_against_testy(tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(_block("asyncio.run(main())"))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=_env(), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Hello, world!" in proc.stdout  # Testy's answer, streamed as chunks


def test_remote_server_and_client_snippets(tmp_path: Path) -> None:
    """The server snippet under ``uvicorn server:app`` and the client snippet against it, over
    WebSocket and Streamable HTTP (the README's port replaced by a free one)."""
    import socket

    (tmp_path / "server.py").write_text(_block("asgi_app(build()"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "server:app", "--port", str(port), "--log-level",
                               "warning"], cwd=tmp_path, env=_env(), stderr=subprocess.PIPE, start_new_session=True)
    try:
        import httpx

        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                import time

                time.sleep(0.1)
        client = _block('asyncio.run(main("ws://')
        assert "127.0.0.1:8000" in client
        for scheme in ("ws", "http"):
            script = tmp_path / f"client_{scheme}.py"
            script.write_text(client.replace("ws://127.0.0.1:8000", f"{scheme}://127.0.0.1:{port}"))
            proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT,
                                  env=_env(), cwd=tmp_path, check=False)
            assert proc.returncode == 0, proc.stderr
            assert "'stopReason': 'end_turn'" in proc.stdout
    finally:
        server.terminate()
        server.wait(10)


def test_metrics_snippet_counts_a_session(tmp_path: Path) -> None:
    """The "Operating it" snippet (its ports replaced by free ones) serves Testy and a scrape
    endpoint; after one session with a prompt over WebSocket the scrape, parsed, counts it."""
    from prometheus_client.parser import text_string_to_metric_families

    from acp_fast.remote import connect_url

    block = _block("asyncio.run(serve_with_metrics())")
    assert "port=8000" in block and "port=9464" in block
    script = tmp_path / "metrics_server.py"
    script.write_text(block.replace("port=8000", "port=0").replace("port=9464", "port=0"))
    server = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        found = re.search(r"serving (\S+); metrics at (\S+)", server.stdout.readline())
        assert found is not None, "the snippet did not say where it serves"
        ws_url, metrics_url = found.groups()

        async def one_session() -> None:
            async with Client.builder().connect(connect_url(ws_url)) as conn:
                await conn.initialize()
                session = (await conn.build_session(cwd=str(tmp_path))).session
                assert isinstance(session, V1Session)
                assert await session.send_prompt("hi") == {"stopReason": "end_turn"}

        asyncio.run(asyncio.wait_for(one_session(), TIMEOUT))
        import httpx

        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(httpx.get(metrics_url, timeout=TIMEOUT).text)
                   for s in family.samples}
        assert samples["acp_fast_requests_total", (("method", "session/prompt"), ("outcome", "ok"))] == 1
        assert samples["acp_fast_connections_opened_total", (("transport", "websocket"),)] == 1
    finally:
        server.terminate()
        server.wait(10)


def test_engine_snippet_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(_block("Decoder(lazy=True)"), "README.md", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out
    assert "session/update {'sessionId': 's1'}" in out
    assert "9 {} None" in out


def test_quick_start_commands_name_real_things() -> None:
    commands = re.findall(r"```sh\n(.*?)```", README, flags=re.S)
    assert len(commands) == 2
    for command in commands:
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e ")
        assert "bash scripts/install_peers.sh" in command
        assert (REPO / "scripts" / "install_peers.sh").is_file()
    assert commands[0].strip().endswith("acp-fast bench --quick")
    test_part = commands[1].strip().rsplit(" && ", 1)[1]
    assert test_part.startswith("python -m pytest"), test_part
    # CI runs the same command: the same install, pytest with the same options (XDIST=(...))
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]"' in ci and 'python -m pytest -q -p no:cacheprovider "${XDIST[@]}"' in ci
    xdist = re.search(r"^XDIST=\((.*)\)$", ci, flags=re.M)
    assert xdist is not None and test_part.split()[3:] == xdist.group(1).split(), (test_part, xdist)


def _collected(*args: str) -> int:
    """How many tests ``pytest --collect-only`` finds for ``args``, both twins counted."""
    env = {k: v for k, v in os.environ.items() if k != "ACP_FAST_NO_EXTENSIONS"}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False)
    found = re.search(r"^(\d+) tests? collected", out.stdout, flags=re.M)
    assert found is not None, out.stdout[-2000:] + out.stderr[-2000:]
    return int(found.group(1))


def _reliability_row(start: str) -> str:
    section = README.split("## Reliability\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith(f"| {start}")]
    assert len(rows) == 1, f"expected one Reliability row starting {start!r}"
    return rows[0]


def test_reliability_counts_are_what_is_collected() -> None:
    """The README's test counts of the fault tests and of the sanitizer job are the numbers
    collected now (the sanitizer job's test list is the default of scripts/sanitize.sh)."""
    faults = re.search(r"\| (\d+) tests \(both twins counted\)", _reliability_row("fault injection"))
    assert faults is not None
    assert int(faults.group(1)) == _collected("tests/test_faults.py", "tests/test_faults_regressions.py")

    script = (REPO / "scripts" / "sanitize.sh").read_text(encoding="utf-8")
    default = re.search(r"^\s*set -- (tests/.*?)\n\s*fi$", script, flags=re.M | re.S)
    assert default is not None, "scripts/sanitize.sh: no default test list"
    files = default.group(1).replace("\\\n", " ").split()
    assert files and all((REPO / f).is_file() for f in files), files
    sanitized = re.search(r"\| ([\d,]+) tests, no report", _reliability_row("sanitizers"))
    assert sanitized is not None
    assert int(sanitized.group(1).replace(",", "")) == _collected(*files)


def test_benchmark_tables_are_regenerated_from_the_committed_json() -> None:
    """Each benchmark table block of the README is exactly what its command prints from the raw
    JSON committed in docs/bench/ (``python scripts/readme_bench.py`` rewrites them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_bench", REPO / "scripts" / "readme_bench.py")
    assert spec is not None and spec.loader is not None
    readme_bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = readme_bench  # its dataclass looks its module up there
    spec.loader.exec_module(readme_bench)
    found = readme_bench.blocks(README)
    assert {b.name for b in found} >= {"e2e", "engine", "sdk-dropin"}, [b.name for b in found]
    for b in found:
        sources = re.findall(r"docs/bench/[\w.-]+\.json", b.command)
        assert sources and all((REPO / s).is_file() for s in sources), b.command
    diffs = readme_bench.differences(README)
    assert not diffs, "\n".join(diffs)
