"""Build script: only the extension list and the ACP_FAST_* knobs (metadata is in pyproject).

Knobs (environment variables):

* ``ACP_FAST_NO_EXTENSIONS=1``  build no extension (pure-Python install).
* ``ACP_FAST_DEBUG_BUILD=1``    ``-O0 -g3``, assertions on, Cython bounds checks on.
* ``ACP_FAST_SANITIZE=1``       AddressSanitizer + UndefinedBehaviorSanitizer (implies debug).
* ``ACP_FAST_SIMDJSON_DIR=DIR`` take ``simdjson.h``/``simdjson.cpp`` from DIR instead of the
  installed ``pysimdjson`` build requirement.

The extensions are only set up for commands that build (``build_ext``, ``bdist_wheel``,
``editable_wheel``...): metadata and sdist commands (``egg_info``, ``dist_info``, ``sdist``)
need neither Cython nor pysimdjson, and the sdist ships the ``.pyx``/``.pxd``/C++ sources
(see MANIFEST.in), never generated C/C++ (which would embed build paths). The in-tree
backend (``build_backend/acp_fast_backend.py``) asks for Cython and pysimdjson only when
the extensions are built.

When extensions are wanted, a failure to find simdjson or to compile is an error: the build
never silently falls back to pure Python.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


NO_EXTENSIONS = _flag("ACP_FAST_NO_EXTENSIONS")
SANITIZE = _flag("ACP_FAST_SANITIZE")
DEBUG = _flag("ACP_FAST_DEBUG_BUILD") or SANITIZE


def simdjson_dir() -> Path:
    """The folder holding the simdjson amalgamation (from pysimdjson's installed files)."""
    override = os.environ.get("ACP_FAST_SIMDJSON_DIR")
    if override:
        path = Path(override)
    else:
        spec = importlib.util.find_spec("simdjson")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(
                "acp_fast: the build requirement 'pysimdjson' is not installed; it ships the "
                "simdjson amalgamation the extension is compiled from "
                "(pip install pysimdjson==7.0.2, or build with ACP_FAST_NO_EXTENSIONS=1)"
            )
        path = Path(list(spec.submodule_search_locations)[0])
    for name in ("simdjson.h", "simdjson.cpp"):
        if not (path / name).is_file():
            raise SystemExit(f"acp_fast: {path / name} not found (simdjson amalgamation)")
    return path


def extensions() -> list[Extension]:
    from Cython.Build import cythonize

    sj = simdjson_dir()
    compile_args = ["-std=c++17", "-fvisibility=hidden"]
    link_args: list[str] = []
    if DEBUG:
        compile_args += ["-O0", "-g3", "-UNDEBUG"]
    else:
        compile_args += ["-O3", "-DNDEBUG"]
    if SANITIZE:
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        compile_args += san
        link_args += san
    ext = Extension(
        "acp_fast._engine_c",
        sources=["acp_fast/_engine_c.pyx", *sorted(str(p) for p in (HERE / "csrc").glob("*.cpp")),
                 str(sj / "simdjson.cpp")],
        include_dirs=["csrc", str(sj)],
        language="c++",
        extra_compile_args=compile_args,
        extra_link_args=link_args,
        define_macros=[("SIMDJSON_EXCEPTIONS", "0")],
    )
    gate = Extension(
        "acp_fast.protocol._gate_c",
        sources=["acp_fast/protocol/_gate_c.pyx"],
        extra_compile_args=[a for a in compile_args if a != "-std=c++17"],
        extra_link_args=link_args,
    )
    hot = Extension(
        "acp_fast.roles._hot_c",
        sources=["acp_fast/roles/_hot_py.py"],  # one source, compiled (with _hot_c.pxd),
        extra_compile_args=[a for a in compile_args if a != "-std=c++17"],
        extra_link_args=link_args,
    )
    directives = {
        "language_level": "3",
        "boundscheck": DEBUG,
        "wraparound": False,
        "cdivision": True,
        "embedsignature": True,
    }
    return cythonize([ext, gate, hot], compiler_directives=directives, annotate=False, quiet=True)


# The commands that compile (setuptools' PEP 517 backend runs them in-process with these
# names in sys.argv); any other (egg_info, dist_info, sdist, ...) only writes metadata or the
# sdist and must not need Cython or pysimdjson.
BUILD_COMMANDS = frozenset({"build", "build_ext", "bdist", "bdist_wheel", "bdist_egg", "editable_wheel",
                            "develop", "install"})


def builds_code(argv: list[str]) -> bool:
    return bool(BUILD_COMMANDS.intersection(argv))


if NO_EXTENSIONS:
    print("*** acp_fast: pure-Python build (ACP_FAST_NO_EXTENSIONS set) ***", file=sys.stderr)
    setup(ext_modules=[])
elif not builds_code(sys.argv[1:]):
    setup(ext_modules=[])
else:
    print("*** acp_fast: accelerated build (Cython + C++ + simdjson) ***", file=sys.stderr)
    setup(ext_modules=extensions())
