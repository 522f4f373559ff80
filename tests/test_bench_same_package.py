"""The benchmark measures the ``acp_fast`` it names (issue 22).

Every process the benchmark starts (the client, Testy, the conductor and its proxies, the SDK
peers on the drop-ins; the scripts' and ``bench/``'s children) imports the harness's
``acp_fast`` whatever the working directory, and reports the engine twin and loop it runs; a
row whose processes disagree with its label is an error, never a number.

The trap: a folder holding a copy of the package that can only run the pure twin (its
extensions left out, ``NO_EXTENSIONS`` forced, so that an editable install's finder cannot
lend it the compiled ones either). ``python -m`` from there imports the copy; the benchmark
run from there must not. Tiny sizes: each real run takes a few seconds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acp_fast import IMPLEMENTATION
from acp_fast.benchmark import registry
from acp_fast.benchmark.launch import REPORT_ENV, read_reports
from acp_fast.benchmark.runtime import (
    PACKAGE_DIR,
    Process,
    RuntimeMismatch,
    check,
    child_env,
    launch,
    module_command,
    summary,
)
from acp_fast.conductor.spec import SAFE_RUN_MODULE, same_acp_fast

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--loops", "asyncio", "--repeat", "1", "--n", "40", "--m", "5", "--inflight", "4", "--inflight-m", "12",
        "--large-n", "1", "--warmup", "2", "--timeout", "60", "--no-progress"]
COMPILED = importlib.util.find_spec("acp_fast._engine_c") is not None and IMPLEMENTATION == "c"


def _bench_extra() -> None:
    for module in ("psutil", "tabulate", "tqdm"):
        pytest.importorskip(module)


@pytest.fixture
def trap(tmp_path: Path) -> Path:
    """A folder holding a pure-only copy of the package (``folder/acp_fast``)."""
    folder = tmp_path / "checkout"
    shutil.copytree(PACKAGE_DIR, folder / "acp_fast",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    (folder / "acp_fast" / "_compat.py").write_text(
        '"""A pure-only copy."""\n__all__ = ["NO_EXTENSIONS"]\nNO_EXTENSIONS = True\n', encoding="utf-8")
    return folder


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ACP_FAST_LOOP"}
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    env.update(extra)
    return env


def _acp_fast_dir_seen_from(folder: Path, argv: list[str], env: dict[str, str]) -> str:
    """The ``acp_fast`` folder a process started in ``folder`` reports (through the launcher)."""
    report = folder / "report.jsonl"
    r = subprocess.run(argv, cwd=folder, env={**env, REPORT_ENV: str(report)}, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    (start,) = [rec for rec in read_reports(report) if rec["event"] == "start"]
    report.unlink()
    return str(start["acp_fast"])


def test_the_trap_is_armed(trap: Path) -> None:
    """Plain ``python -m`` from the folder imports the copy (pure): what the guard is for."""
    r = subprocess.run([sys.executable, "-m", "acp_fast.cli.main", "version"], cwd=trap, env=_env(),
                       capture_output=True, text=True, timeout=60, check=True)
    assert "engine: py" in r.stdout
    plain = [sys.executable, "-m", "acp_fast.benchmark.launch", "x", "acp_fast.cli.main", "version"]
    assert _acp_fast_dir_seen_from(trap, plain, _env()) == os.path.realpath(trap / "acp_fast")


def test_module_command_imports_the_harness_package(trap: Path) -> None:
    """``-P`` (Python ≥ 3.11) and the 3.10 trampoline, run here on this interpreter: both import
    the harness's package from the trap folder."""
    env = _env(**child_env())
    argv = list(launch("x", "acp_fast.cli.main", "version"))
    assert _acp_fast_dir_seen_from(trap, argv, env) == PACKAGE_DIR
    trampoline = [sys.executable, "-c", SAFE_RUN_MODULE, "acp_fast.benchmark.launch", "x", "acp_fast.cli.main",
                  "version"]
    assert _acp_fast_dir_seen_from(trap, trampoline, env) == PACKAGE_DIR


def test_children_follow_a_harness_that_imported_another_package(trap: Path) -> None:
    """A harness whose acp_fast is not where the interpreter finds it by itself (here: the working
    directory's, as ``python -m`` from a bare checkout gets it): its children get that folder first
    on ``PYTHONPATH`` (:func:`child_env`) and import the same package, not the installed one."""
    report = trap / "report.jsonl"
    code = ("import os, subprocess; from acp_fast.benchmark.runtime import launch, child_env; "
            "subprocess.run(launch('x', 'acp_fast.cli.main', 'version'), env={**os.environ, **child_env()}, "
            "check=True, stdout=subprocess.DEVNULL)")
    subprocess.run([sys.executable, "-c", code], cwd=trap, env=_env(**{REPORT_ENV: str(report)}), check=True,
                   timeout=60)
    (start,) = [rec for rec in read_reports(report) if rec["event"] == "start"]
    assert start["acp_fast"] == os.path.realpath(trap / "acp_fast") and start["engine"] == "py"


