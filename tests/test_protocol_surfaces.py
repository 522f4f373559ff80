"""Per-version wire surfaces: generated tables, read gate, write guard, types.

Rules under test come from the ACP v1/v2 schemas (protocol notes §7, §11): one
discriminator table drives both directions; received unknown / other-version
variants pass through untouched; locally built variants the negotiated version
lacks are refused by name and version; relays can opt out explicitly.

The regeneration test needs the ACP schemas (``ACP_FAST_SCHEMA_DIR`` or
``../shared/acp-schema`` beside the repository) and skips without them.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_fast.protocol import _surface_gen as gen
from acp_fast.protocol.errors import WireSurfaceError
from acp_fast.protocol.surface import (
    KNOWN,
    MALFORMED,
    OTHER_VERSION,
    UNKNOWN,
    WireSurface,
    is_extension_method,
    session_update_versions,
)

REPO = Path(__file__).resolve().parent.parent
PROTOCOL_PKG = Path(gen.__file__).resolve().parent  # acp_fast/protocol of the package under test


@pytest.fixture(scope="module")
def v1() -> WireSurface:
    return WireSurface.for_version(1)


@pytest.fixture(scope="module")
def v2() -> WireSurface:
    return WireSurface.for_version(2)




def _v2_diff_update() -> dict:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call-1",
        "content": [
            {"type": "diff", "changes": [{"operation": "modify", "path": "/src/a.py"}]},
        ],
    }


def _v1_diff_update() -> dict:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call-1",
        "content": [
            {"type": "diff", "path": "/src/a.py", "oldText": "a", "newText": "b"}
        ],
    }


# ---------------------------------------------------------------------------
# Tables (protocol notes §7.1-7.3, Appendix C)
# ---------------------------------------------------------------------------

ONLY_V1 = {
    "authenticate",
    "logout",
    "session/load",
    "session/set_mode",
    "fs/read_text_file",
    "fs/write_text_file",
    "terminal/create",
    "terminal/output",
    "terminal/release",
    "terminal/wait_for_exit",
    "terminal/kill",
}
ONLY_V2 = {"auth/login", "auth/logout", "tool_call/cancel", "terminal/cancel"}
BOTH = {
    "initialize",
    "session/new",
    "session/resume",
    "session/list",
    "session/close",
    "session/delete",
    "session/set_config_option",
    "session/prompt",
    "session/cancel",
    "session/request_permission",
    "session/update",
    "elicitation/create",
    "elicitation/complete",
    "$/cancel_request",
}


def test_stable_methods_per_version_match_protocol_notes() -> None:
    s1 = WireSurface.for_version(1, unstable=False)
    s2 = WireSurface.for_version(2, unstable=False)
    assert s1.methods == ONLY_V1 | BOTH
    assert s2.methods == ONLY_V2 | BOTH


@pytest.mark.seed("S003-10")
def test_unstable_methods_are_in_both_versions_only_when_unstable(v1, v2) -> None:
    unstable = {
        "auth/status",
        "auth/status_update",
        "session/status",
        "session/archive",
        "session/unarchive",
        "session/set_title",
        "session/fork",
        "providers/list",
        "providers/set",
        "providers/disable",
        "mcp/message",
        "proxy/initialize",
        "proxy/successor",
    }
    for surface in (v1, v2):
        assert unstable <= surface.methods
        assert {surface.method_info(m).tier for m in unstable} == {"unstable"}
    assert not unstable & WireSurface.for_version(2, unstable=False).methods


def test_method_info_carries_side_kind_and_types(v1, v2) -> None:
    prompt = v2.method_info("session/prompt")
    assert (prompt.kind, prompt.side, prompt.tier) == ("request", "agent", "stable")
    assert (prompt.params_type, prompt.result_type) == (
        "PromptRequest",
        "PromptResponse",
    )
    update = v1.method_info("session/update")
    assert (update.kind, update.side, update.result_type) == (
        "notification",
        "client",
        None,
    )
    assert v1.method_info("session/update").params_type == "SessionNotification"
    assert v2.method_info("session/update").params_type == "UpdateSessionNotification"
    assert v2.method_info("session/cancel").params_type == "CancelSessionNotification"
    assert v1.method_info("$/cancel_request").side == "protocol"
    assert v2.method_info("proxy/successor").side == "proxy"


def test_method_with_request_and_notification_kinds(v1) -> None:
    assert v1.method_info("mcp/message").kind == "request"
    assert v1.method_info("mcp/message", "notification").side == "agent"
    assert v1.method_info("mcp/message", "request").side == "client"
    assert v1.has_method("proxy/successor", "notification")
    assert not v1.has_method("session/cancel", "request")
    assert v1.method_info("nope") is None


V1_STABLE_UPDATES = {
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
    "notice",
    "compaction_update",
    "compaction_summary_chunk",
}
V2_ADDS = {
    "user_message",
    "agent_message",
    "agent_thought",
    "state_update",
    "tool_call_content_chunk",
    "terminal_update",
    "terminal_output_chunk",
    "plan_update",
}
V2_REMOVES = {"tool_call", "plan", "current_mode_update"}


@pytest.mark.seed("S003-02")
def test_stable_session_updates_neither_version_is_a_superset() -> None:
    s1 = WireSurface.for_version(1, unstable=False).session_update_kinds
    s2 = WireSurface.for_version(2, unstable=False).session_update_kinds
    assert s1 == V1_STABLE_UPDATES
    assert s2 == (V1_STABLE_UPDATES - V2_REMOVES) | V2_ADDS
    assert s2 - s1 == V2_ADDS and s1 - s2 == V2_REMOVES


@pytest.mark.seed("S000-101")
def test_unstable_session_updates(v1, v2) -> None:
    extra = {
        "plan_removed",
        "subagent_update",
        "session_message",
        "session_message_chunk",
    }
    assert v1.session_update_kinds == V1_STABLE_UPDATES | extra | {"plan_update"}
    assert (
        v2.session_update_kinds
        - WireSurface.for_version(2, unstable=False).session_update_kinds
        == extra
    )
    assert session_update_versions("state_update") == (2,)
    assert session_update_versions("tool_call") == (1,)
    assert session_update_versions("plan_update") == (1, 2)
    assert session_update_versions("_vendor") == ()


@pytest.mark.seed("S000-100")
def test_state_update_discriminator_and_stop_reasons(v1, v2) -> None:
    stable2 = WireSurface.for_version(2, unstable=False)
    assert stable2.state_update_states == {"idle", "running", "requires_action"}
    assert v2.state_update_states == {"idle", "running", "requires_action", "unknown"}
    assert v1.state_update_states == frozenset()  # no state_update in v1 at all
    assert stable2.idle_stop_reasons == {
        "end_turn",
        "max_tokens",
        "max_turn_requests",
        "refusal",
        "cancelled",
        "error",
    }
    assert v1.idle_stop_reasons == frozenset()
    assert v1.prompt_stop_reasons == stable2.idle_stop_reasons - {"error"}
    assert v2.prompt_stop_reasons == frozenset()


def test_content_discriminators_and_the_two_diff_shapes(v1, v2) -> None:
    blocks = {"text", "image", "audio", "resource_link", "resource"}
    assert v1.content_block_types == v2.content_block_types == blocks
    assert (
        v1.tool_call_content_types
        == v2.tool_call_content_types
        == {"content", "diff", "terminal"}
    )
    shapes = {row[0]: row[3] for row in gen.TOOL_CALL_CONTENT["diff"]}
    assert shapes == {1: ("path", "newText"), 2: ("changes",)}
    assert dict(gen.OPEN_UNIONS["SessionUpdate"]) == {1: False, 2: True}
    assert dict(gen.OPEN_UNIONS["ToolCallContent"]) == {1: False, 2: True}


@pytest.mark.seed("S003-01")
def test_surfaces_are_cached_per_version_and_reject_unknown_versions() -> None:
    assert WireSurface.for_version(1) is WireSurface.for_version(1)
    assert WireSurface.for_version(2) is not WireSurface.for_version(2, unstable=False)
    with pytest.raises(ValueError, match="unsupported ACP protocol version 3"):
        WireSurface.for_version(3)


# ---------------------------------------------------------------------------
# Read gate
# ---------------------------------------------------------------------------


def test_read_gate_known_variant_keeps_payload_identity(v1, v2) -> None:
    update = {
        "sessionUpdate": "agent_message_chunk",
        "messageId": "m1",
        "content": {"type": "text", "text": "hi"},
    }
    for surface in (v1, v2):
        view = surface.classify_session_update(update)
        assert view.known and view.status == KNOWN
        assert view.payload is update
        assert view.type_name == "ContentChunk" and view.tier == "stable"
        assert view.defined_in == (1, 2)


@pytest.mark.seed("S000-103", "S003-05")
@pytest.mark.parametrize("kind", ["future_update", "_vendor_update"])
def test_read_gate_unknown_variant_is_untyped_passthrough(v1, v2, kind) -> None:
    update = {"sessionUpdate": kind, "x": [1, {"y": None}]}
    snapshot = copy.deepcopy(update)
    for surface in (v1, v2):
        view = surface.classify_session_update(update)
        assert (view.status, view.known, view.kind) == (UNKNOWN, False, kind)
        assert view.payload is update and update == snapshot
        assert view.type_name is None and view.defined_in == ()


@pytest.mark.seed("S003-03")
def test_read_gate_other_version_variant_is_flagged_not_bound(v1, v2) -> None:
    state = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    view = v1.classify_session_update(state)
    assert (view.status, view.defined_in, view.type_name) == (OTHER_VERSION, (2,), None)
    assert view.payload is state
    assert (
        view.detail
        == "session update 'state_update' is not defined in ACP v1 (it is defined in ACP v2)"
    )

    tool_call = {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "t"}
    view = v2.classify_session_update(tool_call)
    assert (view.status, view.defined_in, view.type_name) == (OTHER_VERSION, (1,), None)
    assert view.payload is tool_call


@pytest.mark.seed("S003-08")
def test_read_gate_v2_diff_on_v1_connection_is_passthrough(v1) -> None:
    update = _v2_diff_update()
    snapshot = copy.deepcopy(update)
    view = v1.classify_session_update(update)
    assert view.status == OTHER_VERSION and not view.known
    assert view.defined_in == (2,)
    assert view.type_name is None
    assert view.payload is update and update == snapshot
    assert view.detail == (
        "session update 'tool_call_update': content[0]: tool call content 'diff' has the "
        "ACP v2 shape, not the ACP v1 shape (missing 'path', 'newText')"
    )


@pytest.mark.seed("S003-08")
def test_read_gate_v1_diff_on_v2_connection_is_passthrough(v2) -> None:
    view = v2.classify_session_update(_v1_diff_update())
    assert (view.status, view.defined_in) == (OTHER_VERSION, (1,))
    chunk = {
        "sessionUpdate": "tool_call_content_chunk",
        "toolCallId": "c",
        "content": _v1_diff_update()["content"][0],
    }
    assert v2.classify_session_update(chunk).status == OTHER_VERSION


def test_read_gate_each_diff_shape_is_known_on_its_own_version(v1, v2) -> None:
    assert v1.classify_session_update(_v1_diff_update()).known
    assert v2.classify_session_update(_v2_diff_update()).known


def test_read_gate_v1_chunk_without_message_id_on_v2(v2) -> None:
    update = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "hi"},
    }
    view = v2.classify_session_update(update)
    assert (view.status, view.defined_in) == (OTHER_VERSION, (1,))
    assert "missing 'messageId'" in view.detail


@pytest.mark.seed("S003-04")
def test_read_gate_state_update_inner_discriminator(v2) -> None:
    idle = {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "error",
        "error": {"code": -32000, "message": "auth"},
    }
    assert v2.classify_session_update(idle).known
    assert v2.classify_session_update(
        {"sessionUpdate": "state_update", "state": "running"}
    ).known
    future = {"sessionUpdate": "state_update", "state": "paused"}
    view = v2.classify_session_update(future)
    assert (view.status, view.payload) == (UNKNOWN, future)
    assert view.detail == "state_update state 'paused' is not defined in ACP v2"
    stable = WireSurface.for_version(2, unstable=False)
    assert v2.classify_session_update(
        {"sessionUpdate": "state_update", "state": "unknown"}
    ).known
    assert (
        stable.classify_session_update(
            {"sessionUpdate": "state_update", "state": "unknown"}
        ).status
        == UNKNOWN
    )


@pytest.mark.seed("S000-102")
def test_read_gate_malformed_known_discriminator_is_not_unknown(v1, v2) -> None:
    assert (
        v2.classify_session_update({"sessionUpdate": "state_update"}).status
        == MALFORMED
    )
    assert (
        v2.classify_session_update(
            {"sessionUpdate": "state_update", "state": "idle", "stopReason": 3}
        ).status
        == MALFORMED
    )
    assert (
        v1.classify_session_update({"sessionUpdate": "tool_call_update"}).status
        == MALFORMED
    )
    assert v1.classify_session_update({"sessionUpdate": 7}).status == MALFORMED
    assert v1.classify_session_update(["not", "an", "object"]).status == MALFORMED
    bad_item = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "content": [{"path": "/a"}],
    }
    assert v1.classify_session_update(bad_item).status == MALFORMED


def test_read_gate_nested_unknown_content_closed_v1_open_v2(v1, v2) -> None:
    update = {
        "sessionUpdate": "user_message_chunk",
        "messageId": "m",
        "content": {"type": "hologram"},
    }
    view = v1.classify_session_update(update)
    assert view.status == UNKNOWN and view.payload is update
    assert "content block 'hologram' is not defined in ACP v1" in view.detail
    assert v2.classify_session_update(update).known  # v2 ContentBlock is an open union


@pytest.mark.seed("S003-09")
def test_read_gate_checks_content_nested_in_tool_call_content(v1) -> None:
    update = {
        "sessionUpdate": "tool_call",
        "toolCallId": "c",
        "title": "t",
        "content": [{"type": "content", "content": {"type": "hologram"}}],
    }
    assert v1.classify_session_update(update).status == UNKNOWN


@given(
    st.dictionaries(
        st.sampled_from(
            ["sessionUpdate", "state", "content", "toolCallId", "messageId", "x"]
        ),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.sampled_from(
                ["idle", "diff", "text", "tool_call_update", "state_update"]
            ),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["type", "path", "changes", "newText"]),
                    inner,
                    max_size=3,
                )
            ),
            max_leaves=8,
        ),
    )
)
def test_read_gate_never_raises_or_mutates(update) -> None:
    snapshot = copy.deepcopy(update)
    for version in (1, 2):
        view = WireSurface.for_version(version).classify_session_update(update)
        assert view.payload is update
        assert view.status in (KNOWN, UNKNOWN, OTHER_VERSION, MALFORMED)
        assert (view.detail == "") == view.known
    assert update == snapshot


# ---------------------------------------------------------------------------
# Write guard
# ---------------------------------------------------------------------------


@pytest.mark.seed("S003-06")
def test_write_guard_refuses_other_version_variant_naming_variant_and_version(
    v1, v2
) -> None:
    with pytest.raises(WireSurfaceError) as info:
        v1.check_outgoing_session_update(
            {"sessionUpdate": "state_update", "state": "idle"}
        )
    assert (
        str(info.value)
        == "session update 'state_update' is not defined in ACP v1 (it is defined in ACP v2)"
    )
    assert (info.value.variant, info.value.version) == ("state_update", 1)
    with pytest.raises(
        WireSurfaceError,
        match=r"^session update 'plan' is not defined in ACP v2 \(it is defined in ACP v1\)$",
    ):
        v2.check_outgoing_session_update({"sessionUpdate": "plan", "entries": []})


@pytest.mark.seed("S003-04")
def test_write_guard_checks_state_and_nested_shapes(v1, v2) -> None:
    with pytest.raises(
        WireSurfaceError,
        match=r"^state_update state 'paused' is not defined in ACP v2$",
    ):
        v2.check_outgoing_session_update(
            {"sessionUpdate": "state_update", "state": "paused"}
        )
    with pytest.raises(
        WireSurfaceError,
        match=r"tool call content 'diff' has the ACP v1 shape, not the ACP v2 shape",
    ):
        v2.check_outgoing_session_update(_v1_diff_update())
    with pytest.raises(
        WireSurfaceError,
        match=r"tool call content 'diff' has the ACP v2 shape, not the ACP v1 shape",
    ):
        v1.check_outgoing_session_update(_v2_diff_update())


def test_write_guard_passes_known_variants_unchanged(v1, v2) -> None:
    update = _v1_diff_update()
    assert v1.check_outgoing_session_update(update) is update
    idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    assert v2.check_outgoing_session_update(idle) is idle


@pytest.mark.seed("S003-05")
def test_write_guard_extension_update_only_where_the_union_is_open(v1, v2) -> None:
    ext = {"sessionUpdate": "_acme_progress", "pct": 5}
    assert v2.check_outgoing_session_update(ext) is ext
    with pytest.raises(
        WireSurfaceError,
        match=r"^session update '_acme_progress' is not defined in ACP v1$",
    ):
        v1.check_outgoing_session_update(ext)
    with pytest.raises(
        WireSurfaceError, match="'future_update' is not defined in ACP v2"
    ):
        v2.check_outgoing_session_update({"sessionUpdate": "future_update"})


@pytest.mark.seed("S003-07")
def test_raw_passthrough_skips_the_write_guard(v1) -> None:
    received = _v2_diff_update()
    view = v1.classify_session_update(received)
    assert not view.known
    assert v1.check_outgoing_session_update(view.payload, passthrough=True) is received
    v1.check_outgoing_method("auth/login", passthrough=True)


def test_write_guard_methods(v1, v2) -> None:
    with pytest.raises(WireSurfaceError) as info:
        v2.check_outgoing_method("fs/read_text_file")
    assert (
        str(info.value)
        == "method 'fs/read_text_file' is not defined in ACP v2 (it is defined in ACP v1)"
    )
    assert (info.value.variant, info.value.version) == ("fs/read_text_file", 2)
    with pytest.raises(
        WireSurfaceError,
        match=r"^method 'auth/login' is not defined in ACP v1 \(it is defined in ACP v2\)$",
    ):
        v1.check_outgoing_method("auth/login")
    with pytest.raises(
        WireSurfaceError, match=r"^method 'session/cancel' is not a request in ACP v2$"
    ):
        v2.check_outgoing_method("session/cancel", "request")
    with pytest.raises(
        WireSurfaceError, match="unstable in ACP v2; this surface is stable-only"
    ):
        WireSurface.for_version(2, unstable=False).check_outgoing_method("session/fork")
    with pytest.raises(
        WireSurfaceError, match=r"^method 'bogus/method' is not defined in ACP v1$"
    ):
        v1.check_outgoing_method("bogus/method")
    v1.check_outgoing_method("session/cancel", "notification")
    v2.check_outgoing_method("tool_call/cancel", "request")


@pytest.mark.parametrize(
    "method",
    [
        "_acme/do",
        "_proxy/initialize",
        "_proxy/successor",
        "$/cancel_request",
        "$/progress",
    ],
)
def test_extension_and_protocol_methods_allowed_in_both_versions(
    v1, v2, method
) -> None:
    assert is_extension_method(method)
    v1.check_outgoing_method(method)
    v2.check_outgoing_method(method)
    v2.check_outgoing_method(method, "notification")


def test_write_guard_error_is_a_plain_local_exception() -> None:
    assert issubclass(WireSurfaceError, Exception)
    assert not issubclass(WireSurfaceError, (ValueError, KeyError))


# ---------------------------------------------------------------------------
# Types and import cost
# ---------------------------------------------------------------------------


def test_type_modules_are_not_imported_eagerly() -> None:
    code = (
        "import sys, acp_fast, acp_fast.protocol, acp_fast.protocol.surface\n"
        "eager = sorted(m for m in sys.modules if m.startswith('acp_fast.protocol.types_'))\n"
        "assert not eager, eager\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("version", [1, 2])
def test_type_modules_resolve_and_match_tables(version) -> None:
    mod = importlib.import_module(f"acp_fast.protocol.types_v{version}")
    classes = [
        v
        for v in vars(mod).values()
        if isinstance(v, type) and hasattr(v, "__required_keys__")
    ]
    assert len(classes) > 200
    for cls in classes:
        typing.get_type_hints(cls)  # every annotation names something real
    tags = set()
    for member in typing.get_args(mod.SessionUpdate):
        members = (
            typing.get_args(member)
            if typing.get_origin(member) is typing.Union
            else (member,)
        )
        for cls in members:
            tags.update(typing.get_args(typing.get_type_hints(cls)["sessionUpdate"]))
    assert tags == WireSurface.for_version(version).session_update_kinds
    for table_type in {
        row[4] for rows in gen.METHODS.values() for row in rows if row[0] == version
    }:
        assert hasattr(mod, table_type), table_type


def test_diff_types_differ_between_versions() -> None:
    from acp_fast.protocol import types_v1, types_v2

    assert types_v1.Diff.__required_keys__ == {"path", "newText"}
    assert types_v2.Diff.__required_keys__ == {"changes"}
    assert types_v2.SessionUpdateStateUpdateIdle.__required_keys__ == {
        "sessionUpdate",
        "state",
    }
    assert not hasattr(types_v1, "SessionUpdateStateUpdate")


# ---------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_surfaces", REPO / "scripts" / "gen_surfaces.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_generator_reproduces_committed_modules(schema_dir, tmp_path) -> None:
    generator = _load_generator()
    assert (
        generator.main(["--schema-dir", str(schema_dir), "--out-dir", str(tmp_path)])
        == 0
    )
    for name in generator.GENERATED:
        fresh = (tmp_path / name).read_bytes()
        committed = (PROTOCOL_PKG / name).read_bytes()
        assert fresh == committed, (
            f"{name} is stale: run python scripts/gen_surfaces.py"
        )


def _derive_methods(schema_dir, version):
    """An independent derivation of one version's method table from the schemas (not the
    generator's code): every ``$defs`` entry with an ``x-method`` is a ``...Request``, a
    ``...Notification`` or a ``...Response`` of that method; the method is stable when the
    stable schema defines the same entry for it. Also the ``sessionUpdate`` constants of the
    unstable schema's ``SessionUpdate`` union (the open fallback has no constant)."""
    unstable = json.loads((schema_dir / f"v{version}" / "schema.unstable.json").read_text())["$defs"]
    stable = json.loads((schema_dir / f"v{version}" / "schema.json").read_text())["$defs"]
    methods = {}
    for name, node in unstable.items():
        method = node.get("x-method")
        if method is None:
            continue
        entry = methods.setdefault(method, {"kinds": set(), "tier": "unstable"})
        if name.endswith("Request"):
            entry["kinds"].add("request")
        elif name.endswith("Notification"):
            entry["kinds"].add("notification")
        else:
            assert name.endswith("Response"), name
        if stable.get(name, {}).get("x-method") == method:
            entry["tier"] = "stable"
    union = unstable["SessionUpdate"]
    variants = union.get("oneOf", union.get("anyOf", []))
    kinds = {v["properties"]["sessionUpdate"]["const"] for v in variants
             if "const" in v.get("properties", {}).get("sessionUpdate", {})}
    return methods, kinds


