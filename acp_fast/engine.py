"""The sans-IO engine (public namespace and selector): the compiled twin unless `ACP_FAST_NO_EXTENSIONS`.

Import engine names from here (`from acp_fast.engine import Decoder`), never from a twin by name.
`IMPLEMENTATION` says which twin is active: `"c"` or `"py"`. Type checkers only see
the pure-Python twin, which is the typed interface of both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._compat import NO_EXTENSIONS

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._engine_py import *  # noqa: F401,F403
    from ._engine_py import __all__  # noqa: F401
else:
    try:
        from ._engine_c import *  # type: ignore[import-not-found]  # noqa: F401,F403
        from ._engine_c import __all__  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:  # pragma: no cover - only when the extension was not built
        from ._engine_py import *  # noqa: F401,F403
        from ._engine_py import __all__  # noqa: F401