def test_same_acp_fast_rewrites_only_acp_fast_modules_on_this_interpreter() -> None:
    py = sys.executable
    argv, env = same_acp_fast([py, "-m", "acp_fast.cli.main", "testy"], {"PYTHONPATH": "/elsewhere"})
    if sys.version_info >= (3, 11):
        assert argv == [py, "-P", "-m", "acp_fast.cli.main", "testy"]
    else:  # pragma: no cover - Python 3.10
        assert argv == [py, "-c", SAFE_RUN_MODULE, "acp_fast.cli.main", "testy"]
    parent = os.path.dirname(PACKAGE_DIR)
    assert env.get("PYTHONPATH", "/elsewhere").split(os.pathsep)[-1] == "/elsewhere"
    if "PYTHONPATH" in env:  # a source tree or a PYTHONPATH: that folder first
        assert env["PYTHONPATH"].split(os.pathsep)[0] == parent
    for untouched in ([py, "script.py"], [py, "-m", "json.tool"], [py, "-c", "pass"], ["node", "agent.mjs"],
                      ["/no/such/python", "-m", "acp_fast.cli.main"], [py, "-I", "-m", "acp_fast"]):
        assert same_acp_fast(untouched)[0] == untouched, untouched
    assert same_acp_fast([py, "-u", "-X", "dev", "-macp_fast.cli.main"])[0][:2] == (
        [py, "-P"] if sys.version_info >= (3, 11) else [py, "-u"])


def test_conductor_components_import_the_conductor_package(trap: Path) -> None:
    """A component spec ``<this python> -m acp_fast…`` (no ``-P``) started by a conductor run from
    the trap folder imports the conductor's acp_fast (acp_fast.conductor.spec)."""
    py = sys.executable
    proxy = f"{py} -m acp_fast.benchmark.launch proxy acp_fast.conductor.passthrough --loop asyncio"
    agent = f"{py} -m acp_fast.benchmark.launch agent acp_fast.cli.main testy --loop asyncio"
    conductor = [*launch("conductor", "acp_fast.cli.main", "conductor", "--loop", "asyncio", "agent", proxy, agent)]
    client = [*launch("client", "acp_fast.benchmark.client"), "--loop", "asyncio", "--n", "20", "--m", "2", "--",
              *conductor]
    report = trap / "report.jsonl"
    r = subprocess.run(client, cwd=trap, env=_env(**child_env(), **{REPORT_ENV: str(report)}), capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.splitlines()[-1])
    assert result["updatesOk"] and result["agentEngine"] == IMPLEMENTATION
    ran = check(read_reports(report), [Process("client"), Process("conductor"), Process("proxy"), Process("agent")],
                engine=IMPLEMENTATION, loop="asyncio", result=result)
    assert [p["acp_fast"] for p in ran] == [PACKAGE_DIR] * 4
    assert summary(ran) == f"{IMPLEMENTATION} ×4"


