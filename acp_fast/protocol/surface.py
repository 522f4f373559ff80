"""Per-version ACP wire surfaces: the read gate and the write guard.

A connection speaks exactly one negotiated ACP version. `WireSurface.for_version`
returns that version's surface: the methods and discriminators the version's
schema defines. There is no ambient "current version": pass the surface object
to whatever encodes or decodes for the connection.

Both directions are derived from the same generated tables
(`acp_fast/protocol/_surface_gen.py`, one row per discriminator listing every
version that defines it):

- **Read gate** (`classify_session_update`): returns a `SessionUpdateView`
  whose `payload` is the very dict that was passed in. Only `status ==
  "known"` means "this version defines the variant and the payload has this
  version's shape". Unknown variants, variants of the other version, and
  same-tag-different-shape payloads (v2 `diff` tool-call content on a v1
  connection, a v1 chunk without `messageId` on a v2 connection) are reported
  as passthrough with the payload untouched, never as this version's type.
- **Write guard** (`check_outgoing_session_update`, `check_outgoing_method`):
  raises `WireSurfaceError` naming the variant and the negotiated version for
  anything the version does not define, so a locally built message can never go
  out quietly wrong. Relays that forward what they received pass
  `passthrough=True` to skip the guard. Extension methods (`_` prefix) and
  `$/` protocol methods are allowed in both versions.

The tables are generated; to refresh them run `python scripts/gen_surfaces.py`
(see that script's docstring). This module is hand-written and avoids importing
`typing`/`dataclasses` at runtime to keep import cost negligible.
"""

from __future__ import annotations

from acp_fast.protocol import _surface_gen as _gen
from acp_fast.protocol.errors import WireSurfaceError

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from acp_fast.jsontypes import Json

__all__ = [
    "KNOWN",
    "MALFORMED",
    "KnownVariant",
    "OTHER_VERSION",
    "UNKNOWN",
    "MethodInfo",
    "SessionUpdateView",
    "WireSurface",
    "WireSurfaceError",
    "is_extension_method",
    "session_update_versions",
]

_U = TypeVar("_U")

# SessionUpdateView.status values.
KNOWN = "known"  # defined by this version, payload has this version's shape
UNKNOWN = "unknown"  # not defined by this surface (future, extension, other tier)
OTHER_VERSION = "other_version"  # defined / shaped only by another ACP version
MALFORMED = "malformed"  # known discriminator, but the payload cannot be it

_UNION_LABELS = {
    "ContentBlock": "content block",
    "ToolCallContent": "tool call content",
}


def is_extension_method(method: str) -> bool:
    """True for `_`-prefixed extension and `$/`-prefixed protocol methods."""
    return method[:1] == "_" or method[:2] == "$/"


def _versions(rows: tuple[tuple[Any, ...], ...]) -> tuple[int, ...]:
    return tuple(sorted({row[0] for row in rows}))


_UPDATE_VERSIONS = {
    kind: _versions(rows) for kind, rows in _gen.SESSION_UPDATES.items()
}


def session_update_versions(kind: str) -> tuple[int, ...]:
    """Versions (any tier) whose schema defines the `sessionUpdate` value `kind`."""
    return _UPDATE_VERSIONS.get(kind, ())


class MethodInfo:
    """One method (of one kind) in one version's surface."""

    __slots__ = (
        "name",
        "version",
        "kind",
        "side",
        "tier",
        "params_type",
        "result_type",
    )

    def __init__(
        self,
        name: str,
        version: int,
        kind: str,
        side: str,
        tier: str,
        params_type: str,
        result_type: str | None,
    ) -> None:
        self.name = name
        self.version = version
        self.kind = kind  # "request" | "notification"
        self.side = side  # who implements it: "agent" | "client" | "protocol" | "proxy"
        self.tier = tier  # "stable" | "unstable"
        self.params_type = params_type
        self.result_type = result_type  # None for notifications

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, slot) for slot in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodInfo) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{slot}={getattr(self, slot)!r}" for slot in self.__slots__)
        return f"MethodInfo({fields})"


