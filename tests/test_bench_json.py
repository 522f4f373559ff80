"""The README's benchmark tables are regenerable from the raw JSON of each producer.

For ``acp-fast bench`` (acp_fast.cli.bench, acp_fast.benchmark.tables), ``python -m bench.report``
and ``scripts/bench_sdk_dropin.py``: the report rendered from the in-memory results equals, as a
string, the report rendered again from the JSON written from them (plain and markdown), and a
file that is not the producer's JSON is refused with a clear message and exit status 2. One
real ``acp-fast bench`` run (one pure pair, tiny sizes, ~2 s) checks that ``--from-json``
prints what the run printed. Synthetic results otherwise: no network, no peers, no
pytest-benchmark/orjson/msgspec (the re-rendering must not need them).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from acp_fast.benchmark.suite import Measurement, RunConfig
from acp_fast.benchmark.tables import MARKDOWN, BenchJSONError, read_json, write_json
from acp_fast.benchmark.targets import verdicts
from acp_fast.cli import bench

sys.path.insert(0, str(Path(__file__).parent / "helpers"))
from package_path import pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("tabulate")  # every table is tabulate's (the bench extra, also in the test extra)


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _no_bench_only_deps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendering from JSON must not need what only the runs need."""
    for mod in ("orjson", "msgspec", "pytest_benchmark", "psutil", "tqdm"):
        monkeypatch.setitem(sys.modules, mod, None)  # import -> ImportError


# -- acp-fast bench ---------------------------------------------------------------------------


def _m(pair: str, workload: str, median: float | None, loop: str = "asyncio", **kw: Any) -> Measurement:
    runs = kw.pop("runs", [] if median is None else [median * 0.9, median, median * 1.2])
    return Measurement(pair=pair, workload=workload, unit="u", loop=loop, runs=runs, median=median,
                       better=kw.pop("better", "higher"), **kw)


def _suite_result() -> tuple[list[Measurement], RunConfig, dict[str, Any]]:
    rows: list[Measurement] = []
    for loop, k in (("asyncio", 1.0), ("uvloop", 1.3)):
        for pair, speed in (("acp_fast/acp_fast", 240_149.3), ("pysdk/pysdk", 35_303.7),
                            ("acp_fast/acp_fast-preencoded", 364_312.0), ("acp_fast/conductor-1p/acp_fast", 204_223.9)):
            rows.append(_m(pair, "stream", speed * k, loop))
            rows.append(_m(pair, "stream_cpu_agent", 2.394 / k, loop, better="lower"))
            rows.append(_m(pair, "rss_client", 27.5, loop, better="lower"))
            rows.append(_m(pair, "rtt_seq", 7_064.0 * k, loop))
        rows.append(_m("acp_fast/conductor-1p/acp_fast", "stream_cpu_conductor_hop", 0.42 * k, loop, better="lower"))
        rows.append(_m("acp_fast/conductor-1p/acp_fast", "rss_conductor", 29.3, loop, better="lower"))
    rows.append(_m("ts/ts", "stream", 45_769.0, "node"))
    rows.append(_m("acp_fast-pure/acp_fast-pure", "large", None, errors=["r1: client exit 1: boom", "r2: timeout"]))
    rows.append(Measurement(pair="ts/acp_fast", workload="*", loop="*", unit=None,
                            skipped="skipped: ts not installed (bash scripts/install_peers.sh --ts-only)"))
    config = RunConfig(repeat=3, n=20_000, loops=("asyncio", "uvloop"), pin=(0, 1), large_repeat=2)
    meta = {"command": "acp-fast bench --runs 3 --json docs/bench/e2e.json", "elapsed_s": 209.4999, "quick": True,
            "before": {"load": (0.87, 0.5, 0.25), "calibration_ms": 112.4, "at": "2026-12-01T10:00:00+0000"},
            "after": {"load": (1.42, 0.6, 0.3), "calibration_ms": 93.0, "at": "2026-12-01T10:03:29+0000"},
            "busy": ["load average 1.42 after the run is above 1.40 (0.7 × 2 CPUs)"],
            "acp_fast_agent": {"kind": "testy", "argv": ["acp-fast", "testy"]}, "baseline": "pysdk/pysdk",
            "cpus_allowed": 2}
    return rows, config, meta


