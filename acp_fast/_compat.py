"""The one place that reads `ACP_FAST_NO_EXTENSIONS` (and knows the interpreter).

`NO_EXTENSIONS` is true when the variable is set to a non-empty value other than `0`,
or when the interpreter is not CPython (the compiled twin is CPython-only).
"""

from __future__ import annotations

import os
import platform

__all__ = ["NO_EXTENSIONS"]

NO_EXTENSIONS: bool = os.environ.get("ACP_FAST_NO_EXTENSIONS", "") not in ("", "0") or (
    platform.python_implementation() != "CPython"
)
