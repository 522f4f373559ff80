"""Where children find the ``acp_fast`` under test (not a test module).

The suite tests whatever ``acp_fast`` this process imported: an installed wheel, an
editable install, or a checkout that shadows them (``build_ext --inplace`` and pytest run
from the repository root). Children (agents, Testy, the examples, the bench CLI) must import
the same one, so :func:`pythonpath` puts the folder holding *that* package on their
``PYTHONPATH``, and nothing when it is installed in one of the interpreter's site folders
(the child's own ``sys.path`` already has it; the repository root must not shadow it).
"""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path

import acp_fast

#: The folder holding the imported ``acp_fast`` package.
PACKAGE_ROOT = Path(acp_fast.__file__).resolve().parent.parent


def _site_dirs() -> set[Path]:
    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    dirs.update(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.add(site.getusersitepackages())
    return {Path(d).resolve() for d in dirs}


INSTALLED = PACKAGE_ROOT in _site_dirs()


def pythonpath(existing: str | None = None) -> str:
    """A child's ``PYTHONPATH`` (``existing`` kept after ours) so it imports the package
    under test."""
    if existing is None:
        existing = os.environ.get("PYTHONPATH", "")
    first = [] if INSTALLED else [str(PACKAGE_ROOT)]
    return os.pathsep.join(p for p in (*first, existing) if p)