def test_bench_from_a_folder_with_a_pure_only_copy(trap: Path) -> None:
    """``acp-fast bench`` run from the trap folder: every row ran the harness's package and the
    twin of its label (compiled where the harness has it), reported by each process."""
    _bench_extra()
    pairs = ["acp_fast/acp_fast", "acp_fast/conductor-1p/acp_fast"] if COMPILED else ["acp_fast-pure/acp_fast-pure"]
    if COMPILED and importlib.util.find_spec("acp") is not None:
        pairs.append("pysdk-fast/pysdk-fast")  # the SDK peers on the drop-in: launched as scripts
    script = shutil.which("acp-fast", path=os.path.dirname(sys.executable))
    harness = [script] if script else list(module_command("acp_fast.cli.main"))
    out = trap / "bench.json"
    r = subprocess.run([*harness, "bench", "--pairs", ",".join(pairs), "--peers", str(ROOT / "peers"), "--json",
                        str(out), *TINY], cwd=trap, env=_env(), capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| ERROR" not in r.stdout and "ERROR, no figures" not in r.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    want = "c" if COMPILED else "py"
    ran = {row["pair"]: row.get("ran") for row in doc["rows"]}
    assert ran == {p: f"{want} ×{4 if 'conductor' in p else 2}" for p in pairs}
    assert all("invalid" not in row and "errors" not in row for row in doc["rows"])
    for rec in doc["raw"]:
        assert {p["engine"] for p in rec["processes"]} == {want}, rec["processes"]
        assert {p["loop"] for p in rec["processes"]} == {"asyncio"}
        # the harness's package, not the copy (which the JSON would show relative: "acp_fast")
        assert all(p["acp_fast"] != "acp_fast" for p in rec["processes"])
    assert f"| {want} ×2 " in r.stdout and "ran: the engine twin each process of the row reported itself" in r.stdout


def test_a_row_whose_processes_disagree_is_an_error_not_a_number() -> None:
    """A pair labelled compiled whose processes run the pure twin: no figures, the row says why,
    the next repetitions are not run, the goals are n/a."""
    _bench_extra()
    from acp_fast.benchmark.pairs import Pair
    from acp_fast.benchmark.suite import RunConfig, run_pairs
    from acp_fast.benchmark.tables import results_table

    client = launch("client", "acp_fast.benchmark.client")
    agent = launch("agent", "acp_fast.cli.main", "testy")
    lying = Pair("fast/fast-lying", client, agent, env=child_env(ACP_FAST_NO_EXTENSIONS="1"), py_client=True,
                 py_agent=True, engine="c", processes=(Process("client"), Process("agent")))
    config = RunConfig(repeat=2, n=20, m=2, inflight_m=4, large_n=1, warmup=0, timeout_s=60.0, loops=("asyncio",))
    rows, raw = run_pairs([lying], config)
    assert len(raw) == 1 and raw[0]["mismatch"] is True  # stopped at the first disagreement
    assert "client (pid" in raw[0]["error"] and "ran the pure (py) twin, the row is compiled (c)" in raw[0]["error"]
    for row in rows:
        assert row.invalid and not row.runs and row.median is None and row.ran == "py ×2", row
    table = results_table(rows, config)
    assert re.search(r"\| fast/fast-lying\s+\| asyncio\s+\| py ×2\s+\|\s+ERROR\s+\|", table), table
    assert "- fast/fast-lying [asyncio]: ERROR, no figures: the processes disagree with the row" in table


def test_a_process_on_another_loop_is_an_error() -> None:
    """The client left on its default loop (uvloop) in an asyncio row: reported by its own loop line."""
    _bench_extra()
    pytest.importorskip("uvloop")
    from acp_fast.benchmark.pairs import Pair
    from acp_fast.benchmark.suite import RunConfig, run_pairs

    pair = Pair("fast/fast-loop", launch("client", "acp_fast.benchmark.client"),
                launch("agent", "acp_fast.cli.main", "testy"), env=child_env(ACP_FAST_LOOP="uvloop"),
                py_agent=True, processes=(Process("client"), Process("agent")))
    config = RunConfig(repeat=1, n=10, m=1, inflight_m=2, large_n=1, warmup=0, timeout_s=60.0, loops=("asyncio",))
    rows, raw = run_pairs([pair], config)
    assert "client ran uvloop, the row's loop is asyncio" in raw[0]["error"]
    assert all(row.invalid and row.median is None for row in rows)


def test_check_names_every_disagreement() -> None:
    py = sys.executable
    start = {"event": "start", "engine": "c", "acp_fast": PACKAGE_DIR, "python": py}
    ok = [{**start, "role": "client", "pid": 1}, {"event": "loop", "role": "client", "pid": 1, "loop": "asyncio"},
          {**start, "role": "agent", "pid": 2}, {"event": "loop", "role": "agent", "pid": 2, "loop": "asyncio"}]
    both = [Process("client"), Process("agent")]
    ran = check(ok, both, engine="c", loop="asyncio", result={"engine": "c", "agentEngine": "c"})
    assert summary(ran) == "c ×2" and [p["pid"] for p in ran] == [1, 2]
    cases = {
        "no report from 1 of 1 agent process(es)": (ok[:2], both, "c"),
        "1 unexpected agent process(es) reported": (ok, [Process("client")], "c"),
        "client (pid 1), agent (pid 2) ran the compiled (c) twin, the row is pure (py)": (ok, both, "py"),
        "imported acp_fast from /elsewhere/acp_fast": ([{**ok[0], "acp_fast": "/elsewhere/acp_fast"}, *ok[1:]],
                                                       both, "c"),
        "ran on /other/python, the harness on": ([*ok[:2], {**ok[2], "python": "/other/python"}, ok[3]], both, "c"),
        "agent reported no event loop": (ok[:3], both, "c"),
        "the processes ran different twins: c, py": ([*ok[:2], {**ok[2], "engine": "py"}, ok[3]], both, None),
    }
    for message, (reports, processes, engine) in cases.items():
        with pytest.raises(RuntimeMismatch, match=message.replace("(", r"\(").replace(")", r"\)")):
            check(reports, processes, engine=engine, loop="asyncio")
    with pytest.raises(RuntimeMismatch, match="agent reported agentEngine 'py' but its process ran 'c'"):
        check(ok, both, engine="c", loop="asyncio", result={"agentEngine": "py"})
    # SDK peers report their loops in the client's line; node peers have none; an --acp-agent has its stats
    sdk = check([], [Process("client", "sdk"), Process("agent", "node")], engine=None, loop="uvloop",
                result={"sdk": "pysdk", "loop": "uvloop"})
    assert summary(sdk) == "sdk + node" and sdk[0]["loop"] == "uvloop" and sdk[1]["loop"] == "node"
    with pytest.raises(RuntimeMismatch, match="client ran asyncio, the row's loop is uvloop"):
        check([], [Process("client", "sdk")], engine=None, loop="uvloop", result={"loop": "asyncio"})
    other = check(ok[:2], [Process("client"), Process("agent", "other")], engine="c", loop="asyncio",
                  result={"agentEngine": "c", "agentLoop": "asyncio"})
    assert summary(other) == "c ×2"
    with pytest.raises(RuntimeMismatch, match="agent reported the pure \\(py\\) twin"):
        check(ok[:2], [Process("client"), Process("agent", "other")], engine="c", loop="asyncio",
              result={"agentEngine": "py"})


def test_peers_found_or_the_message_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel user's view: no peers' folder beside the package; found in the working directory
    when it holds them (a checkout's root); else the skip says what to install and where."""
    monkeypatch.setattr(registry, "REPO_ROOT", tmp_path / "site-packages")
    monkeypatch.delenv("ACP_FAST_PEERS", raising=False)
    checkout = tmp_path / "checkout"
    (checkout / "peers" / "pysdk").mkdir(parents=True)
    (checkout / "peers" / "pysdk" / "client.py").write_text("", encoding="utf-8")
    monkeypatch.chdir(checkout)
    assert registry.find_peers() == ((checkout / "peers").resolve(), "the working directory")
    monkeypatch.chdir(tmp_path)
    folder, where = registry.find_peers()
    assert where is None
    monkeypatch.setattr(registry, "PEERS", folder)
    monkeypatch.setattr(registry, "PEERS_FROM", where)
    monkeypatch.setattr(registry.shutil, "which", lambda name: "/usr/bin/node")

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(registry.importlib.metadata, "version", not_installed)
    pysdk = registry.PYSDK_PEER.missing() or ""
    assert "not in the wheel" in pysdk and "with --peers DIR" in pysdk
    assert "pip install agent-client-protocol==0.12.1" in pysdk and sys.executable in pysdk
    assert "install_peers.sh" not in pysdk or (ROOT / "scripts" / "install_peers.sh").is_file()
    ts = registry.TS_PEER.missing() or ""
    assert "not in the wheel" in ts and "--peers DIR" in ts
    (tmp_path / "mine" / "ts").mkdir(parents=True)
    (tmp_path / "mine" / "ts" / "client.mjs").write_text("", encoding="utf-8")
    registry.set_peers_dir(tmp_path / "mine")
    ts = registry.TS_PEER.missing() or ""
    assert f"run `npm ci` (or `npm install`) in {(tmp_path / 'mine' / 'ts').resolve()}" in ts
    pysdk = registry.PYSDK_PEER.missing() or ""
    assert f"no {(tmp_path / 'mine' / 'pysdk' / 'client.py').resolve()}" in pysdk and "from --peers)" in pysdk


def test_scripts_and_bench_children_import_the_harness_package(trap: Path) -> None:
    """``scripts/bench_proxy_passthrough.py`` and ``python -m bench.conductor_cpu`` run from the
    trap folder: their children report the harness's package and twin (they stop otherwise)."""
    if not (ROOT / "scripts" / "bench_proxy_passthrough.py").is_file() or not (ROOT / "bench").is_dir():
        pytest.skip("the source tree's scripts and bench/ are not here")
    engine = "c" if COMPILED else "py"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_proxy_passthrough.py"), "-n", "300",
                        "--repeat", "1", "--loop", "asyncio", "--kind", "s->p notif", "--engine", engine],
                       cwd=trap, env=_env(), capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and "proxy CPU µs/msg median" in r.stdout, r.stdout + r.stderr
    bench_env = _env(PYTHONPATH=os.pathsep.join(p for p in (pythonpath(os.environ.get("PYTHONPATH")), str(ROOT)) if p))
    safe_m = [sys.executable, "-P", "-m"] if sys.version_info >= (3, 11) else [sys.executable, "-c", SAFE_RUN_MODULE]
    r = subprocess.run([*safe_m, "bench.conductor_cpu", "--n", "500", "--proxies", "0", "--runs", "1",
                        "--loop", "asyncio", "--engine", engine], cwd=trap, env=bench_env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"acp_fast from {PACKAGE_DIR}" in r.stdout and f"ran (conductor + agent): {engine} ×2" in r.stdout
