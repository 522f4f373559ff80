"""ACP protocol semantics for acp_fast: per-version wire surfaces and schema types.

Modules:

- `surface`: `WireSurface.for_version(1 | 2)`, the read gate
  (`classify_session_update`) and the write guard (`check_outgoing_*`),
  driven by the generated tables in `_surface_gen`.
- `errors`: `WireSurfaceError`.
- `profile`: `VersionProfile`, what differs between v1 and v2 as data (`profile_of(version)`);
  the only module that compares version numbers.
- `facts`: the protocol facts every layer branches on (`INITIALIZE`,
  `CANCEL_REQUEST`, the session setup methods, the session-scoped methods, the proxy
  spellings, ...), spelled once; every layer imports them from here.
- `types_v1` / `types_v2`: generated `TypedDict` schema types. They are
  never imported eagerly (start-up budget); import them where you annotate.
- `methods`: `Method` / `RequestMethod` / `NotificationMethod`, typed
  method descriptors; `methods_v1` / `methods_v2`: the generated descriptors
  of each version (`from acp_fast.protocol import methods_v2 as methods`, then
  `methods.session.prompt`). Cheap to import (the schema types are imported
  for type checkers only), but not imported by `acp_fast` itself.

The generated modules come from `scripts/gen_surfaces.py`; see its docstring
for how to regenerate them.
"""
