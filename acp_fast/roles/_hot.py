"""Selector of the hot-path twin: compiled unless `ACP_FAST_NO_EXTENSIONS` (see `_hot_py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._compat import NO_EXTENSIONS

__all__ = ["COMPILED", "IMPLEMENTATION", "Context", "NotificationHandler", "ProxyContext", "RequestHandler", "SessionUpdate",
           "UpdateDispatcher", "Sender"]

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._hot_py import (
        Context,
        NotificationHandler,
        ProxyContext,
        RequestHandler,
        SessionUpdate,
        UpdateDispatcher,
        Sender,
    )

    IMPLEMENTATION = "py"
    #: capability flag: the compiled hot path is active (it calls the compiled read gate at C level)
    COMPILED = False
else:
    try:
        from ._hot_c import (  # type: ignore[import-not-found]
            Context,
            NotificationHandler,
            ProxyContext,
            RequestHandler,
            SessionUpdate,
            UpdateDispatcher,
            Sender,
        )

        IMPLEMENTATION = "c"
        COMPILED = True
    except ImportError:  # pragma: no cover - only when the extension was not built
        from ._hot_py import (
            Context,
            NotificationHandler,
            ProxyContext,
            RequestHandler,
            SessionUpdate,
            UpdateDispatcher,
            Sender,
        )

        IMPLEMENTATION = "py"
        COMPILED = False
