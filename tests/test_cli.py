"""The ``acp-fast`` command line: ``--help`` everywhere, ``version``, the ``bench`` hook."""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from acp_fast.cli import main as cli

REPO = Path(__file__).resolve().parent.parent


def subcommands(parser: object) -> dict[str, object]:
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")  # type: ignore[attr-defined]
    return dict(action.choices)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(check=False, args=[sys.executable, "-m", "acp_fast.cli.main", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60, stdin=subprocess.DEVNULL)


def test_top_level_help_lists_subcommands() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: acp-fast")
    for name in ("testy", "version"):
        assert name in proc.stdout


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    names = subcommands(cli.build_parser([]))
    assert {"testy", "version"} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as exc:
            cli.main([name, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: acp-fast {name}"), out


def test_testy_help_in_a_process() -> None:
    proc = run_cli("testy", "--help")
    assert proc.returncode == 0 and "--versions" in proc.stdout and "--engine" in proc.stdout


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from acp_fast import __version__, engine as _engine

    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.strip().startswith(f"acp-fast {__version__} (engine: {_engine.IMPLEMENTATION}")
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0


def test_no_subcommand_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: acp-fast" in capsys.readouterr().out


def test_unknown_subcommand_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bench_hook_registers_an_optional_module(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fake = types.ModuleType("acp_fast.cli.bench")
    fake.__spec__ = importlib.machinery.ModuleSpec("acp_fast.cli.bench", None)
    calls = []

    def add_parser(subparsers: object) -> object:
        parser = subparsers.add_parser("bench", help="fake bench", description="fake bench")  # type: ignore[attr-defined]
        parser.set_defaults(func=lambda args: calls.append(args) or 7)
        return parser

    fake.add_parser = add_parser  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "acp_fast.cli.bench", fake)
    assert "bench" in subcommands(cli.build_parser([]))
    assert "bench" in subcommands(cli.build_parser(["bench"]))
    assert "bench" not in subcommands(cli.build_parser(["testy"]))  # not imported when not needed
    assert cli.main(["bench"]) == 7 and len(calls) == 1
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "fake bench" in capsys.readouterr().out


def test_console_script() -> None:
    """``acp-fast`` (declared in pyproject as ``acp_fast.cli.main:main``) answers ``--help``.

    When the package is not installed (no script on PATH), the declared entry point is
    called the way the generated script would call it.
    """
    text = (REPO / "pyproject.toml").read_text()
    assert 'acp-fast = "acp_fast.cli.main:main"' in text
    exe = shutil.which("acp-fast")
    argv = [exe, "--help"] if exe else [
        sys.executable, "-c", "import sys; from acp_fast.cli.main import main; sys.exit(main(['--help']))"]
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, cwd=REPO, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "testy" in proc.stdout


def test_testy_stream_choices_are_testys_modes() -> None:
    from acp_fast.cli import testy as cli_testy
    from acp_fast.testy import STREAM_MODES

    assert cli_testy.STREAM_CHOICES == STREAM_MODES


def test_building_the_parser_for_the_conductor_imports_neither_testy_nor_the_builder_api() -> None:
    # the conductor process is measured for its peak RSS: its start-up loads only what it runs
    code = ("import sys; from acp_fast.cli import main; main.build_parser(['conductor', 'agent', 'x']); "
            "print(sorted(m for m in sys.modules if m.startswith(('acp_fast.testy', 'acp_fast.roles'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
