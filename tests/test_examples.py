"""``examples/``: each script runs as written, as real child processes.

Every test runs on both engine twins: the ``py`` param exports ``ACP_FAST_NO_EXTENSIONS=1``
to the example and to the agent it spawns.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
TESTY = [sys.executable, "-m", "acp_fast.cli.main", "testy"]
AGENT = [sys.executable, str(EXAMPLES / "agent.py")]


def example(engine: ModuleType, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    env.pop("ACP_FAST_NO_EXTENSIONS", None)
    if engine.IMPLEMENTATION == "py":
        env["ACP_FAST_NO_EXTENSIONS"] = "1"
    return subprocess.run(check=False, args=[sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60, stdin=subprocess.DEVNULL)


def test_client_v2_against_testy(engine: ModuleType) -> None:
    proc = example(engine, "client_v2.py", "--prompt", "echo hello from the test", "--", *TESTY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello from the test"
    assert "[prompt accepted: testy-v2-user-message-1]" in proc.stderr
    assert "[stop reason: end_turn]" in proc.stderr


def test_client_v2_default_agent_streams(engine: ModuleType) -> None:
    proc = example(engine, "client_v2.py", "--prompt", "stream 3 chunks of 4 bytes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0xxx1xxx2xxx"  # Testy: chunk index + padding


def test_client_v2_refusal_exits_1(engine: ModuleType) -> None:
    proc = example(engine, "client_v2.py", "--prompt", "content", "--", *TESTY)
    assert proc.returncode == 1 and "[stop reason: refusal]" in proc.stderr


def test_client_v2_against_example_agent(engine: ModuleType) -> None:
    proc = example(engine, "client_v2.py", "--prompt", "one two three", "--", *AGENT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["one", "two", "three"]


def test_client_v2_against_v1_only_agent_fails_cleanly(engine: ModuleType) -> None:
    proc = example(engine, "client_v2.py", "--", *TESTY, "--versions", "1")
    assert proc.returncode == 2
    assert "required ACP protocol version 2 but peer negotiated 1" in proc.stderr


def test_permission_client_allow_and_reject(engine: ModuleType) -> None:
    for choose, option in (("allow", "allow"), ("reject", "reject"), ("cancel", "cancelled")):
        proc = example(engine, "permission_client.py", "--choose", choose, "--", *TESTY)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0] == f"permission:{option}" and len(lines) == 4
        assert "permission requests: 1, stop reason: end_turn" in proc.stderr


def test_permission_client_callbacks_scenario(engine: ModuleType) -> None:
    proc = example(engine, "permission_client.py", "--prompt", "callbacks", "--", *TESTY)
    assert proc.returncode == 0, proc.stderr
    assert "permission: ok allow_once" in proc.stdout
    assert "fs/write_text_file: skipped" in proc.stdout


def test_example_agent_serves_v1(engine: ModuleType) -> None:
    proc = example(engine, "permission_client.py", "--prompt", "a b", "--", *AGENT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["a", "b"]
    assert "permission requests: 0, stop reason: end_turn" in proc.stderr