@pytest.mark.seed("S003-01")
def test_tables_agree_with_derived_methods_json(schema_dir) -> None:
    # The tables against a derivation of their own from the pinned schemas (the generator
    # test above only shows the committed modules are what the generator writes; this one
    # catches the generator reading the schemas wrongly). It reproduces shared/acp-schema's
    # methods.json exactly, which is not copied here (shared/ is not part of the project).
    for version in (1, 2):
        surface = WireSurface.for_version(version)
        expected, session_update_kinds = _derive_methods(schema_dir, version)
        assert len(expected) > 20 and len(session_update_kinds) > 10  # the derivation found them
        assert surface.methods == set(expected)
        for name, entry in expected.items():
            infos = [surface.method_info(name, kind) for kind in sorted(entry["kinds"])]
            assert infos and all(
                info is not None and info.tier == entry["tier"] for info in infos
            ), name
        assert surface.session_update_kinds == session_update_kinds


# ---------------------------------------------------------------------------
# Read gate fast path: must return exactly what the full classifier returns
# ---------------------------------------------------------------------------

_VIEW_FIELDS = (
    "kind",
    "status",
    "payload",
    "version",
    "type_name",
    "tier",
    "defined_in",
    "detail",
)


def _view_tuple(view):
    return tuple(getattr(view, name) for name in _VIEW_FIELDS)


