#!/usr/bin/env python3
"""Generate acp_fast's per-version wire-surface tables and schema types.

Reads the ACP JSON Schemas (draft 2020-12) for protocol v1 and v2, stable and
unstable, and writes seven committed, deterministic modules:

- ``acp_fast/protocol/_surface_gen.py``: plain dict/tuple tables, one row per
  discriminator listing every version that defines it (methods,
  ``session/update`` tags, v2 ``state_update`` states, stop reasons, content
  block and tool-call content tags, required keys for shape checks);
- ``acp_fast/protocol/types_v1.py`` and ``types_v2.py``: ``TypedDict`` /
  ``Literal`` types generated from each version's ``$defs`` (structure only;
  the schemas' descriptions are not copied);
- ``acp_fast/protocol/_schema_names.py``: every property name and every ``const`` /
  ``enum`` string of both versions' schemas (the engine's pinned string cache);
- ``acp_fast/protocol/methods_v1.py`` and ``methods_v2.py``: one typed method
  descriptor per method (``RequestMethod[Params, Result]`` /
  ``NotificationMethod[Params]``, classes in ``acp_fast/protocol/methods.py``),
  named by the rule in their docstring, from the same rows as ``METHODS``;
- ``acp_fast/protocol/_session_scope.py``: the session-scoped methods (those the
  agent implements whose params require ``sessionId``) and the versions that
  define each, the table the remote server routes ``Acp-Session-Id`` by.

Schema source, in order of precedence:

1. ``--schema-dir DIR`` (layout ``DIR/v1/schema.json``,
   ``DIR/v1/schema.unstable.json``, ``DIR/v2/...``);
2. the ``ACP_FAST_SCHEMA_DIR`` environment variable (same layout);
3. the pinned npm package ``@agentclientprotocol/sdk@2.4.0``, fetched with
   ``npm pack`` into a temporary directory (its ``schema/`` folder has the
   same layout). Requires ``npm`` on PATH and network access.

Usage::

    python scripts/gen_surfaces.py                      # from npm, writes the package
    python scripts/gen_surfaces.py --schema-dir ../shared/acp-schema
    python scripts/gen_surfaces.py --check              # exit 1 if committed files differ
    python scripts/gen_surfaces.py --out-dir /tmp/x     # write somewhere else

The output depends only on the schema contents, so regenerating from the same
package version is byte-for-byte reproducible (tests/test_protocol_surfaces.py
checks this when a schema directory is available).
"""

from __future__ import annotations

import argparse
import io
import json
import keyword
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

NPM_PACKAGE = "@agentclientprotocol/sdk"
NPM_VERSION = "2.4.0"
VERSIONS = (1, 2)
TIERS = ("stable", "unstable")
SCHEMA_FILES = {"stable": "schema.json", "unstable": "schema.unstable.json"}
REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO_ROOT / "acp_fast" / "protocol"
GENERATED = (
    "_surface_gen.py",
    "types_v1.py",
    "types_v2.py",
    "methods_v1.py",
    "methods_v2.py",
    "_schema_names.py",
    "_session_scope.py",
)

Schema = dict[str, Any]
Schemas = dict[tuple[int, str], Schema]  # (version, tier) -> schema document

# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_schema_dir(root: Path) -> Schemas:
    out: Schemas = {}
    for version in VERSIONS:
        for tier, fname in SCHEMA_FILES.items():
            path = root / f"v{version}" / fname
            out[(version, tier)] = json.loads(path.read_text(encoding="utf-8"))
    return out


def load_npm() -> Schemas:
    spec = f"{NPM_PACKAGE}@{NPM_VERSION}"
    with tempfile.TemporaryDirectory(prefix="acp-schema-") as tmp:
        proc = subprocess.run(
            ["npm", "pack", spec, "--pack-destination", tmp, "--silent"],
            check=True,
            capture_output=True,
            text=True,
        )
        tgz = Path(tmp) / proc.stdout.strip().splitlines()[-1]
        out: Schemas = {}
        with tarfile.open(tgz, "r:gz") as tar:
            for version in VERSIONS:
                for tier, fname in SCHEMA_FILES.items():
                    member = tar.extractfile(f"package/schema/v{version}/{fname}")
                    if member is None:
                        raise SystemExit(f"{spec}: schema/v{version}/{fname} missing")
                    data = io.TextIOWrapper(member, encoding="utf-8").read()
                    out[(version, tier)] = json.loads(data)
    return out


# ---------------------------------------------------------------------------
# Schema helpers
# ---------------------------------------------------------------------------


def ref_name(node: Any) -> str | None:
    """Name of the ``$defs`` entry a node points at (``$ref`` or 1-item ``allOf``)."""
    if not isinstance(node, dict):
        return None
    if "$ref" in node:
        return str(node["$ref"]).rsplit("/", 1)[-1]
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return ref_name(all_of[0])
    return None


def alternatives(node: Schema) -> list[Schema]:
    return list(node.get("anyOf") or node.get("oneOf") or [])


def tag_of(alt: Schema) -> tuple[str, Any] | None:
    """``(property, const)`` of a tagged union alternative, if it is one."""
    for prop, sub in alt.get("properties", {}).items():
        if isinstance(sub, dict) and "const" in sub:
            return prop, sub["const"]
    return None


def is_fallback(alt: Schema) -> bool:
    return alt.get("title") == "other"


