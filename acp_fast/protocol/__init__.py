"""ACP protocol semantics for acp_fast: per-version wire surfaces and schema types.

Modules:

- ``surface``: ``WireSurface.for_version(1 | 2)``, the read gate
  (``classify_session_update``) and the write guard (``check_outgoing_*``),
  driven by the generated tables in ``_surface_gen``.
- ``errors``: ``WireSurfaceError``.
- ``types_v1`` / ``types_v2``: generated ``TypedDict`` schema types. They are
  never imported eagerly (start-up budget); import them where you annotate.

The generated modules come from ``scripts/gen_surfaces.py``; see its docstring
for how to regenerate them.
"""