def _minimal(rows_table, tag, version, tag_key):
    """A payload with the required keys of ``tag`` as ``version`` shapes it."""
    rows = [row for row in rows_table[tag] if row[0] == version]
    payload = {tag_key: tag}
    for key in rows[0][3] if rows else ():
        payload[key] = "x"
    return payload


def _content(version, tag):
    return _minimal(gen.CONTENT_BLOCKS, tag, version, "type")


def _tool_content(version, tag):
    item = _minimal(gen.TOOL_CALL_CONTENT, tag, version, "type")
    if tag == "content":
        item["content"] = _content(version, "text")
    return item


def _fast_path_payloads():
    """Every session update variant of both versions (valid, other-version shaped,
    malformed, nested content of every tag of both versions) plus odd inputs."""
    out = [
        None,
        1,
        "x",
        [],
        {},
        {"sessionUpdate": 1},
        {"sessionUpdate": ["x"]},
        {"sessionUpdate": "future_update"},
        {"sessionUpdate": "_vendor_update"},
    ]
    for kind in gen.SESSION_UPDATES:
        for version in (1, 2):
            base = _minimal(gen.SESSION_UPDATES, kind, version, "sessionUpdate")
            out.append(base)
            for key in list(base)[1:]:  # each required key missing
                out.append({k: v for k, v in base.items() if k != key})
            fields = [
                f
                for (v, t), fs in gen.NESTED_UNIONS.items()
                for f in fs
                if v == version and t in {r[2] for r in gen.SESSION_UPDATES[kind]}
            ]
            for field, union, is_list in fields:
                tags = (
                    gen.CONTENT_BLOCKS
                    if union == "ContentBlock"
                    else gen.TOOL_CALL_CONTENT
                )
                items = [
                    None,
                    1,
                    [],
                    {},
                    {"type": 7},
                    {"type": ["text"]},
                    {"type": "_future"},
                ]
                for tag in tags:
                    for item_version in (1, 2):
                        item = (
                            _content(item_version, tag)
                            if union == "ContentBlock"
                            else _tool_content(item_version, tag)
                        )
                        items.append(item)
                        items.append({"type": tag})
                        if union == "ToolCallContent" and tag == "content":
                            items.append(
                                {"type": "content", "content": {"type": "text"}}
                            )
                            items.append(
                                {"type": "content", "content": {"type": "_x", "a": 1}}
                            )
                for item in items:
                    value = [item, item] if is_list else item
                    out.append(dict(base, **{field: value}))
                if is_list:
                    out += [
                        dict(base, **{field: None}),
                        dict(base, **{field: {}}),
                        dict(base, **{field: []}),
                    ]
    for state in [*gen.STATE_UPDATE_STATES, "bogus", 3, None]:
        for reason in ("end_turn", "other", None, 5, ["x"]):
            update = {"sessionUpdate": "state_update", "state": state}
            if reason is not None:
                update["stopReason"] = reason
            out.append(update)
    out.append({"sessionUpdate": "state_update"})
    return out