def variant_ref(alt: Schema) -> str | None:
    for sub in alt.get("allOf", []):
        name = ref_name(sub)
        if name:
            return name
    return None


def tagged_variants(node: Schema) -> list[tuple[str, Any, str | None]]:
    """``[(tag property, tag value, referenced def or None), ...]`` in schema order."""
    out = []
    for alt in alternatives(node):
        tag = tag_of(alt)
        if tag is not None and not is_fallback(alt):
            out.append((tag[0], tag[1], variant_ref(alt)))
    return out


def is_open(node: Schema) -> bool:
    return any(is_fallback(alt) for alt in alternatives(node))


def required_of(defs: Schema, name: str | None) -> tuple[str, ...]:
    if name is None:
        return ()
    return tuple(defs[name].get("required", ()))


# ---------------------------------------------------------------------------
# Tables (_surface_gen.py)
# ---------------------------------------------------------------------------


def _collect_roles(node: Any, role: str | None, out: dict[str, set[str]]) -> None:
    """Record which defs appear as request/notification params or as results."""
    if isinstance(node, list):
        for item in node:
            _collect_roles(item, role, out)
        return
    if not isinstance(node, dict):
        return
    if role is not None:
        name = ref_name(node)
        if name is not None and "$ref" in node:
            out.setdefault(name, set()).add(role)
    props = node.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            if key == "params":
                has_id = "id" in props
                _collect_roles(sub, "request" if has_id else "notification", out)
            elif key == "result":
                _collect_roles(sub, "result", out)
            else:
                _collect_roles(sub, role, out)
    for key, sub in node.items():
        if key not in ("properties", "$defs"):
            _collect_roles(sub, role, out)


def method_rows(schemas: Schemas) -> dict[str, list[tuple[Any, ...]]]:
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for version in VERSIONS:
        unstable = schemas[(version, "unstable")]
        stable_defs = schemas[(version, "stable")]["$defs"]
        roles: dict[str, set[str]] = {}
        _collect_roles(unstable, None, roles)
        for defs_node in unstable["$defs"].values():
            _collect_roles(defs_node, None, roles)
        defs = unstable["$defs"]
        results: dict[str, str] = {}
        calls: list[tuple[str, str, str]] = []
        for name, node in defs.items():
            method = node.get("x-method")
            if method is None:
                continue
            found = roles.get(name, set())
            if len(found) != 1:
                raise SystemExit(f"v{version} {name}: ambiguous role {sorted(found)}")
            role = found.pop()
            if role == "result":
                results[method] = name
            else:
                calls.append((method, role, name))
        for method, kind, params in calls:
            side = defs[params].get("x-side")
            stable = stable_defs.get(params, {}).get("x-method") == method
            result = results.get(method) if kind == "request" else None
            if kind == "request" and result is None:
                raise SystemExit(f"v{version} {method}: request without result type")
            tier = "stable" if stable else "unstable"
            rows.setdefault(method, []).append(
                (version, kind, side, tier, params, result)
            )
    return {k: sorted(v) for k, v in sorted(rows.items())}


def union_rows(schemas: Schemas, union: str) -> dict[Any, list[tuple[Any, ...]]]:
    """``tag -> [(version, tier, type_name, required_keys), ...]`` for one union def."""
    rows: dict[Any, list[tuple[Any, ...]]] = {}
    order: list[Any] = []
    for version in VERSIONS:
        seen: set[Any] = set()
        for tier in TIERS:
            defs = schemas[(version, tier)]["$defs"]
            if union not in defs:
                continue
            for _prop, value, ref in tagged_variants(defs[union]):
                if value in seen:
                    continue
                seen.add(value)
                if value not in rows:
                    order.append(value)
                row = (version, tier, ref, required_of(defs, ref))
                rows.setdefault(value, []).append(row)
    return {k: rows[k] for k in order}


def union_open(schemas: Schemas, union: str) -> dict[int, bool]:
    out = {}
    for version in VERSIONS:
        defs = schemas[(version, "unstable")]["$defs"]
        if union in defs:
            out[version] = is_open(defs[union])
    return out


def const_rows(
    schemas: Schemas, def_name: str, prop: str | None
) -> dict[Any, list[Any]]:
    """``value -> [(version, tier), ...]`` for a const enum / tagged def."""
    rows: dict[Any, list[Any]] = {}
    order: list[Any] = []
    for version in VERSIONS:
        seen: set[Any] = set()
        for tier in TIERS:
            defs = schemas[(version, tier)]["$defs"]
            if def_name not in defs:
                continue
            for alt in alternatives(defs[def_name]):
                if is_fallback(alt):
                    continue
                if prop is None:
                    value = alt.get("const")
                else:
                    tag = tag_of(alt)
                    value = tag[1] if tag and tag[0] == prop else None
                if value is None or value in seen:
                    continue
                seen.add(value)
                if value not in rows:
                    order.append(value)
                rows.setdefault(value, []).append((version, tier))
    return {k: rows[k] for k in order}


NESTED_UNIONS = ("ContentBlock", "ToolCallContent")


