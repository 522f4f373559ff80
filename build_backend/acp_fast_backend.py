"""In-tree PEP 517 backend: setuptools, plus the compiled twins' build requirements only when
they are built.

``pyproject.toml`` lists only setuptools as the static build requirement. Cython and
pysimdjson (which ships the simdjson amalgamation compiled into the engine) are requested
through ``get_requires_for_build_wheel``/``_editable``, and not at all when
``ACP_FAST_NO_EXTENSIONS`` is set: a pure-Python build downloads and needs neither. Building
an sdist needs neither either (it ships the sources, never generated C/C++).
"""

from __future__ import annotations

import os

from setuptools import build_meta as _orig
from setuptools.build_meta import (  # noqa: F401  (the hooks setuptools answers unchanged)
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

# The compiled twins' build requirements (kept in step with README and .ci/run).
EXTENSION_REQUIRES = ["Cython>=3.0.10,<4", "pysimdjson==7.0.2"]


def _no_extensions() -> bool:
    return os.environ.get("ACP_FAST_NO_EXTENSIONS", "") not in ("", "0")


def _extension_requires() -> list[str]:
    return [] if _no_extensions() else list(EXTENSION_REQUIRES)


def get_requires_for_build_wheel(config_settings=None):  # type: ignore[no-untyped-def]
    return [*_orig.get_requires_for_build_wheel(config_settings), *_extension_requires()]


def get_requires_for_build_editable(config_settings=None):  # type: ignore[no-untyped-def]
    return [*_orig.get_requires_for_build_editable(config_settings), *_extension_requires()]
