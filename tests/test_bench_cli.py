"""``acp-fast bench`` (acp_fast.cli.bench, acp_fast.benchmark): tiny runs, one repetition.

Real processes over real pipes, sized to take a few seconds: the suite mode's JSON rows, the
skip line of a peer that is not installed (a bogus ``--peers`` folder), the ``--agent`` probe
against a tiny v1-only agent (exercising the connector's v2 → v1 fallback) and the fallback
agent (v2), the PNG chart (when matplotlib is installed), and the targets' PASS/MISS logic.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acp_fast.benchmark.suite import Row
from acp_fast.benchmark.targets import Target, evaluate

ROOT = Path(__file__).resolve().parents[1]
FALLBACK_AGENT = f"{sys.executable} -m acp_fast.benchmark.agent"
TINY = ["--repeat", "1", "--n", "40", "--m", "5", "--inflight", "4", "--inflight-m", "12",
        "--large-n", "1", "--warmup", "2", "--timeout", "60", "--no-progress"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_fast.cli.bench", *args], check=False, capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=timeout)


def test_suite_json_rows_and_skip_line(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    bogus = tmp_path / "no-such-peers"
    r = _bench("--pairs", "acp_fast-pure/acp_fast-pure,pysdk/pysdk,ts/ts", "--peers", str(bogus),
               "--acp-agent", FALLBACK_AGENT, "--json", str(out), *TINY)
    assert r.returncode == 0, r.stderr
    # a missing peer: one clear line on stderr, listed under the table, one skipped row
    assert f"pysdk/pysdk: skipped: pysdk not installed (no {bogus / 'pysdk' / 'client.py'}" in r.stderr
    assert "ts/ts: skipped: ts not installed" in r.stderr
    assert "- pysdk/pysdk: skipped: pysdk not installed" in r.stdout
    assert "acp_fast agent: --acp-agent" in r.stdout
    assert "| target | pair | vs | measured | goal | result |" in r.stdout
    doc = json.loads(out.read_text())
    assert set(doc) >= {"meta", "settings", "rows", "raw", "targets"}
    rows = doc["rows"]
    skipped = [row for row in rows if "skipped" in row]
    assert {row["pair"] for row in skipped} == {"pysdk/pysdk", "ts/ts"}
    assert all(row["workload"] == "*" for row in skipped)
    measured = {row["workload"]: row for row in rows if row["pair"] == "acp_fast-pure/acp_fast-pure"}
    assert {"stream", "rtt_seq", "rtt_p50", "rtt_p99", "inflight", "large", "rss_client", "rss_agent",
            "startup"} <= set(measured)
    for row in measured.values():
        assert set(row) >= {"pair", "workload", "unit", "runs", "median", "better"}
        assert "errors" not in row, row
        assert len(row["runs"]) == 1 and row["median"] == row["runs"][0]
    assert measured["stream"]["unit"] == "notif/s" and measured["stream"]["better"] == "higher"
    assert measured["rtt_p99"]["unit"] == "µs" and measured["rtt_p99"]["better"] == "lower"
    main = next(rec for rec in doc["raw"] if rec["step"] == "main")
    assert main["result"]["sdk"] == "acp_fast" and main["result"]["engine"] == "py"
    assert main["result"]["updatesOk"] and main["result"]["textOk"]
    assert main["result"]["textBytes"] == 40 * 100
    # targets against missing pairs are n/a, never PASS
    results = {(t["label"]): t["result"] for t in doc["targets"]}
    assert results["pure streaming ≥ 3× Python SDK"] == "n/a"


def test_list_shows_skip_state(tmp_path: Path) -> None:
    r = _bench("--list", "--peers", str(tmp_path))
    assert r.returncode == 0
    assert "acp_fast/acp_fast" in r.stdout and "ts/acp_fast" in r.stdout
    assert "[skipped: pysdk not installed" in r.stdout


TINY_AGENT = textwrap.dedent("""
    from acp_fast import Agent, run_agent_stdio

    agent = Agent.builder()  # v1 only: answers a v2 initialize with protocolVersion 1

    @agent.on_request("session/new")
    def new(params, cx):
        return {"sessionId": "s1"}

    @agent.on_request("session/prompt")
    async def prompt(params, cx):
        for i in range(7):
            cx.send_session_update("s1", {"sessionUpdate": "agent_message_chunk",
                                          "content": {"type": "text", "text": "hello"}})
        return {"stopReason": "end_turn"}

    run_agent_stdio(agent)