@pytest.mark.seed("S003-09")
@pytest.mark.parametrize("unstable", [True, False])
@pytest.mark.parametrize("version", [1, 2])
def test_read_gate_fast_path_matches_full_classifier(version, unstable) -> None:
    surface = WireSurface.for_version(version, unstable=unstable)
    payloads = _fast_path_payloads()
    fast_hits = 0
    for update in payloads:
        full = surface._classify_full(update)
        view = surface.classify_session_update(update)
        assert _view_tuple(view) == _view_tuple(full), update
        fast = surface.known_variant(update)
        assert _compiled_known(surface)(update) is fast, update  # the gate twins agree
        if fast is not None:
            fast_hits += 1
            assert full.status == KNOWN, update
    assert fast_hits > 50  # the table-driven payloads do exercise the fast path


def _compiled_known(surface: WireSurface):
    """The compiled gate twin (required unless the pure twin is forced)."""
    from acp_fast._compat import NO_EXTENSIONS
    from acp_fast.protocol import gate

    if not gate.compiled_available():
        if NO_EXTENSIONS:
            return surface.known_variant  # pure-only run: compare the twin with itself
        pytest.fail("the compiled read gate (acp_fast.protocol._gate_c) was not built")
    return gate.make_known(surface, compiled=True)


class _Refused(Exception):
    pass