def nested_rows(schemas: Schemas) -> dict[tuple[int, str], list[tuple[str, str, bool]]]:
    """Fields of session-update / content variant types that hold a nested union."""
    out: dict[tuple[int, str], list[tuple[str, str, bool]]] = {}
    for version in VERSIONS:
        defs = schemas[(version, "unstable")]["$defs"]
        owners: list[str] = []
        for union in ("SessionUpdate", "ToolCallContent", "ContentBlock"):
            for _p, _v, ref in tagged_variants(defs.get(union, {})):
                if ref and ref not in owners:
                    owners.append(ref)
        for owner in owners:
            fields = []
            for field, sub in defs[owner].get("properties", {}).items():
                found = _nested_union(sub)
                if found:
                    fields.append((field, found[0], found[1]))
            if fields:
                out[(version, owner)] = fields
    return dict(sorted(out.items()))


def _nested_union(node: Schema) -> tuple[str, bool] | None:
    name = ref_name(node)
    if name in NESTED_UNIONS:
        return name, False
    items = node.get("items")
    if isinstance(items, dict) and ref_name(items) in NESTED_UNIONS:
        return str(ref_name(items)), True
    for alt in alternatives(node):
        found = _nested_union(alt)
        if found:
            return found
    return None


def py(value: Any) -> str:
    """Python literal with double-quoted strings (deterministic)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        inner = ", ".join(py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return repr(value)
    raise TypeError(value)


def emit_table(name: str, comment: str, rows: dict[Any, Any], annotation: str) -> str:
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    lines.append(f"{name}: {annotation} = {{")
    for key, entries in rows.items():
        entries = list(entries)
        one = f"    {py(key)}: {py(tuple(entries))},"
        if len(one) <= 88:
            lines.append(one)
            continue
        lines.append(f"    {py(key)}: (")
        for entry in entries:
            text = f"        {py(entry)},"
            if len(text) <= 88:
                lines.append(text)
                continue
            lines.append("        (")
            lines.extend(f"            {py(item)}," for item in entry)
            lines.append("        ),")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_tables(schemas: Schemas) -> str:
    def tuples(rows: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        return {k: [tuple(e) for e in v] for k, v in rows.items()}

    state_rows = union_rows(schemas, "StateUpdate")
    header = f'''\
"""ACP wire-surface tables. GENERATED by scripts/gen_surfaces.py: do not edit.

Source: JSON Schemas shipped in npm {NPM_PACKAGE}@{NPM_VERSION}
(schema/v1 and schema/v2, schema.json = stable, schema.unstable.json = superset).
Regenerate: ``python scripts/gen_surfaces.py [--schema-dir DIR]``.

Every table is keyed by a wire discriminator and lists each protocol version
that defines it, so one table drives both the read gate and the write guard
(see acp_fast/protocol/surface.py). "tier" is "stable" when the stable schema
defines the entry, else "unstable". Plain literals only: importing this module
builds a few small dicts and nothing else.
"""

SCHEMA_PACKAGE = "{NPM_PACKAGE}@{NPM_VERSION}"
VERSIONS = {py(VERSIONS)}
'''
    parts = [header]
    parts.append(
        emit_table(
            "METHODS",
            "method -> ((version, kind, side, tier, params_type, result_type), ...)\n"
            "kind: request | notification; side: who implements it (agent | client |\n"
            "protocol | proxy); result_type is None for notifications.",
            tuples(method_rows(schemas)),
            "dict[str, tuple[tuple[int, str, str, str, str, str | None], ...]]",
        )
    )
    union_ann = "dict[str, tuple[tuple[int, str, str, tuple[str, ...]], ...]]"
    parts.append(
        emit_table(
            "SESSION_UPDATES",
            "session/update `update.sessionUpdate` ->\n"
            "((version, tier, type_name, required_keys), ...)",
            tuples(union_rows(schemas, "SessionUpdate")),
            union_ann,
        )
    )
    parts.append(
        emit_table(
            "STATE_UPDATE_STATES",
            '`state` beside `sessionUpdate: "state_update"` (v2) ->\n'
            "((version, tier, type_name, required_keys), ...). v1 defines the\n"
            "StateUpdate type only in its unstable schema (for subagent_update), never\n"
            "as a session update.",
            tuples(state_rows),
            union_ann,
        )
    )
    parts.append(
        emit_table(
            "IDLE_STOP_REASONS",
            "`stopReason` of an idle state update -> ((version, tier), ...);\n"
            "open union: other strings are allowed, null/absent = no reason.",
            tuples(const_rows(schemas, "IdleStateUpdate", "stopReason")),
            "dict[str, tuple[tuple[int, str], ...]]",
        )
    )
    parts.append(
        emit_table(
            "PROMPT_STOP_REASONS",
            "`stopReason` of a session/prompt response (v1 StopReason) ->\n"
            "((version, tier), ...). v2 prompt responses carry no stop reason.",
            tuples(const_rows(schemas, "StopReason", None)),
            "dict[str, tuple[tuple[int, str], ...]]",
        )
    )
    parts.append(
        emit_table(
            "CONTENT_BLOCKS",
            "ContentBlock `type` -> ((version, tier, type_name, required_keys), ...)",
            tuples(union_rows(schemas, "ContentBlock")),
            union_ann,
        )
    )
    parts.append(
        emit_table(
            "TOOL_CALL_CONTENT",
            "ToolCallContent `type` -> ((version, tier, type_name, required_keys), ...)\n"
            'NOTE: "diff" is one tag with two shapes (v1 path/newText, v2 changes).',
            tuples(union_rows(schemas, "ToolCallContent")),
            union_ann,
        )
    )
    opens = {
        "SessionUpdate": union_open(schemas, "SessionUpdate"),
        "StateUpdate": union_open(schemas, "StateUpdate"),
        "ContentBlock": union_open(schemas, "ContentBlock"),
        "ToolCallContent": union_open(schemas, "ToolCallContent"),
    }
    parts.append(
        emit_table(
            "OPEN_UNIONS",
            "union -> ((version, accepts_unknown_tags), ...): True = anyOf with an\n"
            "open fallback, False = closed oneOf.",
            {k: [(ver, flag) for ver, flag in v.items()] for k, v in opens.items()},
            "dict[str, tuple[tuple[int, bool], ...]]",
        )
    )
    parts.append(
        emit_table(
            "NESTED_UNIONS",
            "(version, variant type) -> ((field, union, is_list), ...): fields of\n"
            "session-update and content variants that hold a ContentBlock or a\n"
            "ToolCallContent, which the read gate checks too.",
            {k: v for k, v in nested_rows(schemas).items()},
            "dict[tuple[int, str], tuple[tuple[str, str, bool], ...]]",
        )
    )
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------
# Session scope (_session_scope.py)
# ---------------------------------------------------------------------------


def session_scoped_rows(schemas: Schemas) -> dict[str, list[int]]:
    """``method -> [version, ...]``: the methods the agent implements (``x-side`` agent)
    whose params type requires ``sessionId``, in each version's unstable schema (a
    superset of the stable one), sorted by method."""
    rows: dict[str, list[int]] = {}
    for method, entries in method_rows(schemas).items():
        for version, _kind, side, _tier, params, _result in entries:
            defs = schemas[(version, "unstable")]["$defs"]
            if side == "agent" and "sessionId" in required_of(defs, params):
                rows.setdefault(method, []).append(version)
    return {k: sorted(set(v)) for k, v in sorted(rows.items())}


def render_session_scope(schemas: Schemas) -> str:
    header = f'''\
"""Session-scoped ACP methods. GENERATED by scripts/gen_surfaces.py: do not edit.