class SessionUpdateView:
    """Result of the read gate for one `session/update` `update` object.

    `payload` is the object that was classified, unchanged (same identity).
    Only a `known` view may be treated as this version's schema type
    `type_name`; anything else is untyped passthrough: store, forward or
    display it generically, never bind it to this version's type.
    """

    __slots__ = (
        "kind",
        "status",
        "payload",
        "version",
        "type_name",
        "tier",
        "defined_in",
        "detail",
    )

    def __init__(
        self,
        kind: str,
        status: str,
        payload: Any,
        version: int,
        type_name: str | None = None,
        tier: str | None = None,
        defined_in: tuple[int, ...] = (),
        detail: str = "",
    ) -> None:
        self.kind = kind  # the sessionUpdate value ("" if absent / not a string)
        self.status = status  # KNOWN | UNKNOWN | OTHER_VERSION | MALFORMED
        self.payload = payload
        self.version = version  # the surface's (negotiated) version
        self.type_name = type_name  # schema type bound to, only when known
        self.tier = tier  # "stable" | "unstable", only when known
        self.defined_in = defined_in  # versions that define the tag / the shape seen
        self.detail = detail  # why it is not known ("" when known)

    @property
    def known(self) -> bool:
        """True when the negotiated version defines this update's tag and shape (`status == KNOWN`)."""
        return self.status == KNOWN

    def __repr__(self) -> str:
        return (
            f"SessionUpdateView(kind={self.kind!r}, status={self.status!r}, "
            f"version={self.version}, defined_in={self.defined_in!r}, detail={self.detail!r})"
        )


class KnownVariant(NamedTuple):
    """The read gate's fast-path entry for one `session/update` variant of a surface.

    `check(update)` is True only when the full classifier would call `update` known in
    this version's shape; False means "ask [`WireSurface.classify_session_update`][acp_fast.protocol.surface.WireSurface.classify_session_update]",
    never "not known". The other fields are what a known [`SessionUpdateView`][acp_fast.protocol.surface.SessionUpdateView] says.
    The roles layer keeps these entries in its per-connection tables (one dict lookup and
    one check per message) and builds a view only when the application asks for one.
    """

    check: Callable[[Any], bool]
    kind: str
    version: int
    type_name: str
    tier: str
    defined_in: tuple[int, ...]

    def view(self, payload: Any) -> SessionUpdateView:
        """The known [`SessionUpdateView`][acp_fast.protocol.surface.SessionUpdateView] of `payload` (which passed `check`)."""
        return SessionUpdateView(
            self.kind, KNOWN, payload, self.version, self.type_name, self.tier, self.defined_in
        )


def _fast_shape_check(
    required: tuple[str, ...],
    fields: tuple[tuple[str, dict[str, Any], bool], ...],
) -> Callable[[Any], bool]:
    """Fast-path check of one variant: required keys, then nested union items.

    `fields` is `((field, tag -> item spec, is_list), ...)`; an item spec is the
    tuple of required keys of a leaf type, or the check of a type with nested unions.
    Items must be plain dicts with a string `type` the surface defines (unknown tags
    of open unions are left to the full classifier).
    """

    if len(fields) == 1 and not fields[0][2] and fields[0][0] in required:
        # The chunk shape (one required content block): no loops around the one item.
        field, table, _is_list = fields[0]
        others = tuple(key for key in required if key != field)

        def check_one(payload: Any) -> bool:
            for key in others:
                if key not in payload:
                    return False
            item = payload.get(field)
            if type(item) is not dict:
                return False
            tag = item.get("type")
            if type(tag) is not str:
                return False
            spec = table.get(tag)
            if type(spec) is tuple:  # leaf: only required keys
                for key in spec:
                    if key not in item:
                        return False
                return True
            return spec is not None and spec(item)

        return check_one

    def check(payload: Any) -> bool:
        for key in required:
            if key not in payload:
                return False
        for field, table, is_list in fields:
            if field not in payload:
                continue
            value = payload[field]
            if not is_list:
                value = (value,)
            elif value is None:
                continue
            elif type(value) is not list:
                return False
            for item in value:
                if type(item) is not dict:
                    return False
                tag = item.get("type")
                if type(tag) is not str:
                    return False
                spec = table.get(tag)
                if spec is None:
                    return False
                if type(spec) is tuple:  # leaf: only required keys
                    for key in spec:
                        if key not in item:
                            return False
                elif not spec(item):
                    return False
        return True

    return check


def _fast_state_check(
    shape_ok: Callable[[Any], bool], states: frozenset[str]
) -> Callable[[Any], bool]:
    """Fast-path check of `state_update`: its shape plus the inner `state`."""

    def check(update: Any) -> bool:
        state = update.get("state")
        if type(state) is not str or state not in states:
            return False
        if state == "idle":
            reason = update.get("stopReason")
            if reason is not None and type(reason) is not str:
                return False
        return shape_ok(update)

    return check


