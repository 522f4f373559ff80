"""``acp-fast bench`` (acp_fast.cli.bench, acp_fast.benchmark): tiny runs, one repetition.

Real processes over real pipes, sized to take a few seconds: the suite mode's JSON rows (both
loops when uvloop imports, CPUs pinned), the skip line of a peer that is not installed (a bogus
``--peers`` folder), the message when the bench extra is missing, the ``--agent`` probe against
a tiny v1-only agent (exercising the connector's v2 → v1 fallback) and Testy (v2), the PNG chart
(when matplotlib is installed), the goals' PASS/MISS logic and the precision of its verdicts,
the busy-machine warning; the proxy-chain rows (the client → ``acp-fast conductor`` with 0
and 1 pass-through proxies → Testy, the conductor's CPU and RSS read by the client from /proc).
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

from acp_fast.benchmark.machine import Snapshot, busy_warnings
from acp_fast.benchmark.suite import Measurement
from acp_fast.benchmark.targets import Goal, format_measured, verdicts

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTY = f"{sys.executable} -m acp_fast.cli.main testy"
TINY = ["--repeat", "1", "--n", "40", "--m", "5", "--inflight", "4", "--inflight-m", "12",
        "--large-n", "1", "--warmup", "2", "--timeout", "60", "--no-progress"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    return env


def _bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_fast.cli.bench", *args], check=False, capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=timeout)


def test_suite_json_rows_and_skip_line(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    pytest.importorskip("tabulate")
    pytest.importorskip("tqdm")
    out = tmp_path / "bench.json"
    bogus = tmp_path / "no-such-peers"
    r = _bench("--pairs", "acp_fast-pure/acp_fast-pure,pysdk/pysdk,ts/ts", "--peers", str(bogus),
               "--json", str(out), *TINY)
    assert r.returncode == 0, r.stderr
    # a missing peer: one clear line on stderr, listed under the table, one skipped row
    assert f"pysdk/pysdk: skipped: pysdk not installed (no {bogus / 'pysdk' / 'client.py'}" in r.stderr
    assert "ts/ts: skipped: ts not installed" in r.stderr
    assert "- pysdk/pysdk: skipped: pysdk not installed" in r.stdout
    assert "acp_fast agent: acp-fast testy (public API" in r.stdout
    assert "| goal (issues 7 §3, 10, 11)" in r.stdout and "Load average (1/5/15 min):" in r.stdout
    assert "Command: acp-fast bench --pairs" in r.stdout
    doc = json.loads(out.read_text())
    assert set(doc) >= {"meta", "config", "rows", "raw", "goals"}
    loops = doc["config"]["loops"]
    assert loops[0] == "asyncio"
    rows = doc["rows"]
    skipped = [row for row in rows if "skipped" in row]
    assert {row["pair"] for row in skipped} == {"pysdk/pysdk", "ts/ts"}
    assert all(row["workload"] == "*" for row in skipped)
    for loop in loops:
        measured = {row["workload"]: row for row in rows
                    if row["pair"] == "acp_fast-pure/acp_fast-pure" and row["loop"] == loop}
        assert {"stream", "stream_cpu_client", "stream_cpu_agent", "stream_cpu_sum", "rtt_seq", "inflight", "large",
                "rss_client", "rss_agent", "startup"} <= set(measured)
        for row in measured.values():
            assert set(row) >= {"pair", "loop", "workload", "unit", "runs", "median", "better"}
            assert "errors" not in row, row
            assert len(row["runs"]) == 1 and row["median"] == row["runs"][0]
        assert measured["stream"]["unit"] == "notif/s" and measured["stream"]["better"] == "higher"
        assert measured["stream_cpu_sum"]["median"] == pytest.approx(
            measured["stream_cpu_client"]["median"] + measured["stream_cpu_agent"]["median"], abs=0.02)
    mains = [rec for rec in doc["raw"] if rec["step"] == "main"]
    assert [rec["result"]["loop"] for rec in mains] == loops  # the client ran on the loop of its row
    assert [rec["result"]["agentLoop"] for rec in mains] == loops  # and so did the agent (Testy)
    for rec in mains:
        assert rec["result"]["sdk"] == "acp_fast" and rec["result"]["engine"] == "py"
        assert rec["result"]["updatesOk"] and rec["result"]["textOk"]
        assert rec["result"]["textBytes"] == 40 * 100
        assert f"--loop {rec['loop']}" in " ".join(rec["argv"])  # both sides
        assert " ".join(rec["argv"]).count(f"--loop {rec['loop']}") == 2
        if len(os.sched_getaffinity(0)) >= 2:
            assert rec["pinned"] is not None and rec["pinned"][0] != rec["pinned"][1]
    # goals against missing pairs are n/a, never PASS
    results = {(g["label"], g["loop"]): g["result"] for g in doc["goals"]}
    assert results[("pure twin streaming vs Python SDK", "asyncio")] == "n/a"


def test_the_readme_agent_row(tmp_path: Path) -> None:
    """``acp_fast/acp_fast-readme``: the acp_fast client fed by the agent the README's snippet
    describes (acp_fast.benchmark.readme_agent), a default and --quick row on every loop, its
    processes checked like any other row's (compiled twin, the row's loop), every 1 MiB text too."""
    pytest.importorskip("psutil")
    pytest.importorskip("tabulate")
    pytest.importorskip("tqdm")
    from acp_fast.benchmark.pairs import DEFAULT_PAIRS, PAIRS

    assert "acp_fast/acp_fast-readme" in DEFAULT_PAIRS and PAIRS["acp_fast/acp_fast-readme"].quick
    out = tmp_path / "bench.json"
    r = _bench("--pairs", "acp_fast/acp_fast-readme", "--json", str(out), *TINY)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    rows = {(row["loop"], row["workload"]): row for row in doc["rows"]}
    for loop in doc["config"]["loops"]:
        for workload in ("stream", "stream_cpu_agent", "rtt_seq", "inflight", "large"):
            assert rows[(loop, workload)]["median"] is not None, (loop, workload)
            assert rows[(loop, workload)]["ran"] == "c ×2"
    for rec in doc["raw"]:
        res = rec["result"]
        assert res["updatesOk"] and res["textOk"] and res["agentLoop"] == rec["loop"], res
        assert res["agentEngine"] == "c" and res["agentInfo"]["name"] == "readme-agent"


def test_a_side_on_another_loop_fails_the_run() -> None:
    from acp_fast.benchmark.runner import Invocation, InvocationError
    from acp_fast.benchmark.suite import STEPS, _check

    ok = {"updatesOk": True, "textOk": True, "stopReason": "end_turn"}
    _check(Invocation([], {**ok, "loop": "uvloop", "agentLoop": "uvloop"}, 1.0), STEPS[0], "uvloop")
    _check(Invocation([], {**ok, "loop": "uvloop"}, 1.0), STEPS[0], "uvloop")  # a node agent reports none
    with pytest.raises(InvocationError, match="agentLoop 'asyncio', the row's loop is 'uvloop'"):
        _check(Invocation([], {**ok, "loop": "uvloop", "agentLoop": "asyncio"}, 1.0), STEPS[0], "uvloop")


def test_suite_without_the_bench_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from acp_fast.cli import bench

    monkeypatch.setattr(bench, "BENCH_EXTRA", ("psutil", "no_such_module_for_the_test"))
    assert bench.main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert "needs the bench extra, missing: no_such_module_for_the_test" in err
    assert "pip install 'acp-fast[bench]'" in err


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
    r = _bench("--agent", TESTY, "--runs", "1", "--prompt", "stream 25 chunks")
    assert r.returncode == 0, r.stderr
    assert "ACP v2" in r.stdout and "| updates in the turn | count | 28 |" in r.stdout  # user_message, running, 25 chunks, idle
    bad = _bench("--agent", f"{sys.executable} -c pass", "--runs", "1", "--timeout", "20")
    assert bad.returncode == 1
    assert "run 1:" in bad.stdout


def test_client_contract_v1_v2() -> None:
    for extra in (["--loop", "asyncio"], ["--v2"], ["--permission"]):
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
        if extra[0] == "--loop":
            assert res["loop"] == "asyncio"


def _rows(values: dict[tuple[str, str], float], loop: str = "asyncio") -> list[Measurement]:
    better = {"stream": "higher", "rtt_seq": "higher", "inflight": "higher", "rss_client": "lower",
              "stream_cpu_agent": "lower"}
    return [Measurement(pair=p, workload=w, unit="x", loop="node" if p == "node-ref" else loop, runs=[v], median=v,
                        better=better[w]) for (p, w), v in values.items()]


def test_goals_pass_miss() -> None:
    rows = _rows({("a", "stream"): 1300.0, ("ref", "stream"): 100.0, ("a", "rss_client"): 31.0,
                  ("a", "stream_cpu_agent"): 1.9})
    goals = [Goal("s", "a", "stream", 12.0, "ref"), Goal("s2", "a", "stream", 14.0, "ref"),
             Goal("r", "a", "rss_client", 30.0), Goal("n", "a", "inflight", 5.0, "ref"),
             Goal("c", "a", "stream_cpu_agent", 2.0)]
    got = {v["label"]: (v["result"], v["shown"]) for v in verdicts(rows, ["asyncio"], goals)}
    assert got == {"s": ("PASS", "13.00"), "s2": ("MISS", "13.00"), "r": ("MISS", "31.00"), "n": ("n/a", "—"),
                   "c": ("PASS", "1.90")}


def test_goals_compare_within_one_loop() -> None:
    """A pair is judged against the reference on its own loop; a node-only reference serves every loop."""
    rows = (_rows({("a", "stream"): 1300.0, ("ref", "stream"): 100.0}, "asyncio")
            + _rows({("a", "stream"): 900.0, ("ref", "stream"): 100.0}, "uvloop")
            + _rows({("node-ref", "stream"): 65.0}))
    goals = [Goal("py", "a", "stream", 12.0, "ref"), Goal("node", "a", "stream", 14.0, "node-ref")]
    got = {(v["label"], v["loop"]): (v["result"], v["shown"]) for v in verdicts(rows, ["asyncio", "uvloop"], goals)}
    assert got == {("py", "asyncio"): ("PASS", "13.00"), ("py", "uvloop"): ("MISS", "9.00"),
                   ("node", "asyncio"): ("PASS", "20.00"), ("node", "uvloop"): ("MISS", "13.85")}


def test_verdict_precision() -> None:
    """The shown value never sits on the wrong side of the goal (no "5.00× MISS" for 4.997)."""
    rows = _rows({("a", "stream"): 499.7, ("ref", "stream"): 100.0, ("a", "rss_client"): 30.004})
    goals = [Goal("s", "a", "stream", 5.0, "ref"), Goal("r", "a", "rss_client", 30.0)]
    got = {v["label"]: (v["result"], v["shown"]) for v in verdicts(rows, ["asyncio"], goals)}
    assert got == {"s": ("MISS", "4.997"), "r": ("MISS", "30.004")}
    assert format_measured(4.97, 5.0, False) == "4.97"
    assert format_measured(5.0, 5.0, True) == "5.00"


def test_busy_warnings() -> None:
    quiet = Snapshot((0.2, 0.2, 0.2), 180.0, "t0")
    assert busy_warnings(quiet, Snapshot((0.5, 0.3, 0.2), 190.0, "t1"), cpus=2) == []
    loaded = busy_warnings(quiet, Snapshot((1.5, 0.3, 0.2), 180.0, "t1"), cpus=2)
    assert len(loaded) == 1 and "load average 1.50 after the run is above 1.40" in loaded[0]
    drift = busy_warnings(quiet, Snapshot((0.2, 0.2, 0.2), 216.0, "t1"), cpus=2)
    assert len(drift) == 1 and "calibration drifted +20 %" in drift[0]


def test_add_parser_registers_bench() -> None:
    from acp_fast.cli import bench

    parser = argparse.ArgumentParser(prog="acp-fast")
    sub = parser.add_subparsers(dest="command")
    bench.add_parser(sub)
    args = parser.parse_args(["bench", "--quick", "--png", "x.png"])
    assert args.func is bench.run and args.quick and args.png == "x.png"
    args = parser.parse_args(["bench", "--agent", "my-agent --flag", "--runs", "5"])
    assert args.agent == "my-agent --flag" and args.runs == 5
    args = parser.parse_args(["bench", "--loops", "asyncio,uvloop", "--no-pin"])
    assert args.loops == "asyncio,uvloop" and args.no_pin


def test_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from acp_fast.benchmark.chart import write_png

    rows = _rows({("acp_fast/acp_fast", "stream"): 1300.0, ("pysdk/pysdk", "stream"): 100.0,
                  ("acp_fast/acp_fast", "rtt_seq"): 5.0})
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


# -- proxy chains through acp-fast conductor (acp_fast.benchmark.chains) -------------------------


def test_chain_rows(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    pytest.importorskip("tabulate")
    pytest.importorskip("tqdm")
    pytest.importorskip("acp_fast._engine_c")  # the chain rows run on the compiled twin
    from acp_fast.benchmark.chains import chain_name

    out = tmp_path / "bench.json"
    chains = [chain_name(0), chain_name(1)]
    r = _bench("--pairs", ",".join(["acp_fast/acp_fast", *chains]), "--loops", "asyncio", "--json", str(out), *TINY)
    assert r.returncode == 0, r.stderr
    assert "| proxy chain" in r.stdout and "of acp_fast/acp_fast" in r.stdout
    doc = json.loads(out.read_text())
    rows = {(row["pair"], row["workload"]): row for row in doc["rows"]}
    chain_metrics = {"stream_cpu_conductor_hop", "stream_cpu_chain", "rss_conductor", "large_rss_conductor"}
    # the direct pair has no conductor: no chain rows for it (not even empty ones)
    assert not {w for (p, w) in rows if p == "acp_fast/acp_fast"} & chain_metrics
    for k, name in enumerate(chains):
        hops = (1, 2)[k]
        for w in chain_metrics | {"stream", "stream_cpu_agent", "rtt_seq", "inflight", "large"}:
            row = rows[(name, w)]
            assert "errors" not in row and len(row["runs"]) == 1 and row["median"] > 0, (name, row)
        assert 5 < rows[(name, "rss_conductor")]["median"] < 200  # MiB: the conductor's own VmHWM
        main = next(rec for rec in doc["raw"] if rec["pair"] == name and rec["step"] == "main")
        res, argv = main["result"], main["argv"]
        assert res["hops"] == hops and res["updatesOk"] and res["textOk"]
        assert res["agentLoop"] == "asyncio"  # Testy behind the chain ran on the row's loop
        assert res["streamChildCpuUsPerHop"] == pytest.approx(res["streamChildCpuUsPerMsg"] / hops, abs=0.002)
        # agent side = conductor + proxies + agent: more than the conductor and Testy alone
        assert res["streamTreeCpuUsPerMsg"] > res["streamChildCpuUsPerMsg"]
        assert rows[(name, "stream_cpu_conductor_hop")]["median"] == res["streamChildCpuUsPerHop"]
        # the conductor, each proxy and Testy all got the loop flag inside their specs
        assert argv[argv.index("--") + 1:].count("--loop") == 1 and " ".join(argv).count("--loop asyncio") == 3 + k
        assert argv.count("acp_fast.conductor.passthrough") == 0  # inside one shell-quoted component each
        assert " ".join(argv).count("launch proxy acp_fast.conductor.passthrough --loop asyncio") == k
    goals = {g["label"]: g for g in doc["goals"]}
    g = goals["streaming through the conductor, 1 pass-through proxy, vs direct"]
    assert g["result"] in ("PASS", "MISS") and g["reference"] == "acp_fast/acp_fast"
    assert g["measured"] == pytest.approx(rows[(chains[1], "stream")]["median"]
                                          / rows[("acp_fast/acp_fast", "stream")]["median"])
    for label in ("conductor CPU per forwarded notification per hop, 1 proxy", "conductor peak RSS, 1 proxy"):
        assert goals[label]["result"] in ("PASS", "MISS"), goals[label]
    assert goals["conductor peak RSS, 3 proxies"]["result"] == "n/a"  # not measured in this run


def test_chain_pairs_listed_and_in_the_default_run(tmp_path: Path) -> None:
    from acp_fast.benchmark import pairs
    from acp_fast.benchmark.chains import CHAIN_PROXIES, ChainPair, chain_name

    r = _bench("--list", "--peers", str(tmp_path))
    assert r.returncode == 0
    for k in CHAIN_PROXIES:
        assert chain_name(k) in r.stdout and chain_name(k) in pairs.DEFAULT_PAIRS
        p = pairs.PAIRS[chain_name(k)]
        assert isinstance(p, ChainPair) and p.hops == k + 1
        (v,) = p.variants(["uvloop"])
        assert v.client_cmd[-2:] == ("--loop", "uvloop") and f"--hops {k + 1}" in " ".join(v.client_cmd)
        assert v.agent_cmd[v.agent_cmd.index("acp_fast.cli.main") + 2:][:3] == ("--loop", "uvloop", "agent")
        assert v.agent_cmd[-1].endswith("testy --loop uvloop") and len(v.agent_cmd) == 11 + k
    assert "pass-through proxies" in r.stdout


def test_client_proc_readings() -> None:
    """The client's /proc helpers: a grandchild is found, the tree's CPU includes it, VmHWM is read."""
    import time

    from acp_fast.benchmark import client

    code = "import subprocess,sys,time; p=subprocess.Popen([sys.executable,'-c','import time\\nt=time.process_time()\\nwhile time.process_time()-t<0.3: pass\\ntime.sleep(30)']); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        kids: list[int] = []
        for _ in range(200):
            kids = client._descendants(parent.pid)
            cpu = client._tree_cpu(parent.pid)
            if kids and cpu is not None and cpu[1] - cpu[0] > 250_000_000:
                break
            time.sleep(0.05)
        assert len(kids) == 1
        own, total = cpu  # type: ignore[misc]
        assert total - own > 250_000_000  # the grandchild's 0.3 s of CPU, in ns
        rss = client._peak_rss_kib(parent.pid)
        assert rss is not None and 1000 < rss < 200_000
    finally:
        for pid in client._descendants(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()
    assert client._tree_cpu(None) is None and client._peak_rss_kib(None) is None
    per = client._tree_per_msg((0, 0), (2_000_000, 5_000_000), 1000, 2)
    assert per == {"streamChildCpuUsPerMsg": 2.0, "streamTreeCpuUsPerMsg": 5.0, "streamChildCpuUsPerHop": 1.0}


def test_failing_chain_and_direct_pairs_record_errors() -> None:
    """A run that fails is recorded on the rows of its pair's metrics only: a direct pair has no
    chain rows to record it on, a chain pair's conductor rows carry it too."""
    from acp_fast.benchmark.chains import ChainPair, conductor_command
    from acp_fast.benchmark.pairs import Pair
    from acp_fast.benchmark.suite import RunConfig, run_pairs

    dead = (sys.executable, "-c", "import sys; sys.exit(3)")
    client = (sys.executable, "-m", "acp_fast.benchmark.client")
    env = {"PYTHONPATH": pythonpath(os.environ.get("PYTHONPATH"))}
    direct = Pair("fast/dead", client, dead, env=env, py_client=True)
    chain = ChainPair("fast/conductor-0p/dead", (*client, "--hops", "1"), conductor_command(0, dead), env=env,
                      py_client=True, py_agent=True, proxies=0, agent=dead, agent_takes_loop=False)
    config = RunConfig(repeat=1, n=5, m=1, inflight_m=2, large_n=1, warmup=0, timeout_s=60.0, loops=("asyncio",))
    rows, raw = run_pairs([direct, chain], config)
    assert len(raw) == 4 and all("error" in rec for rec in raw)
    by_pair: dict[str, dict[str, Measurement]] = {}
    for row in rows:
        by_pair.setdefault(row.pair, {})[row.workload] = row
    assert "rss_conductor" not in by_pair["fast/dead"] and by_pair["fast/dead"]["stream"].errors
    for w in ("stream", "stream_cpu_conductor_hop", "rss_conductor", "large_rss_conductor"):
        row = by_pair["fast/conductor-0p/dead"][w]
        assert row.errors and not row.runs and row.median is None, (w, row)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("large", [False, True], ids=["100-byte", "1-MiB"])