Source: JSON Schemas shipped in npm {NPM_PACKAGE}@{NPM_VERSION} (v1 and v2,
unstable = the superset of stable). A method is session-scoped when the agent
implements it and its params type requires ``sessionId``: over Streamable HTTP
its POST needs a session (``Acp-Session-Id`` or ``params.sessionId``) and its
reply follows that session's stream. Plain literals only: the remote server
imports this at start-up, not the schema types.
"""
'''
    return "\n\n".join([
        header,
        emit_table(
            "SESSION_SCOPED",
            "method -> (version, ...) of the versions whose schema scopes it to a session",
            {k: list(v) for k, v in session_scoped_rows(schemas).items()},
            "dict[str, tuple[int, ...]]",
        ),
    ])


# ---------------------------------------------------------------------------
# Names (_schema_names.py)
# ---------------------------------------------------------------------------


def schema_names(schemas: Schemas) -> tuple[list[str], list[str]]:
    """(property names, const/enum strings) of every schema, each sorted and unique.

    A ``properties`` object's keys are names and its values schemas (a property may itself
    be called ``properties`` or ``const``); everything else is searched as schema.
    """
    props: set[str] = set()
    consts: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                props.update(value)
                for sub in value.values():
                    walk(sub)
            elif key == "const" and isinstance(value, str):
                consts.add(value)
            elif key == "enum" and isinstance(value, list):
                consts.update(v for v in value if isinstance(v, str))
            else:
                walk(value)

    for key in sorted(schemas):
        walk(schemas[key])
    return sorted(props), sorted(consts)


def render_names(schemas: Schemas) -> str:
    props, consts = schema_names(schemas)

    def block(name: str, comment: str, values: list[str]) -> str:
        lines = [f"# {line}" for line in comment.splitlines()]
        lines.append(f"{name}: tuple[str, ...] = (")
        lines.extend(f"    {py(v)}," for v in values)
        lines.append(")")
        return "\n".join(lines) + "\n"

    header = f'''\
"""Names in ACP messages. GENERATED by scripts/gen_surfaces.py: do not edit.