def test_rows_and_config_round_trip() -> None:
    rows, config, _ = _suite_result()
    assert [Measurement.from_json(json.loads(json.dumps(r.to_json()))) for r in rows] == rows
    cfg = json.loads(json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in config.__dict__.items()}))
    assert RunConfig.from_json(cfg) == config
    # older/newer files: missing optional keys take their defaults, unknown keys are ignored
    assert RunConfig.from_json({"repeat": 1, "pin": None, "future_knob": 7}) == RunConfig(repeat=1)
    assert Measurement.from_json({"pair": "a", "workload": "stream", "extra": 1}) == Measurement("a", "stream", None)
    with pytest.raises(ValueError, match="config.loops"):
        RunConfig.from_json({"loops": "asyncio"})
    with pytest.raises(ValueError, match="row without workload"):
        Measurement.from_json({"pair": "a"})


@pytest.mark.parametrize("markdown", [False, True])
def test_suite_tables_from_json(tmp_path: Path, markdown: bool, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    rows, config, meta = _suite_result()
    direct = bench.report_text(rows, config, meta, tablefmt=MARKDOWN if markdown else None)
    assert "| proxy chain" in direct and "raw ceiling" in direct and "!2" in direct  # every part is covered
    assert "- ts/acp_fast: skipped" in direct and "WARNING: machine busy" in direct and "(quick:" in direct
    assert ("|:--" in direct) == markdown
    path = tmp_path / "docs" / "bench" / "e2e.json"
    write_json(path, rows, [{"pair": "x", "step": "main"}], config, meta)
    _no_bench_only_deps(monkeypatch)
    assert bench.main(["--from-json", str(path), *(["--markdown"] if markdown else [])]) == 0
    out, err = capsys.readouterr()
    assert out == direct + "\n"
    assert "WARNING: the goals" not in out and err == ""


def test_suite_goals_changed_since_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows, config, meta = _suite_result()
    path = tmp_path / "e2e.json"
    write_json(path, rows, [], config, meta)
    doc = json.loads(path.read_text())
    doc["goals"][0]["goal"] = 99.0  # as if GOALS had another threshold when the run was made
    path.write_text(json.dumps(doc))
    assert bench.main(["--from-json", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(bench.report_text(rows, config, meta))
    assert out.splitlines()[-1].startswith(f"WARNING: the goals stored in {path} differ from the ones recomputed")
    assert "goal definitions changed since the run" in err


def test_suite_older_json_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file of an older version (no meta keys added since, a config key since removed)."""
    rows, config, _ = _suite_result()
    path = tmp_path / "old.json"
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in config.__dict__.items()}
    path.write_text(json.dumps({"meta": {"command": "acp-fast bench", "elapsed_s": 12.3, "quick": False},
                                "config": {**cfg, "old_knob": 1}, "rows": [r.to_json() for r in rows],
                                "raw": []}))
    assert bench.main(["--from-json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(bench.report_text(rows, config, {}).split("\n\nGoals")[0])
    assert "Run: full, 12 s, started ?" in out


@pytest.mark.parametrize("content, message", [
    ('{"benchmarks": [], "machine_info": {}}', "not an acp-fast bench JSON (the --json of a suite run): no 'config', "
                                               "'rows' (it has: 'benchmarks', 'machine_info')"),
    ("[1, 2]", "a JSON list, not an object"),
    ("not json {", "not JSON"),
    ('{"mode": "agent", "config": {}, "rows": []}', "the JSON of an --agent probe, not of a suite run"),
    ('{"config": {"repeat": "3"}, "rows": []}', "config.repeat: expected an integer, got '3'"),
    ('{"config": {}, "rows": [{"pair": "a", "workload": "stream", "runs": ["x"]}]}', "expected a number, got 'x'"),
])
def test_suite_from_json_refuses_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                            message: str) -> None:
    path = tmp_path / "other.json"
    path.write_text(content)
    assert bench.main(["--from-json", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"acp-fast bench: {path}: ") and message in err, err
    with pytest.raises(BenchJSONError):
        read_json(path)
    assert bench.main(["--from-json", str(tmp_path / "missing.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_real_run_printed_what_from_json_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One pure pair on asyncio, tiny sizes (~2 s): ``--from-json`` prints what the run printed
    (all but its last line, "JSON written to ...")."""
    pytest.importorskip("psutil")
    pytest.importorskip("tqdm")
    out = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": pythonpath(os.environ.get("PYTHONPATH"))}
    r = subprocess.run([sys.executable, "-m", "acp_fast.cli.bench", "--pairs", "acp_fast-pure/acp_fast-pure",
                        "--loops", "asyncio", "--repeat", "1", "--n", "40", "--m", "5", "--inflight", "4",
                        "--inflight-m", "12", "--large-n", "1", "--warmup", "2", "--timeout", "60", "--no-progress",
                        "--json", str(out)], check=False, capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"JSON written to {out}"
    assert bench.main(["--from-json", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == r.stdout.splitlines()[:-1]
    doc = read_json(out)
    assert doc.goals == json.loads(json.dumps(verdicts(doc.rows, doc.config.loops)))
    assert dataclasses.asdict(doc.config)["loops"] == ("asyncio",)


# -- python -m bench.report -------------------------------------------------------------------


def _pytest_benchmark_json(path: Path, run: int) -> Path:
    benchmarks = []
    for scenario in ("decode-eager", "route", "forward"):
        for impl, rate in (("c", 1.4e6), ("py", 27e3), ("orjson", 326e3), ("msgspec", 933e3)):
            lines = 2000 if impl == "py" else 50_000  # the pure twin's prefix cap: the lines note
            t = lines / (rate * (1 + 0.1 * run))
            benchmarks.append({"stats": {"median": t}, "extra_info": {
                "impl": impl, "scenario": scenario, "corpus": "mixed", "lines": lines, "bytes": lines * 343,
                "scale": 0.25, "correct": not (impl == "msgspec" and scenario == "forward")}})
    for corpus in ("mixed", "small", "large"):
        for impl in ("c", "py"):
            benchmarks.append({"stats": {"median": 0.01}, "extra_info": {
                "impl": impl, "scenario": "objects", "corpus": corpus, "lines": 100, "scale": 0.25, "correct": True,
                "objects_beyond_frame": 0.32 + run / 100, "objects_per_msg_routed": 1.5}})
    benchmarks.append({"stats": {"median": 1.0}, "extra_info": {"note": "not a row"}})
    path.write_text(json.dumps({
        "machine_info": {"python_version": "3.11.7", "cpu": {"brand_raw": "Test CPU", "count": 2, "flags": ["avx"]},
                         "acp_fast_bench": {"acp_fast": "0.9.0", "orjson": "3.10"},
                         "acp_fast_bench_load": [0.3 + run, 2.7]},
        "datetime": f"2026-12-01T10:0{run}:00", "benchmarks": benchmarks}))
    return path


@pytest.fixture
def report() -> ModuleType:
    return _load("bench_report_under_test", ROOT / "bench" / "report.py")


def test_engine_report_from_json(tmp_path: Path, report: ModuleType, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [_pytest_benchmark_json(tmp_path / f"run-{i}.json", i) for i in (1, 2, 3)]
    direct = report.render(*report.aggregate(runs))
    for part in ("| decode-eager | mixed", "✗wrong", "py on mixed: timed on the first 2,000", "| target",
                 "## Objects per lazy message", "1-min load average per run"):
        assert part in direct, part
    saved = tmp_path / "docs" / "bench" / "engine.json"
    argv = [a for p in runs for a in ("--json", str(p))] + ["--write-json", str(saved)]
    assert report.main(argv) == 0
    assert capsys.readouterr().out == direct + "\n"  # the printed report is unchanged by --write-json
    doc = json.loads(saved.read_text())
    assert doc["meta"]["command"] == "python -m bench.report " + " ".join(argv)
    assert {"date", "python", "load", "runs", "machine"} <= set(doc["meta"])
    row = next(r for r in doc["rows"] if (r["scenario"], r["corpus"], r["impl"]) == ("route", "mixed", "c"))
    assert [r["run"] for r in row["runs"]] == [0, 1, 2] and row["median"] == row["runs"][1]["lines_per_s"]
    _no_bench_only_deps(monkeypatch)
    assert report.main(["--from-json", str(saved)]) == 0
    assert capsys.readouterr().out == direct + "\n"


@pytest.mark.parametrize("content, message", [
    ('{"benchmarks": []}', "its \"kind\" is None, not 'bench.report' (a pytest-benchmark JSON: pass it with --json)"),
    ('{"kind": "bench.report", "meta": {"runs": 1}, "rows": [{"scenario": "route"}]}', "KeyError"),
    ("[]", "a JSON list, not an object"),
])
def test_engine_report_refuses_other_files(tmp_path: Path, report: ModuleType, capsys: pytest.CaptureFixture[str],
                                           content: str, message: str) -> None:
    path = tmp_path / "other.json"
    path.write_text(content)
    assert report.main(["--from-json", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"python -m bench.report: {path}: not a bench.report JSON") and message in err


# -- scripts/bench_sdk_dropin.py ---------------------------------------------------------------


@pytest.fixture
def dropin() -> ModuleType:
    return _load("bench_sdk_dropin_under_test", ROOT / "scripts" / "bench_sdk_dropin.py")


def _dropin_doc(dropin: ModuleType, *, imports_only: bool = False) -> dict[str, Any]:
    speed = {"stock": (20_253.4, 31.8, 23.2, 4_444.1, 210.0), "transport": (31_988.0, 20.1, 14.6, 8_262.0, 118.0),
             "connection": (104_712.0, 4.41, 5.12, 8_403.0, 101.0)}
    runs = {mode: [{"notificationsPerSec": n * f, "streamClientCpuUsPerMsg": c / f, "streamAgentCpuUsPerMsg": a / f,
                    "roundTripsPerSec": r * f, "p50RttUs": p / f, "updatesOk": True}
                   for f in (0.93, 1.0, 1.07, 1.01, 0.88)]
            for mode, (n, c, a, r, p) in speed.items()}
    imports = {"bare interpreter": [(0.0191, 0.0183), (0.0187, 0.0181), (0.0203, 0.0188)],
               "stock: import acp": [(0.2101, 0.2003), (0.2202, 0.2101), (0.2153, 0.2050)],
               "transport drop-in": [(0.2401, 0.2302), (0.2452, 0.2353), (0.2398, 0.2296)],
               "connection drop-in": [(0.2611, 0.2512), (0.2598, 0.2490), (0.2630, 0.2544)]}
    import_ms = {"stock: import acp": {"wall": 195.8, "cpu": 185.2}, "transport drop-in": {"wall": 220.6, "cpu": 211.5},
                 "connection drop-in": {"wall": 241.4, "cpu": 232.4}}
    kw: dict[str, Any] = {} if imports_only else {"runs": runs, "loop": "asyncio", "rounds": 5, "n": 20_000,
                                                  "m": 3_000}
    doc: dict[str, Any] = dropin.build_doc(imports=imports, import_ms=import_ms, bare_wall=0.0191, bare_cpu=0.0183,
                                           load_before=(1.9, 1.2, 1.0), load_after=(2.8, 1.5, 1.1),
                                           command="python scripts/bench_sdk_dropin.py --rounds 5", **kw)
    return doc


@pytest.mark.parametrize("imports_only", [False, True])
@pytest.mark.parametrize("markdown", [False, True])
def test_dropin_report_from_json(tmp_path: Path, dropin: ModuleType, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch, markdown: bool, imports_only: bool) -> None:
    monkeypatch.delenv("ACP_CHUNK", raising=False)
    doc = _dropin_doc(dropin, imports_only=imports_only)
    direct = dropin.render(doc, markdown)
    assert "Import time (median of 3 fresh interpreters, minus a bare start of 19.1 ms wall / 18.3 ms CPU):" in direct
    if imports_only:
        assert direct.startswith("load average 1.90 -> 2.80 on ")
    elif markdown:
        assert direct.startswith("SDK agent + SDK client, both switched, asyncio, N = 20,000 × 100 B streaming and "
                                 "3,000 round trips, medians of 5, load 1.9 → 2.8 on ")
        assert "| connection drop-in | 104,712 (5.17×) | 4.4 + 5.1 (5.77×) | 8,403 (1.89×) | 101 |" in " ".join(
            direct.split())
    else:  # the script's own format, as before --json/--from-json existed
        assert direct.startswith("\nPython SDK pairs (client.py + agent.py of peers/pysdk), loop asyncio, medians of "
                                 "5 runs, n=20000 chunks of 100 B, m=3000 sequential echo round trips; load average "
                                 "1.90 -> 2.80 on ")
        assert ("\nconnection      104712   5.17           4.41          5.12    9.53   5.77     8403   1.89        101\n"
                in direct)
        assert "\n  streaming    connection  goal >= 5.0x: 5.17x (5.77x)  met\n" in direct
    path = tmp_path / "docs" / "bench" / "sdk-dropin.json"
    dropin.write_doc(path, doc)
    _no_bench_only_deps(monkeypatch)
    assert dropin.main(["--from-json", str(path), *(["--markdown"] if markdown else [])]) == 0
    out, err = capsys.readouterr()
    assert out == direct + "\n" and err == ""


def test_dropin_older_json(tmp_path: Path, dropin: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """A file written before --from-json existed (no kind, chunk, bare times or run count):
    the same report, the chunk size shown as unknown."""
    doc = _dropin_doc(dropin)
    direct = dropin.render(doc)
    for key in ("kind", "chunk", "bareSeconds", "importRunsCount", "command", "date", "python"):
        del doc[key]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc, indent=1))
    assert dropin.main(["--from-json", str(path)]) == 0
    assert capsys.readouterr().out == direct.replace("chunks of 100 B", "chunks of ? B") + "\n"


def test_dropin_refuses_other_files(tmp_path: Path, dropin: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e2e.json"
    rows, config, meta = _suite_result()
    write_json(path, rows, [], config, meta)  # an acp-fast bench JSON is not the drop-in's
    assert dropin.main(["--from-json", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench_sdk_dropin.py: {path}: not a bench_sdk_dropin.py JSON (its --json): no 'importMs'")
    doc = _dropin_doc(dropin)
    del doc["runs"]["transport"]
    path.write_text(json.dumps(doc))
    assert dropin.main(["--from-json", str(path)]) == 2
    assert "KeyError: 'transport'" in capsys.readouterr().err


def test_dump_json_keeps_no_machine_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Result files are committed (docs/bench/): this machine's interpreter, working folder and
    home folder never reach them."""
    import json
    import os
    import sys

    from acp_fast.benchmark.tables import dump_json

    work = tmp_path / "checkout"
    (work / "peers").mkdir(parents=True)
    monkeypatch.chdir(work)
    home = os.path.expanduser("~")
    doc = {"argv": [sys.executable, str(work / "peers" / "agent.py"), "--loop", "asyncio"],
           "cmd": f"taskset -c 1 {sys.executable} -m acp_fast.cli.main testy", "cwd": str(work),
           "cache": os.path.join(home, ".cache", "x"), "n": 3, "nested": [{"p": str(work / "a")}]}
    out = tmp_path / "out.json"
    dump_json(out, doc)
    text = out.read_text(encoding="utf-8")
    for path in (sys.executable, str(work), home + os.sep):
        assert path not in text, (path, text)
    back = json.loads(text)
    assert back["argv"] == ["python", "peers/agent.py", "--loop", "asyncio"]
    assert back["cmd"] == "taskset -c 1 python -m acp_fast.cli.main testy" and back["cwd"] == "."
    assert back["cache"] == "~/.cache/x" and back["n"] == 3 and back["nested"] == [{"p": "a"}]