def test_floor_pair_reads_every_line(loop: str, large: bool) -> None:
    """The floor row's reader (``acp_fast.benchmark.floor``) gets every line of its writer
    and counts every text byte, on each loop; it prints the contract's streaming fields."""
    import json
    import subprocess
    import sys

    n = 3 if large else 500
    args = ["--n", str(n), "--warmup", "0" if large else "50", "--loop", loop, *(["--large"] if large else [])]
    out = subprocess.run([sys.executable, "-m", "acp_fast.benchmark.floor", *args], capture_output=True, text=True,
                         timeout=120, check=False)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ok"] is True, (result, out.stderr[-500:])
    assert result["n"] == n and result["textBytes"] == n * (1048576 if large else 100)
    assert result["loop"] == loop and result["notificationsPerSec"] > 0 and result["streamClientCpuUsPerMsg"] > 0


def test_floor_row_is_in_the_default_run_as_the_reference_of_its_goals() -> None:
    """The floor pair runs by default, is labelled as not a comparison, and is the reference of
    the "fraction of the floor" goals only."""
    from acp_fast.benchmark import pairs
    from acp_fast.benchmark.targets import GOALS

    assert "floor/floor" in pairs.DEFAULT_PAIRS and pairs.PAIRS["floor/floor"].ceiling
    floor_goals = {(g.workload, g.goal) for g in GOALS if g.reference == "floor/floor"}
    assert floor_goals == {("stream", 0.6), ("large", 0.7)}
    assert all(g.pair != "floor/floor" for g in GOALS)


def test_a_run_says_when_the_python_sdk_traces_every_message(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The official SDK opens a span per message when opentelemetry (or logfire) imports: the
    run's notes must say so (its rows would be slower than a default install's), and say
    nothing when neither imports."""
    from acp_fast.benchmark import machine

    monkeypatch.setattr(machine, "SDK_TRACERS", {"acp_fast_no_such_tracer.trace": "no-such-tracer"})
    assert machine.sdk_tracing_note() is None
    (tmp_path / "acp_fast_fake_tracer").mkdir()
    (tmp_path / "acp_fast_fake_tracer" / "__init__.py").write_text("")
    (tmp_path / "acp_fast_fake_tracer" / "trace.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(machine, "SDK_TRACERS", {"acp_fast_fake_tracer.trace": "fake-tracer-api",
                                                 "acp_fast_no_such_tracer": "no-such-tracer"})
    note = machine.sdk_tracing_note()
    assert note is not None and "fake-tracer-api importable" in note and "no-such-tracer" not in note