Source: JSON Schemas shipped in npm {NPM_PACKAGE}@{NPM_VERSION} (v1 and v2,
stable and unstable). Every property name of every object the schemas define,
and every string they fix as a ``const`` or list in an ``enum`` (tags such as
``agent_message_chunk`` and ``text``). The compiled engine pins these strings,
interned, in its decoder's string cache (a fixed set: what a peer sends never
adds to it), so that ``update["content"]["text"]`` in a handler finds its keys
by identity. Plain literals only.
"""
'''
    return "\n\n".join([
        header,
        block("PROPERTY_NAMES", "property names, sorted", props),
        block("STRING_CONSTANTS", "const and enum strings, sorted", consts),
    ])


# ---------------------------------------------------------------------------
# Types (types_v1.py / types_v2.py)
# ---------------------------------------------------------------------------

# JSON-RPC envelope routing unions: not payload types, skipped.
SKIPPED = frozenset(
    {
        "AgentRequest",
        "AgentResponse",
        "AgentNotification",
        "ClientRequest",
        "ClientResponse",
        "ClientNotification",
        "ProxyRequest",
        "ProxyResponse",
        "ProxyNotification",
    }
)
PRIMITIVES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


def pascal(value: Any) -> str:
    return "".join(
        p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", str(value)) if p
    )


def literal(values: Iterable[Any]) -> str:
    return "Literal[" + ", ".join(py(v) for v in values) + "]"


def union(members: Iterable[str]) -> str:
    seen: list[str] = []
    for m in members:
        for part in _split_union(m):
            if part not in seen:
                seen.append(part)
    if "Any" in seen:
        return "Any"
    lits = [m for m in seen if m.startswith("Literal[")]
    if len(lits) > 1:  # merge literals into one
        values = ", ".join(m[len("Literal[") : -1] for m in lits)
        merged = f"Literal[{values}]"
        seen = [merged if m == lits[0] else m for m in seen if m not in lits[1:]]
    has_none = "None" in seen
    rest = [m for m in seen if m != "None"]
    if not rest:
        return "None"
    if len(rest) == 1:
        return f"Optional[{rest[0]}]" if has_none else rest[0]
    return "Union[" + ", ".join(rest + (["None"] if has_none else [])) + "]"


def _split_union(expr: str) -> list[str]:
    if expr.startswith("Optional[") and expr.endswith("]"):
        return [expr[len("Optional[") : -1], "None"]
    if expr.startswith("Union[") and expr.endswith("]"):
        return split_args(expr[len("Union[") : -1])
    return [expr]


class TypeGen:
    """Turns one version's ``$defs`` into TypedDict / alias source."""

    def __init__(self, version: int, unstable: Schema, stable: Schema) -> None:
        self.version = version
        self.defs: dict[str, Schema] = unstable["$defs"]
        self.stable_defs: dict[str, Schema] = stable["$defs"]
        self.classes: dict[str, tuple[list[str], list[tuple[str, str, bool]], str]] = {}
        self.aliases: dict[str, str] = {}
        self.tagged: dict[str, list[str]] = {}  # union alias -> variant class names
        self.notes: dict[str, str] = {}
        self.done: set[str] = set()

    # -- type expressions ---------------------------------------------------
    def tx(self, node: Any) -> str:
        if not isinstance(node, dict) or not node:
            return "Any"
        name = ref_name(node)
        if name is not None:
            return name
        if "const" in node:
            return literal([node["const"]])
        if "enum" in node:
            return literal(node["enum"])
        alts = alternatives(node)
        if alts:
            return union(self.tx_alt(a) for a in alts)
        typ = node.get("type")
        if isinstance(typ, list):
            return union(self.tx({**node, "type": t}) for t in typ)
        if typ in PRIMITIVES:
            return PRIMITIVES[typ]
        if typ == "array":
            return f"list[{self.tx(node.get('items'))}]"
        if typ == "object":
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return f"dict[str, {self.tx(extra)}]"
            return "dict[str, Any]"
        return "Any"

    def tx_alt(self, alt: Schema) -> str:
        if is_fallback(alt) or (alt.get("type") == "object" and "properties" in alt):
            return (
                "dict[str, Any]"
                if alt.get("type") == "object"
                else self.tx({k: v for k, v in alt.items() if k != "title"})
            )
        return self.tx(alt)

    # -- defs -----------------------------------------------------------------
    def run(self) -> None:
        for name in self.defs:
            self.ensure(name)

    def ensure(self, name: str) -> None:
        if name in SKIPPED or name in self.done:
            return
        self.done.add(name)
        if name not in self.stable_defs:
            self.notes[name] = "unstable"
        self.emit_def(name, self.defs[name])

    def add_class(
        self, name: str, bases: list[str], fields: list[tuple[str, str, bool]]
    ) -> None:
        if name in self.classes or name in self.aliases:
            raise SystemExit(f"v{self.version}: duplicate generated name {name}")
        self.classes[name] = (bases, fields, self.notes.get(name, ""))

    def fields_of(self, node: Schema) -> list[tuple[str, str, bool]]:
        required = set(node.get("required", ()))
        return [
            (prop, self.tx(sub), prop in required)
            for prop, sub in node.get("properties", {}).items()
        ]

    def emit_def(self, name: str, node: Schema) -> None:
        alts = alternatives(node)
        if "properties" in node:
            fields = self.fields_of(node)
            if alts:
                fields = self.merge_variants(fields, alts)
            self.add_class(name, [], fields)
            return
        if alts and tagged_variants(node):
            self.emit_tagged_union(name, node)
            return
        if alts and all(
            "const" in a or is_fallback(a) or a.get("title") == "unknown" for a in alts
        ):
            consts = [a["const"] for a in alts if "const" in a]
            extra = {
                PRIMITIVES.get(a.get("type", ""), "Any")
                for a in alts
                if "const" not in a
            }
            self.aliases[name] = union([literal(consts), *sorted(extra)])
            return
        self.aliases[name] = self.tx(node)

    def merge_variants(
        self, fields: list[tuple[str, str, bool]], alts: list[Schema]
    ) -> list[tuple[str, str, bool]]:
        """Flatten ``properties`` + tagged ``anyOf`` into one TypedDict."""
        types: dict[str, list[str]] = {f: [t] for f, t, _ in fields}
        required = {f: r for f, _, r in fields}
        order = [f for f, _, _ in fields]
        tag_values: dict[str, list[str]] = {}
        always: dict[str, bool] = {}
        for alt in alts:
            tag = tag_of(alt)
            if tag is not None and not is_fallback(alt):
                tag_values.setdefault(tag[0], []).append(literal([tag[1]]))
            if is_fallback(alt):
                for prop in alt.get("required", ()):
                    tag_values.setdefault(prop, []).append("str")
            if alt.get("title") == "none":
                for prop, sub in alt.get("properties", {}).items():
                    tag_values.setdefault(prop, []).append(self.tx(sub))
            for prop in tag_values:
                always[prop] = always.get(prop, True) and prop in alt.get(
                    "required", ()
                )
            extra: list[Schema] = [alt]
            ref = variant_ref(alt)
            if ref is not None:
                extra.append(self.defs[ref])
            for src in extra:
                for prop, sub in src.get("properties", {}).items():
                    if tag is not None and prop == tag[0]:
                        continue
                    if prop in tag_values and src is alt:
                        continue
                    if prop not in types:
                        types[prop], required[prop] = [], False
                        order.append(prop)
                    types[prop].append(self.tx(sub))
        for prop, values in tag_values.items():
            if prop not in types:
                order.append(prop)
                required[prop] = always.get(prop, False)
            types[prop] = values
        return [(f, union(types[f]), required[f]) for f in order]

    def emit_tagged_union(self, name: str, node: Schema) -> None:
        members: list[str] = []
        for alt in alternatives(node):
            tag = tag_of(alt)
            if is_fallback(alt):
                continue
            if tag is None:  # untagged alternative, e.g. McpServerStdio in v1
                members.append(self.tx_alt(alt))
                continue
            prop, value = tag
            cls = name + pascal(value)
            if cls in self.defs:
                cls += "Variant"
            inline = [f for f in self.fields_of(alt) if f[0] != prop]
            tag_field = (prop, literal([value]), True)
            ref = variant_ref(alt)
            if ref is not None:
                self.ensure(ref)
            if ref is not None and ref in self.tagged:  # nested tagged union
                inner_members = []
                for inner in self.tagged[ref]:
                    sub = cls + inner[len(ref) :]
                    self.add_class(sub, [inner], [tag_field, *inline])
                    inner_members.append(sub)
                self.aliases[cls] = union(inner_members)
                members.append(cls)
                continue
            bases = [ref] if ref is not None and "properties" in self.defs[ref] else []
            if ref is not None and not bases:
                raise SystemExit(
                    f"v{self.version} {name}.{value}: unsupported variant base"
                )
            self.add_class(cls, bases, [tag_field, *inline])
            self.notes.setdefault(cls, self.notes.get(name, ""))
            self.tagged.setdefault(name, []).append(cls)
            members.append(cls)
        self.aliases[name] = union(members)
        if is_open(node):
            self.notes[f"alias:{name}"] = "open"

    # -- rendering ------------------------------------------------------------
    def render(self) -> str:
        v = self.version
        out = [
            f'''"""ACP v{v} schema types. GENERATED by scripts/gen_surfaces.py: do not edit.

Source: npm {NPM_PACKAGE}@{NPM_VERSION}, schema/v{v}/schema.unstable.json (a
superset of schema.json; defs only in the unstable schema are marked
"# unstable"). Regenerate: ``python scripts/gen_surfaces.py``.

TypedDicts are plain dicts at runtime: use them for annotations and
construction, they never validate. Tagged unions are Union aliases of one
TypedDict per tag (``ContentBlockText`` = a ``ContentBlock`` with
``type: "text"``). Open unions (marked "# open") also accept unknown tags; those
are not modelled here and reach the application as raw dicts through the read
gate (acp_fast.protocol.surface). Optional keys use a private
``_<Name>Required`` base so the module works on Python 3.10 without
typing_extensions.

Import on demand only; acp_fast never imports this module. Building several
hundred TypedDict classes costs tens of milliseconds, so annotate with
``if TYPE_CHECKING: from acp_fast.protocol.types_v{v} import ...`` where
start-up time matters.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict, Union'''
        ]
        blocks: list[list[str]] = []
        emitted: set[str] = set()

        def emit(name: str) -> None:
            if name in emitted:
                return
            emitted.add(name)
            bases, fields, note = self.classes[name]
            for base in bases:
                emit(base)
            head = [f"# {note}"] if note else []
            req = [f for f in fields if f[2]]
            opt = [f for f in fields if not f[2]]
            parents = ", ".join(bases) if bases else "TypedDict"
            if req and opt:
                blocks.append([*class_line(f"_{name}Required", parents), *body(req)])
                bases_opt = f"_{name}Required, total=False"
                blocks.append([*head, *class_line(name, bases_opt), *body(opt)])
            else:
                # A class that only adds required keys (or none) to its bases is total.
                total = ", total=False" if opt else ""
                blocks.append(
                    [*head, *class_line(name, parents + total), *body(fields)]
                )

        for name in self.classes:
            emit(name)
        aliases: list[str] = []
        for name in alias_order(self.aliases):
            expr = self.aliases[name]
            flags = [
                n for n in (self.notes.get(name), self.notes.get(f"alias:{name}")) if n
            ]
            if flags:
                aliases.append(f"# {', '.join(flags)}")
            aliases.extend(wrap(f"{name} = ", expr, ""))
        blocks.append(aliases)
        return (
            "\n".join(out)
            + "\n\n\n"
            + "\n\n\n".join("\n".join(b) for b in blocks)
            + "\n"
        )