_SURFACES: dict[tuple[int, bool], WireSurface] = {}


class WireSurface:
    """The wire surface of one ACP version (optionally without unstable entries)."""

    __slots__ = (
        "version",
        "unstable",
        "methods",
        "session_update_kinds",
        "state_update_states",
        "idle_stop_reasons",
        "prompt_stop_reasons",
        "content_block_types",
        "tool_call_content_types",
        "_methods",
        "_updates",
        "_states",
        "_unions",
        "_open",
        "_nested",
        "_fast",
    )

    @classmethod
    def for_version(cls, version: int, *, unstable: bool = True) -> WireSurface:
        """The (cached, immutable) surface of ACP `version`.

        Args:
            version: the negotiated protocol version, 1 or 2.
            unstable: include entries only the unstable schema defines
                (capability-gated methods and variants). Default True.

        Raises:
            ValueError: `version` is not one the tables know.
        """
        key = (version, bool(unstable))
        surface = _SURFACES.get(key)
        if surface is None:
            if version not in _gen.VERSIONS:
                raise ValueError(f"unsupported ACP protocol version {version!r}")
            surface = _SURFACES[key] = cls(version, unstable=bool(unstable))
        return surface

    def __init__(self, version: int, *, unstable: bool = True) -> None:
        self.version = version
        self.unstable = unstable
        methods: dict[str, tuple[MethodInfo, ...]] = {}
        for name, rows in _gen.METHODS.items():
            infos = tuple(
                MethodInfo(name, *row)
                for row in rows
                if row[0] == version and (unstable or row[3] == "stable")
            )
            if infos:
                methods[name] = infos
        self._methods = methods
        self._updates = self._select(_gen.SESSION_UPDATES)
        self._states = self._select(_gen.STATE_UPDATE_STATES)
        self._unions = {
            "ContentBlock": self._select(_gen.CONTENT_BLOCKS),
            "ToolCallContent": self._select(_gen.TOOL_CALL_CONTENT),
        }
        self._open = {
            name: dict(rows).get(version, False)
            for name, rows in _gen.OPEN_UNIONS.items()
        }
        self._nested = {
            t: f for (v, t), f in _gen.NESTED_UNIONS.items() if v == version
        }
        self.methods = frozenset(methods)
        self.session_update_kinds = frozenset(self._updates)
        # The state_update discriminator only exists where state_update does (v2).
        has_state = "state_update" in self._updates
        self.state_update_states = frozenset(self._states if has_state else ())
        self.idle_stop_reasons = (
            self._values(_gen.IDLE_STOP_REASONS)
            if self.state_update_states
            else frozenset()
        )
        self.prompt_stop_reasons = self._values(_gen.PROMPT_STOP_REASONS)
        self.content_block_types = frozenset(self._unions["ContentBlock"])
        self.tool_call_content_types = frozenset(self._unions["ToolCallContent"])
        self._fast = self._compile_fast_checks()

    def _select(
        self, table: dict[str, Any]
    ) -> dict[str, tuple[str, str, tuple[str, ...]]]:
        """`tag -> (tier, type_name, required_keys)` for this surface."""
        out = {}
        for tag, rows in table.items():
            for version, tier, type_name, required in rows:
                if version == self.version and (self.unstable or tier == "stable"):
                    out[tag] = (tier, type_name, required)
        return out

    def _values(self, table: dict[str, Any]) -> frozenset[str]:
        return frozenset(
            value
            for value, rows in table.items()
            if any(
                v == self.version and (self.unstable or t == "stable") for v, t in rows
            )
        )

    def __repr__(self) -> str:
        return f"WireSurface(version={self.version}, unstable={self.unstable})"

    # -- methods -----------------------------------------------------------------

    def has_method(self, name: str, kind: str | None = None) -> bool:
        """True if this version's schema defines `name` (as `kind`, if given)."""
        return self.method_info(name, kind) is not None

    def method_info(self, name: str, kind: str | None = None) -> MethodInfo | None:
        """The method's entry (the request entry first when it has both kinds)."""
        infos = self._methods.get(name)
        if infos is None:
            return None
        if kind is None:
            return min(infos, key=lambda info: info.kind != "request")
        for info in infos:
            if info.kind == kind:
                return info
        return None

    def check_outgoing_method(
        self, method: str, kind: str | None = None, *, passthrough: bool = False
    ) -> None:
        """Write guard for a method about to be sent.

        Args:
            method: the JSON-RPC method name.
            kind: "request" or "notification", to check the kind too.
            passthrough: skip the guard (relays forwarding what they received).

        Raises:
            WireSurfaceError: the negotiated version does not define `method`
                (as `kind`). `_`-prefixed and `$/`-prefixed methods pass.
        """
        if passthrough or is_extension_method(method):
            return
        infos = self._methods.get(method)
        v = self.version
        if infos is None:
            hint = self._elsewhere(_versions(_gen.METHODS.get(method, ())))
            raise WireSurfaceError(
                f"method '{method}' is not defined in ACP v{v}{hint}",
                variant=method,
                version=v,
            )
        if kind is not None and all(info.kind != kind for info in infos):
            raise WireSurfaceError(
                f"method '{method}' is not a {kind} in ACP v{v}",
                variant=method,
                version=v,
            )

    def methods_of_kind(self, kind: str) -> frozenset[str]:
        """Every method this version defines as `kind` (`"request"`/`"notification"`).

        With [`is_extension_method`][acp_fast.protocol.surface.is_extension_method], the table the write guard's fast path uses.
        """
        return frozenset(
            name for name, infos in self._methods.items() if any(i.kind == kind for i in infos)
        )

    # -- session/update ------------------------------------------------------------

    def classify_session_update(self, update: Json) -> SessionUpdateView:
        """Read gate for the `update` object of a `session/update` notification.

        Never raises and never copies: the returned view's `payload` is `update`.
        """
        # Strategy: ``_fast`` holds, per variant this surface defines, a check
        # compiled from the same tables (required keys, nested content unions, the
        # state_update ``state``) that only answers "known, this version's shape",
        # with key lookups and exact type tests. Whatever it does not positively
        # accept (other versions, unknown tags, malformed or unusual payloads, dict
        # subclasses) goes to ``_classify_full``, the only place diagnostics are
        # built. So the fast path can only return what the full classifier returns
        # (tests/test_protocol_surfaces.py compares both over the tables).
        fast = self.known_variant(update)
        if fast is not None:
            return fast.view(update)
        return self._classify_full(update)

    @property
    def known_variants(self) -> Mapping[str, KnownVariant]:
        """`sessionUpdate` value -> its [`KnownVariant`][acp_fast.protocol.surface.KnownVariant] (read-only)."""
        return MappingProxyType(self._fast)

    def known_variant(self, update: Json) -> KnownVariant | None:
        """The fast path alone: the [`KnownVariant`][acp_fast.protocol.surface.KnownVariant] when `update` is known in this
        version's shape, else None (not a verdict: ask [`classify_session_update`][acp_fast.protocol.surface.WireSurface.classify_session_update])."""
        if type(update) is dict:
            kind = update.get("sessionUpdate")
            if type(kind) is str:
                fast = self._fast.get(kind)
                if fast is not None and fast[0](update):
                    return fast
        return None

    def _classify_full(self, update: Any) -> SessionUpdateView:
        """The complete read gate (diagnostics for everything that is not known)."""
        v = self.version
        if not isinstance(update, dict):
            return SessionUpdateView(
                "", MALFORMED, update, v, detail="update is not an object"
            )
        kind = update.get("sessionUpdate")
        if not isinstance(kind, str):
            detail = "update has no string 'sessionUpdate'"
            return SessionUpdateView("", MALFORMED, update, v, detail=detail)
        row = self._updates.get(kind)
        defined = _UPDATE_VERSIONS.get(kind, ())
        if row is None:
            status, detail = self._absent("session update", kind, defined)
            return SessionUpdateView(
                kind, status, update, v, defined_in=defined, detail=detail
            )
        tier, type_name, required = row
        problem = None
        for key in required:
            if key not in update:
                rows = _gen.SESSION_UPDATES[kind]
                problem = self._shape(
                    update, required, rows, f"session update '{kind}'"
                )
                break
        if problem is None and kind == "state_update":
            problem = self._check_state(update)
        if problem is None:
            nested = self._nested.get(type_name)
            if nested:
                problem = self._check_nested(nested, update, f"session update '{kind}'")
        if problem is not None:
            status, detail, where = problem
            return SessionUpdateView(
                kind, status, update, v, defined_in=where, detail=detail
            )
        return SessionUpdateView(kind, KNOWN, update, v, type_name, tier, defined)

    def check_outgoing_session_update(
        self, update: _U, *, passthrough: bool = False
    ) -> _U:
        """Write guard for a locally built `session/update` `update` object.

        Args:
            update: the `update` object (with `sessionUpdate`).
            passthrough: skip the guard for a payload received from a peer and
                forwarded unchanged (relays, storage replay).

        Returns:
            `update` itself.

        Raises:
            WireSurfaceError: the negotiated version does not define the variant
                (including v2's inner `state` and nested content shapes). On a
                v2 surface, `_`-prefixed extension variants pass (open union).
        """
        if passthrough:
            return update
        view = self.classify_session_update(update)
        if view.status == KNOWN:
            return update
        if (
            view.status == UNKNOWN
            and view.kind[:1] == "_"
            and self._open["SessionUpdate"]
        ):
            return update
        raise WireSurfaceError(
            view.detail
            or f"session update {view.kind!r} is not valid in ACP v{self.version}",
            variant=view.kind,
            version=self.version,
        )

    # -- read gate fast path -----------------------------------------------------------

    def _compile_fast_checks(
        self,
    ) -> dict[str, KnownVariant]:
        """`kind -> KnownVariant` per variant this surface defines.

        `check(update)` is True only if `_classify_full` would call `update`
        known; False means "ask the full classifier", never "not known".
        """
        items: dict[str, dict[str, Any]] = {}  # union -> tag -> item spec

        def shape_check(
            type_name: str, required: tuple[str, ...]
        ) -> Callable[[Any], bool]:
            fields = tuple(
                (field, union_items(union_name), is_list)
                for field, union_name, is_list in self._nested.get(type_name, ())
            )
            return _fast_shape_check(required, fields)

        def union_items(union_name: str) -> dict[str, Any]:
            table = items.get(union_name)
            if table is None:  # registered before filling: nested unions may recurse
                table = items[union_name] = {}
                for tag, row in self._unions[union_name].items():
                    _tier, type_name, required = row
                    nested = self._nested.get(type_name)
                    leaf = not nested  # a leaf item only needs its required keys
                    table[tag] = required if leaf else shape_check(type_name, required)
            return table

        fast = {}
        for kind, (tier, type_name, required) in self._updates.items():
            check = shape_check(type_name, required)
            if kind == "state_update":
                check = _fast_state_check(check, frozenset(self._states))
            defined = _UPDATE_VERSIONS.get(kind, ())
            fast[kind] = KnownVariant(check, kind, self.version, type_name, tier, defined)
        return fast

    def gate_specs(self) -> dict[str, tuple[KnownVariant, tuple[Any, ...], frozenset[str] | None]]:
        """The read gate's fast path as data, for a compiled gate (`acp_fast.protocol.gate`).

        `kind -> (variant, spec, states)`: `spec` is `(required_keys, fields)` with
        `fields` a tuple of `(field, table, is_list)` and `table` a dict
        `tag -> spec` of the union's items (a leaf item's spec has no fields; nested
        unions may refer back to a table being filled). `states` is the set of inner
        `state` values for `state_update` (None elsewhere). A compiled gate that
        follows these specs accepts exactly what [`known_variant`][acp_fast.protocol.surface.WireSurface.known_variant] accepts.
        """
        tables: dict[str, dict[str, Any]] = {}

        def spec_of(type_name: str, required: tuple[str, ...]) -> tuple[Any, ...]:
            fields = tuple(
                (field, table_of(union_name), is_list)
                for field, union_name, is_list in self._nested.get(type_name, ())
            )
            return (required, fields)

        def table_of(union_name: str) -> dict[str, Any]:
            table = tables.get(union_name)
            if table is None:  # registered before filling: nested unions may recurse
                table = tables[union_name] = {}
                for tag, (_tier, type_name, required) in self._unions[union_name].items():
                    table[tag] = spec_of(type_name, required)
            return table

        out = {}
        for kind, (_tier, type_name, required) in self._updates.items():
            states = frozenset(self._states) if kind == "state_update" else None
            out[kind] = (self._fast[kind], spec_of(type_name, required), states)
        return out

    # -- helpers -------------------------------------------------------------------

    def _elsewhere(self, defined: tuple[int, ...]) -> str:
        if self.version in defined:
            return (
                f" (it is unstable in ACP v{self.version}; this surface is stable-only)"
            )
        if defined:
            return " (it is defined in " + ", ".join(f"ACP v{d}" for d in defined) + ")"
        return ""

    def _absent(
        self, label: str, tag: str, defined: tuple[int, ...]
    ) -> tuple[str, str]:
        status = OTHER_VERSION if defined and self.version not in defined else UNKNOWN
        hint = self._elsewhere(defined)
        return status, f"{label} '{tag}' is not defined in ACP v{self.version}{hint}"

    def _shape(
        self,
        payload: dict[str, Any],
        required: tuple[str, ...],
        rows: tuple[tuple[Any, ...], ...],
        label: str,
    ) -> tuple[str, str, tuple[int, ...]] | None:
        """Check `required` keys; attribute a mismatch to another version's shape."""
        missing = [key for key in required if key not in payload]
        if not missing:
            return None
        names = ", ".join(f"'{key}'" for key in missing)
        v = self.version
        shapes = tuple(
            sorted(
                {
                    row[0]
                    for row in rows
                    if row[0] != v and all(k in payload for k in row[3])
                }
            )
        )
        if shapes:
            other = " / ".join(f"ACP v{s}" for s in shapes)
            detail = f"{label} has the {other} shape, not the ACP v{v} shape (missing {names})"
            return OTHER_VERSION, detail, shapes
        return MALFORMED, f"{label} is missing {names} required in ACP v{v}", ()

    def _check_state(
        self, update: dict[str, Any]
    ) -> tuple[str, str, tuple[int, ...]] | None:
        """The v2 `state` discriminator beside `sessionUpdate: state_update`."""
        v = self.version
        state = update.get("state")
        if not isinstance(state, str):
            return MALFORMED, f"state_update has no string 'state' (ACP v{v})", ()
        if state not in self._states:
            defined = _versions(_gen.STATE_UPDATE_STATES.get(state, ()))
            hint = self._elsewhere(defined) if v in defined else ""
            return (
                UNKNOWN,
                f"state_update state '{state}' is not defined in ACP v{v}{hint}",
                (),
            )
        reason = update.get("stopReason")
        if state == "idle" and reason is not None and not isinstance(reason, str):
            return (
                MALFORMED,
                f"state_update 'idle' stopReason is not a string (ACP v{v})",
                (),
            )
        return None

    def _check_nested(
        self,
        fields: tuple[tuple[str, str, bool], ...],
        payload: dict[str, Any],
        where: str,
    ) -> tuple[str, str, tuple[int, ...]] | None:
        """Check content blocks / tool call content held by `payload`."""
        for field, union_name, is_list in fields:
            if field not in payload:
                continue
            value = payload[field]
            if is_list:
                if value is None:
                    continue
                if not isinstance(value, list):
                    return (
                        MALFORMED,
                        f"{where}: '{field}' is not a list (ACP v{self.version})",
                        (),
                    )
                for index, item in enumerate(value):
                    problem = self._check_item(union_name, item, where, field, index)
                    if problem is not None:
                        return problem
            else:
                problem = self._check_item(union_name, value, where, field, None)
                if problem is not None:
                    return problem
        return None

    def _check_item(
        self, union_name: str, item: Any, where: str, field: str, index: int | None
    ) -> tuple[str, str, tuple[int, ...]] | None:
        """Check one nested union item; diagnostics are only formatted on failure."""
        tag = item.get("type") if isinstance(item, dict) else None
        row = self._unions[union_name].get(tag) if isinstance(tag, str) else None
        if row is not None:
            _tier, type_name, required = row
            nested = self._nested.get(type_name)
            if not nested and all(key in item for key in required):
                return None  # fast path: a known item of this version's shape
        v = self.version
        label = _UNION_LABELS[union_name]
        path = f"{where}: {field}" if index is None else f"{where}: {field}[{index}]"
        if not isinstance(tag, str):
            detail = f"{path} is not a {label} object with a string 'type' (ACP v{v})"
            return MALFORMED, detail, ()
        table = (
            _gen.CONTENT_BLOCKS
            if union_name == "ContentBlock"
            else _gen.TOOL_CALL_CONTENT
        )
        all_rows = table.get(tag, ())
        if row is None:
            defined = _versions(all_rows)
            if not defined and self._open[union_name]:
                return None  # open union: an unknown tag is legal; the item stays raw
            status, detail = self._absent(f"{path}: {label}", tag, defined)
            return status, detail, defined
        where = f"{path}: {label} '{tag}'"
        problem = self._shape(item, required, all_rows, where)
        if problem is None and nested:
            problem = self._check_nested(nested, item, where)
        return problem
