"""The processes of a run start from cached bytecode, as an installed package does.

A Python process compiles every module it imports whose bytecode cache (`__pycache__/*.pyc`
beside the source, or under `PYTHONPYCACHEPREFIX`) is missing or out of date, and writes the
result back only when it may: not under `PYTHONDONTWRITEBYTECODE` / `-B`, nor in a folder it
cannot write. A wheel installed by pip comes with its bytecode; a checkout or an editable
install has it only once some process wrote it. Without it, every process of a row compiles
its modules again at every start, and the start-up row (spawn → `initialize` response)
measures the compiler: on 2 shared cores, Testy on a checkout without caches answered
`initialize` after 250-280 ms (230 ms of its CPU time), the same commit with them after
130-160 ms (120 ms), and that gap grows with the package's source, not with what the agent
does when it starts.

So before it measures, `acp-fast bench` compiles the folders its processes import from
(`bench_folders`: this `acp_fast` package and the peers' Python files) with
`ensure_bytecode`, which writes only what is missing or stale, whatever
`PYTHONDONTWRITEBYTECODE` says; `uncached` lists what a process would still compile
(a folder it cannot write), which the run's notes then name.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Bytecode", "bench_folders", "ensure_bytecode", "uncached"]

#: Folders never compiled nor checked (a Node.js peer's dependencies may ship Python files).
_SKIP = re.compile(r"node_modules|__pycache__|\..*")

_FLAG_HASHED = 0b01
_FLAG_CHECK_SOURCE = 0b10


def _sources(folder: Path) -> list[Path]:
    out: list[Path] = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not _SKIP.fullmatch(d))
        out.extend(Path(top, f) for f in sorted(files) if f.endswith(".py"))
    return out


def _cached(source: Path) -> bool:
    """Whether the interpreter would load `source` from its bytecode cache (the importer's
    rule: the magic number, then the source's mtime and size, or its hash when checked)."""
    try:
        with open(importlib.util.cache_from_source(str(source)), "rb") as f:
            header = f.read(16)
        st = source.stat()
    except (OSError, ValueError, NotImplementedError):
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags & _FLAG_HASHED:
        if not flags & _FLAG_CHECK_SOURCE:
            return True
        try:
            return header[8:16] == importlib.util.source_hash(source.read_bytes())
        except OSError:
            return False
    return (int.from_bytes(header[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == st.st_size & 0xFFFFFFFF)


def uncached(folders: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The Python files under `folders` whose bytecode a process would compile on import
    (no cache, or one older than the source)."""
    return [str(p) for folder in folders for p in _sources(Path(folder)) if not _cached(p)]


@dataclass(frozen=True)
class Bytecode:
    """What `ensure_bytecode` did.

    Attributes:
        compiled: files whose bytecode was missing or stale and is now written.
        uncached: files still without usable bytecode (a folder this process cannot write):
            every process that imports them compiles them at its start.
    """

    compiled: int
    uncached: list[str] = field(default_factory=list)


def ensure_bytecode(folders: Iterable[str | os.PathLike[str]]) -> Bytecode:
    """Write the missing or stale bytecode of the Python files under `folders`.

    Writes even under `PYTHONDONTWRITEBYTECODE` (an explicit compile, as pip's at install);
    a file that cannot be written is left as it is and named in `Bytecode.uncached`.
    """
    todo = [Path(f) for f in folders if Path(f).is_dir()]
    before = uncached(todo)
    for path in before:  # forced: compileall's own check reads the mtime only, not the size
        compileall.compile_file(path, quiet=2, force=True)
    after = uncached(todo)
    return Bytecode(compiled=len(before) - len(after), uncached=after)


def bench_folders() -> list[Path]:
    """The folders the processes of `acp-fast bench` import Python files from beyond the
    interpreter's site folders (whose packages pip compiled): this `acp_fast` package and
    the peers' folder, when one was found."""
    from . import registry
    from .runtime import PACKAGE_DIR

    folders = [Path(PACKAGE_DIR)]
    if registry.PEERS_FROM is not None:
        folders.append(registry.PEERS)
    return folders