def class_line(name: str, bases: str) -> list[str]:
    line = f"class {name}({bases}):"
    return [line] if len(line) <= 88 else [f"class {name}(", f"    {bases}", "):"]


def body(fields: list[tuple[str, str, bool]]) -> list[str]:
    if not fields:
        return ["    pass"]
    return [line for f, t, _ in fields for line in wrap(f"    {f}: ", t, "")]


def wrap(prefix: str, expr: str, suffix: str, width: int = 88) -> list[str]:
    """Black-style wrapping of a subscripted type expression."""
    line = prefix + expr + suffix
    head, _, rest = expr.partition("[")
    if len(line) <= width or not rest.endswith("]"):
        return [line]
    indent = " " * (len(prefix) - len(prefix.lstrip()) + 4)
    out = [f"{prefix}{head}["]
    for arg in split_args(rest[:-1]):
        out.extend(wrap(indent, arg, ",", width))
    out.append(f"{indent[:-4]}]{suffix}")
    return out


def split_args(inner: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    out.append(inner[start:].strip())
    return out


def alias_order(aliases: dict[str, str]) -> list[str]:
    """Aliases ordered so each one follows the aliases it mentions."""
    words = {
        name: set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr))
        for name, expr in aliases.items()
    }
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise SystemExit(f"alias cycle through {name}")
        state[name] = 1
        for dep in sorted(words[name] & aliases.keys()):
            if dep != name:
                visit(dep)
        state[name] = 2
        order.append(name)

    for name in aliases:
        visit(name)
    return order