class _ClashingKey:
    """A dict key that collides with ``name`` and refuses to be compared."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        raise _Refused(self.name)


@pytest.mark.parametrize("key", ["content", "type", "text"])
def test_read_gate_twins_agree_when_a_key_refuses_comparison(v1, key) -> None:
    # a lookup that raises (only a caller's own dict can hold such a key, here in the place
    # of ``key``) propagates from both twins alike: neither turns it into a verdict
    content: dict[object, object] = {"type": "text", "text": "hi"}
    update: dict[object, object] = {"sessionUpdate": "agent_message_chunk", "content": content}
    holder = update if key == "content" else content
    del holder[key]
    holder[_ClashingKey(key)] = 1
    for known in (v1.known_variant, _compiled_known(v1)):
        with pytest.raises(_Refused):
            known(update)


def test_compiled_gate_is_not_the_pure_one() -> None:
    from acp_fast._compat import NO_EXTENSIONS
    from acp_fast.protocol import gate

    if NO_EXTENSIONS:
        pytest.skip("pure twin forced: the compiled gate is not used")
    surface = WireSurface.for_version(2)
    assert gate.compiled_available()
    compiled = gate.make_known(surface, compiled=True)
    assert compiled != surface.known_variant
    assert gate.make_known(surface, compiled=False) == surface.known_variant


def test_read_gate_fast_path_covers_the_hot_variants(v1, v2) -> None:
    text = {"type": "text", "text": "hi"}
    hot = [
        (v1, {"sessionUpdate": "agent_message_chunk", "content": text}),
        (v1, {"sessionUpdate": "user_message_chunk", "content": text}),
        (v1, {"sessionUpdate": "agent_thought_chunk", "content": text}),
        (
            v2,
            {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": text},
        ),
        (
            v1,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c",
                "content": [
                    {"type": "content", "content": text},
                    {"type": "diff", "path": "/a", "newText": "b"},
                ],
            },
        ),
        (
            v2,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c",
                "content": [{"type": "diff", "changes": []}],
            },
        ),
        (
            v2,
            {
                "sessionUpdate": "state_update",
                "state": "idle",
                "stopReason": "end_turn",
            },
        ),
        (v2, {"sessionUpdate": "state_update", "state": "running"}),
    ]
    for surface, update in hot:
        assert surface.known_variant(update) is not None, update
    # and never for the other version's shapes
    assert (
        v1.known_variant(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c",
                "content": [{"type": "diff", "changes": []}],
            }
        )
        is None
    )
    assert (
        v2.known_variant({"sessionUpdate": "agent_message_chunk", "content": text})
        is None
    )
    assert v1.known_variant({"sessionUpdate": "state_update", "state": "idle"}) is None


@given(
    st.fixed_dictionaries(
        {
            "sessionUpdate": st.sampled_from(
                sorted(gen.SESSION_UPDATES) + ["state_update", "nope"]
            )
        },
        optional={
            key: st.recursive(
                st.none()
                | st.booleans()
                | st.integers()
                | st.sampled_from(
                    ["idle", "running", "text", "diff", "content", "end_turn", "x"]
                ),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(
                        st.sampled_from(
                            [
                                "type",
                                "text",
                                "path",
                                "newText",
                                "changes",
                                "content",
                                "terminalId",
                                "data",
                                "mimeType",
                            ]
                        ),
                        inner,
                        max_size=4,
                    )
                ),
                max_leaves=8,
            )
            for key in (
                "content",
                "messageId",
                "toolCallId",
                "state",
                "stopReason",
                "title",
                "entries",
                "summary",
                "compactionId",
                "status",
            )
        },
    )
)
def test_read_gate_fast_path_matches_full_classifier_fuzzed(update) -> None:
    for version in (1, 2):
        surface = WireSurface.for_version(version)
        full = surface._classify_full(update)
        assert _view_tuple(surface.classify_session_update(update)) == _view_tuple(full)
        fast = surface.known_variant(update)
        assert _compiled_known(surface)(update) is fast
        if fast is not None:
            assert full.status == KNOWN