""")


def test_agent_probe_v1_fallback(tmp_path: Path) -> None:
    script = tmp_path / "tiny_agent.py"
    script.write_text(TINY_AGENT)
    out = tmp_path / "probe.json"
    r = _bench("--agent", f"{sys.executable} {script}", "--runs", "2", "--prompt", "hi", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "process start → initialize response" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["mode"] == "agent" and not doc["errors"]
    assert [run["protocol"] for run in doc["runs"]] == [1, 1]
    rows = {row["metric"]: row for row in doc["rows"]}
    assert rows["updates"]["median"] == 7
    for key in ("startup_ms", "session_new_ms", "first_update_ms", "updates_per_s", "turn_ms"):
        assert len(rows[key]["runs"]) == 2 and rows[key]["median"] > 0, key
    assert {run["stop_reason"] for run in doc["runs"]} == {"end_turn"}


def test_agent_probe_v2_and_failure(tmp_path: Path) -> None:
    r = _bench("--agent", FALLBACK_AGENT, "--runs", "1", "--prompt", "stream 25 chunks")
    assert r.returncode == 0, r.stderr
    assert "ACP v2" in r.stdout and "| updates in the turn | count | 28 |" in r.stdout  # running, user_message, 25 chunks, idle
    bad = _bench("--agent", f"{sys.executable} -c pass", "--runs", "1", "--timeout", "20")
    assert bad.returncode == 1
    assert "run 1:" in bad.stdout


def test_client_contract_v1_v2() -> None:
    for extra in ([], ["--v2"], ["--permission"]):
        r = subprocess.run([sys.executable, "-m", "acp_fast.benchmark.client", *extra, "--n", "30", "--m", "3",
                            "--inflight", "2", "--inflight-m", "4", "--warmup", "2"],
                           check=False, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["protocolVersion"] == (2 if extra == ["--v2"] else 1)
        assert res["updatesOk"] and res["textOk"] and res["stopReason"] == "end_turn"
        assert res["textBytes"] >= 3000 and res["roundTripsPerSec"] > 0 and res["requestsPerSec"] > 0
        assert res["agentMaxRssKiB"] > 0 and res["agentExit"] == 0
        if extra == ["--permission"]:
            assert res["permissionRequests"] == 1


def _rows(values: dict[tuple[str, str], float]) -> list[Row]:
    better = {"stream": "higher", "rtt_seq": "higher", "inflight": "higher", "rss_client": "lower"}
    return [Row(pair=p, workload=w, unit="x", runs=[v], median=v, better=better[w]) for (p, w), v in values.items()]


def test_targets_pass_miss() -> None:
    rows = _rows({("a", "stream"): 1300.0, ("ref", "stream"): 100.0, ("a", "rss_client"): 31.0})
    targets = [Target("s", "a", "stream", 12.0, "ref"), Target("s2", "a", "stream", 14.0, "ref"),
               Target("r", "a", "rss_client", 30.0), Target("n", "a", "inflight", 5.0, "ref")]
    got = {t["label"]: (t["result"], t["measured"]) for t in evaluate(rows, targets)}
    assert got == {"s": ("PASS", 13.0), "s2": ("MISS", 13.0), "r": ("MISS", 31.0), "n": ("n/a", None)}


def test_add_parser_registers_bench() -> None:
    from acp_fast.cli import bench

    parser = argparse.ArgumentParser(prog="acp-fast")
    sub = parser.add_subparsers(dest="command")
    bench.add_parser(sub)
    args = parser.parse_args(["bench", "--quick", "--png", "x.png"])
    assert args.func is bench.run and args.quick and args.png == "x.png"
    args = parser.parse_args(["bench", "--agent", "my-agent --flag", "--runs", "5"])
    assert args.agent == "my-agent --flag" and args.runs == 5


def test_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from acp_fast.benchmark.chart import write_png

    rows = _rows({("a", "stream"): 1300.0, ("ref", "stream"): 100.0, ("a", "rtt_seq"): 5.0})
    path = tmp_path / "chart.png"
    write_png(path, rows, title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from acp_fast.benchmark.chart import MissingMatplotlib, write_png

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(MissingMatplotlib, match="pip install matplotlib"):
        write_png(tmp_path / "c.png", _rows({("a", "stream"): 1.0}))
    assert not (tmp_path / "c.png").exists()


def test_spawned_stream_uses_the_write_water_marks() -> None:
    """transport.WRITE_HIGH_WATER/LOW_WATER (256/64 KiB, lowered from 1 MiB/256 KiB for the
    peak RSS of streaming agents) are what a spawned child's write transport gets."""
    import asyncio

    from acp_fast import transport

    assert (transport.WRITE_HIGH_WATER, transport.WRITE_LOW_WATER) == (256 * 1024, 64 * 1024)

    async def main() -> tuple[int, int]:
        stream = await transport.spawn([sys.executable, "-c", "import sys; sys.stdin.read()"])
        try:
            return stream._wt.get_write_buffer_limits()  # type: ignore[no-any-return]
        finally:
            stream.close()
            await stream.wait_closed()

    assert asyncio.run(main()) == (64 * 1024, 256 * 1024)