def render_types(schemas: Schemas, version: int) -> str:
    gen = TypeGen(version, schemas[(version, "unstable")], schemas[(version, "stable")])
    gen.run()
    return gen.render()


# ---------------------------------------------------------------------------
# Method descriptors (methods_v1.py, methods_v2.py)
# ---------------------------------------------------------------------------

# The ``$/`` prefix (protocol-level methods such as ``$/cancel_request``).
PROTOCOL_NAMESPACE = "protocol"
# Module-level names a method or namespace must not take.
METHODS_RESERVED = frozenset(
    {"ALL", "VERSION", "Any", "Final", "TYPE_CHECKING", "annotations"}
    | {"Method", "NotificationMethod", "RequestMethod"}
)
SIDES = {
    "agent": "handled by the agent",
    "client": "handled by the client",
    "protocol": "either side",
    "proxy": "proxy chain",
}


def identifier(part: str) -> str:
    """A wire-name segment as a Python identifier (see the naming rule)."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", part)
    if not name or name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        name += "_"
    return name


def method_path(method: str) -> tuple[str | None, str]:
    """``(namespace or None, attribute)`` for a wire method name."""
    prefix, sep, rest = method.partition("/")
    if not sep:
        return None, identifier(method)
    namespace = PROTOCOL_NAMESPACE if prefix == "$" else identifier(prefix)
    return namespace, identifier(rest)


def descriptor_lines(
    indent: str, attr: str, annotation: str, ctor: str, args: list[str]
) -> list[str]:
    """``attr: annotation = ctor(args)``, wrapped black-style at 88 columns."""
    call = f"{ctor}({', '.join(args)})"
    one = f"{indent}{attr}: {annotation} = {call}"
    if len(one) <= 88:
        return [one]
    head = f"{indent}{attr}: {annotation} = ("
    if len(head) <= 88 and len(indent) + 4 + len(call) <= 88:
        return [head, f"{indent}    {call}", f"{indent})"]
    outer, _, inner = annotation.partition("[")
    joined = f"{indent}    {', '.join(args)}"
    call_lines = (
        [joined] if len(joined) <= 88 else [f"{indent}    {arg}," for arg in args]
    )
    return [
        f"{indent}{attr}: {outer}[",
        f"{indent}    {inner[:-1]}",
        f"{indent}] = {ctor}(",
        *call_lines,
        f"{indent})",
    ]


def method_descriptors(
    schemas: Schemas, version: int
) -> list[tuple[str | None, str, str, tuple[Any, ...]]]:
    """``[(namespace or None, attribute, wire name, row), ...]`` for one version."""
    out = []
    for method, entries in method_rows(schemas).items():
        mine = sorted(
            (e for e in entries if e[0] == version), key=lambda e: e[1] != "request"
        )
        kinds = {e[1] for e in mine}
        namespace, attr = method_path(method)
        for row in mine:
            both = row[1] == "notification" and "request" in kinds
            out.append((namespace, attr + ("_notification" if both else ""), method, row))
    return out


METHODS_DOC = '''\
"""ACP v{v} method descriptors. GENERATED by scripts/gen_surfaces.py: do not edit.

Source: npm {source}, schema/v{v}/schema.unstable.json (the
same method rows as the wire-surface tables). Regenerate:
``python scripts/gen_surfaces.py``.

One descriptor per method of protocol v{v} (see acp_fast.protocol.methods): a
``RequestMethod[Params, Result]`` or a ``NotificationMethod[Params]`` whose type
arguments are the ``TypedDict`` types of ``acp_fast.protocol.types_v{v}``::

    from acp_fast.protocol import methods_v{v} as methods

    @agent.on_request(methods.session.prompt)
    async def prompt(params, cx): ...  # params: PromptRequest -> PromptResponse

