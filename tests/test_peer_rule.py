"""The one rule for required peers (``tests/helpers/peer_rule.py``) and its safety net.

* :func:`peer_rule.peers_required` over every combination of ``ACP_FAST_REQUIRE_PEERS`` and
  ``CI``, including ``ACP_FAST_REQUIRE_PEERS=0`` under CI (not required) and a value that is
  neither true nor false (an error, not a silent "no");
* :func:`peer_rule.missing` / :func:`peer_rule.require_module` skip or fail accordingly, with
  the install step in the message;
* no test module parses the flag itself: every one goes through the helper;
* the hooks turn a missing-peer skip that bypassed the helper (``pytest.importorskip`` of a
  peer, in a test and at module level) into a failure when the peers are required, and leave
  every other skip alone (``pytester``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "helpers"))

import peer_rule  # noqa: E402

pytest_plugins = ("pytester",)

TESTS = Path(__file__).resolve().parent
HELPERS = TESTS / "helpers"


@pytest.mark.parametrize(
    ("flag", "ci", "required"),
    [
        # the flag decides whenever it is set, CI or not
        *[(v, ci, True) for v in ("1", "true", "TRUE", "yes", "Yes", " 1 ") for ci in (None, "true", "")],
        *[(v, ci, False) for v in ("0", "false", "False", "no", "NO", "") for ci in (None, "true", "1")],
        # unset: CI decides
        (None, None, False),
        (None, "", False),
        (None, "0", False),
        (None, "false", False),
        (None, "true", True),
        (None, "True", True),
        (None, "1", True),
        (None, "yes", True),
    ],
)
def test_peers_required_combinations(flag: str | None, ci: str | None, required: bool) -> None:
    env = {"PATH": "/usr/bin"}
    if flag is not None:
        env["ACP_FAST_REQUIRE_PEERS"] = flag
    if ci is not None:
        env["CI"] = ci
    assert peer_rule.peers_required(env) is required


@pytest.mark.parametrize("flag", ["2", "on", "required", "ture"])
def test_an_unknown_flag_value_is_an_error_not_a_no(flag: str) -> None:
    with pytest.raises(ValueError, match="ACP_FAST_REQUIRE_PEERS"):
        peer_rule.peers_required({"ACP_FAST_REQUIRE_PEERS": flag, "CI": "true"})


def test_the_default_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACP_FAST_REQUIRE_PEERS", raising=False)
    monkeypatch.setenv("CI", "true")
    assert peer_rule.peers_required() is True
    monkeypatch.setenv("ACP_FAST_REQUIRE_PEERS", "0")
    assert peer_rule.peers_required() is False


@pytest.mark.parametrize("peer", sorted(peer_rule.INSTALL))
def test_missing_skips_when_optional_and_fails_when_required(monkeypatch: pytest.MonkeyPatch, peer: str) -> None:
    monkeypatch.setenv("ACP_FAST_REQUIRE_PEERS", "0")
    with pytest.raises(pytest.skip.Exception) as skipped:
        peer_rule.missing(peer, "it is not there")
    assert str(skipped.value).startswith(peer_rule.MISSING_PEER)
    assert peer_rule.INSTALL[peer] in str(skipped.value)
    monkeypatch.setenv("ACP_FAST_REQUIRE_PEERS", "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        peer_rule.missing(peer, "it is not there")
    assert "it is not there" in str(failed.value) and peer_rule.INSTALL[peer] in str(failed.value)


def test_require_module(monkeypatch: pytest.MonkeyPatch) -> None:
    assert peer_rule.require_module("json") is sys.modules["json"]
    monkeypatch.setenv("ACP_FAST_REQUIRE_PEERS", "no")
    with pytest.raises(pytest.skip.Exception, match="no_such_peer_module"):
        peer_rule.require_module("no_such_peer_module", "acp")
    monkeypatch.setenv("ACP_FAST_REQUIRE_PEERS", "yes")
    with pytest.raises(pytest.fail.Exception, match=re.escape(peer_rule.INSTALL["mcp"])):
        peer_rule.require_module("no_such_peer_module", "mcp")


def test_no_test_module_parses_the_flag_or_importorskips_a_peer_itself() -> None:
    """One rule in one place: a second parser of ACP_FAST_REQUIRE_PEERS (or a plain
    ``importorskip`` of a peer, which ignores it) is how a skip hid a missing peer in CI."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == HELPERS / "peer_rule.py" or path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"environ(\.get\(|\[)\s*[\"']ACP_FAST_REQUIRE_PEERS", text):
            offenders.append(f"{path.relative_to(TESTS)}: reads ACP_FAST_REQUIRE_PEERS")
        if re.search(r"importorskip\(\s*[\"'](acp|mcp)[\"'.]", text):
            offenders.append(f"{path.relative_to(TESTS)}: importorskip of a peer")
        if re.search(r"environ(\.get\(|\[)\s*[\"']CI[\"']", text) and path != TESTS / "conftest.py":
            offenders.append(f"{path.relative_to(TESTS)}: reads CI")
    assert not offenders, offenders


# ---------------------------------------------------------------------------------------
# the safety net, in a separate pytest run
# ---------------------------------------------------------------------------------------

NET_CONFTEST = f"""
import sys
sys.path.insert(0, {str(HELPERS)!r})
from peer_rule import pytest_make_collect_report, pytest_runtest_makereport
"""

NET_TESTS = {
    "test_in_test.py": """
import pytest

def test_importorskip_of_a_peer():
    pytest.importorskip("acp_fast_no_such_module", reason="agent-client-protocol is not installed")

def test_hand_written_browser_skip():
    pytest.skip("needs headless Chromium")

def test_an_unrelated_skip():
    pytest.skip("only on Windows")

@pytest.mark.xfail(reason="chromium quirk", strict=False)
def test_an_xfail_naming_a_peer():
    assert False

def test_passes():
    pass
""",
    "test_module_level.py": """
import pytest
pytest.importorskip("acp_fast_no_such_module", reason="install the peers: bash scripts/install_peers.sh")

def test_never_collected():
    pass
""",
}


@pytest.mark.parametrize(("flag", "outcomes"), [
    ("1", {"passed": 1, "failed": 2, "skipped": 1, "xfailed": 1, "errors": 1}),
    ("0", {"passed": 1, "failed": 0, "skipped": 4, "xfailed": 1, "errors": 0}),
])
def test_the_safety_net_fails_missing_peer_skips_only_when_required(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, flag: str, outcomes: dict[str, int]) -> None:
    monkeypatch.setenv("ACP_FAST_REQUIRE_PEERS", flag)
    pytester.makeconftest(NET_CONFTEST)
    pytester.makepyfile(**{name[:-3]: body for name, body in NET_TESTS.items()})
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "-rA", "--continue-on-collection-errors")
    result.assert_outcomes(**outcomes)
    if flag == "1":
        result.stdout.fnmatch_lines(["*skipped for a missing peer, but the peers are required*"])