Naming rule (wire name -> Python name):

- ``prefix/name`` -> ``prefix.name``, one namespace class per prefix
  (``session/set_config_option`` -> ``session.set_config_option``);
- a name without ``/`` is module-level (``initialize``);
- ``$/name`` -> ``{ns}.name`` (``$/cancel_request`` -> ``{ns}.cancel_request``);
- a character that cannot appear in an identifier becomes ``_``; a Python
  keyword gets a trailing ``_``;
- a method that is both a request and a notification keeps its name for the
  request; the notification takes the suffix ``_notification``
  (``mcp/message`` -> ``mcp.message`` and ``mcp.message_notification``).

``ALL`` lists every descriptor. The schema types are imported for type checkers
only: importing this module builds a few dozen small objects and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .methods import Method, NotificationMethod, RequestMethod
'''


def render_methods(schemas: Schemas, version: int) -> str:
    v = version
    top: list[tuple[str, list[str]]] = []
    spaces: dict[str, list[tuple[str, list[str]]]] = {}
    prefixes: dict[str, str] = {}
    everything: list[str] = []
    types: set[str] = set()
    for namespace, attr, method, row in method_descriptors(schemas, v):
        _v, kind, side, tier, params, result = row
        types.update(t for t in (params, result) if t is not None)
        if kind == "request":
            ann = f"Final[RequestMethod[{params}, {result}]]"
            ctor, args = "RequestMethod", [py(method), str(v), py(params), py(result)]
        else:
            ann = f"Final[NotificationMethod[{params}]]"
            ctor, args = "NotificationMethod", [py(method), str(v), py(params)]
        note = SIDES[side] + (", unstable" if tier == "unstable" else "")
        indent = "    " if namespace else ""
        lines = [f"{indent}# {method}: {kind}, {note}"]
        lines += descriptor_lines(indent, attr, ann, ctor, args)
        if namespace is None:
            top.append((attr, lines))
            everything.append(attr)
            continue
        prefix = method.split("/")[0]
        if prefixes.setdefault(namespace, prefix) != prefix:
            raise SystemExit(f"v{v}: namespace {namespace} for two prefixes")
        spaces.setdefault(namespace, []).append((attr, lines))
        everything.append(f"{namespace}.{attr}")
    names = [n for n, _ in top] + list(spaces)
    clashes = {n for n in names if names.count(n) > 1}
    clashes |= set(names) & (METHODS_RESERVED | types)
    for namespace, members in spaces.items():
        attrs = [a for a, _ in members]
        clashes |= {
            f"{namespace}.{a}"
            for a in attrs
            if attrs.count(a) > 1 or a in types or a in METHODS_RESERVED
            or a.startswith("__")
        }
    if clashes:
        raise SystemExit(f"v{v}: method descriptor names clash: {sorted(clashes)}")

    head = METHODS_DOC.format(
        v=v, source=f"{NPM_PACKAGE}@{NPM_VERSION}", ns=PROTOCOL_NAMESPACE
    )
    head += "\nif TYPE_CHECKING:\n    from .types_v%d import (\n" % v
    head += "".join(f"        {t},\n" for t in sorted(types)) + "    )\n"
    exported = ["ALL", "VERSION", *sorted(names)]
    blocks = [
        "__all__ = [\n" + "".join(f"    {py(n)},\n" for n in exported) + "]\n\n"
        f"VERSION: Final = {v}",
        *("\n".join(lines) for _, lines in top),
    ]
    for namespace, members in spaces.items():
        doc = f'    """``{prefixes[namespace]}/*`` methods."""'
        body = "\n\n".join("\n".join(lines) for _, lines in members)
        blocks.append(f"class {namespace}:\n{doc}\n\n{body}")
    blocks.append(
        "ALL: Final[tuple[Method[Any, Any], ...]] = (\n"
        + "".join(f"    {name},\n" for name in everything)
        + ")"
    )
    return head + "\n\n" + "\n\n\n".join(blocks) + "\n"


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def render_all(schemas: Schemas) -> dict[str, str]:
    return {
        "_surface_gen.py": render_tables(schemas),
        "types_v1.py": render_types(schemas, 1),
        "types_v2.py": render_types(schemas, 2),
        "methods_v1.py": render_methods(schemas, 1),
        "methods_v2.py": render_methods(schemas, 2),
        "_schema_names.py": render_names(schemas),
        "_session_scope.py": render_session_scope(schemas),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--schema-dir", type=Path, help="dir with v1/ and v2/ schema files"
    )
    parser.add_argument(
        "--out-dir", type=Path, default=PACKAGE_DIR, help="output directory"
    )
    parser.add_argument(
        "--check", action="store_true", help="compare instead of writing"
    )
    args = parser.parse_args(argv)

    schema_dir = args.schema_dir or (
        Path(os.environ["ACP_FAST_SCHEMA_DIR"])
        if os.environ.get("ACP_FAST_SCHEMA_DIR")
        else None
    )
    schemas = load_schema_dir(schema_dir) if schema_dir else load_npm()
    outputs = render_all(schemas)
    stale = []
    for fname, text in outputs.items():
        path = args.out_dir / fname
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(fname)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
    if stale:
        print(f"stale generated files: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
