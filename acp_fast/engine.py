"""The sans-IO engine (public namespace and selector): the compiled twin unless `ACP_FAST_NO_EXTENSIONS`.

Import engine names from here (`from acp_fast.engine import Decoder`), never from a twin by name.
`IMPLEMENTATION` says which twin is active: `"c"` or `"py"`. Type checkers only see
the pure-Python twin, which is the typed interface of both.

[`Engine`][acp_fast.engine.Engine] is the seam the layers above take an engine by: a protocol
that both twin modules satisfy (checked by mypy below and by a test), with capability flags
(`COMPILED`) where an upper layer would otherwise test `IMPLEMENTATION == "c"`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._compat import NO_EXTENSIONS
from ._rawjson import RawJson as _RawJson
from .jsontypes import Json, RequestId

if TYPE_CHECKING or NO_EXTENSIONS:
    from ._engine_py import *  # noqa: F401,F403
    from ._engine_py import __all__ as _twin_all
else:
    try:
        from ._engine_c import *  # type: ignore[import-not-found]  # noqa: F401,F403
        from ._engine_c import __all__ as _twin_all  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - only when the extension was not built
        from ._engine_py import *  # noqa: F401,F403
        from ._engine_py import __all__ as _twin_all

__all__ = [*_twin_all, "Engine"]


@runtime_checkable
class Engine(Protocol):
    """An engine twin as the layers above see it: `acp_fast._engine_py`, `acp_fast._engine_c` or
    the selected `acp_fast.engine` (a module satisfies it; see `_engine_py` for each member).

    Capability flags say what a twin can do, so that no upper layer tests its name:
    `COMPILED` (the compiled twin: its encoders splice a `RawJson` inside a dict in one copy).
    """

    @property
    def IMPLEMENTATION(self) -> str:  # noqa: N802 - a module constant
        """`"c"` or `"py"` (for reports; decide on capability flags)."""
        ...

    @property
    def COMPILED(self) -> bool:  # noqa: N802
        """The twin is compiled."""
        ...

    @property
    def REQUEST(self) -> int:  # noqa: N802
        """Frame kind of a request."""
        ...

    @property
    def NOTIFICATION(self) -> int:  # noqa: N802
        """Frame kind of a notification."""
        ...

    @property
    def RESPONSE(self) -> int:  # noqa: N802
        """Frame kind of a response."""
        ...

    @property
    def BATCH(self) -> int:  # noqa: N802
        """Frame kind of a batch."""
        ...

    @property
    def MALFORMED(self) -> int:  # noqa: N802
        """Frame kind of a malformed line."""
        ...

    @property
    def RawJson(self) -> type[_RawJson]:  # noqa: N802
        """The raw JSON value type (one class shared by both twins)."""
        ...

    @property
    def Decoder(self) -> Callable[..., Any]:  # noqa: N802
        """`Decoder(*, lazy=False, max_line_size=…, max_depth=…, max_batch_size=…)`."""
        ...

    @property
    def LineSplitter(self) -> Callable[..., Any]:  # noqa: N802
        """`LineSplitter(*, max_line_size=…)`."""
        ...

    @property
    def Forwarder(self) -> Callable[..., Any]:  # noqa: N802
        """The conductor's forwarding core."""
        ...

    @property
    def Outbox(self) -> Callable[..., Any]:  # noqa: N802
        """A connection's coalescing write buffer."""
        ...

    @property
    def BatchReply(self) -> Callable[..., Any]:  # noqa: N802
        """The reply being assembled for one batch."""
        ...

    def encode_value(self, obj: Json, /) -> bytes:
        """One JSON value."""
        ...

    def encode_request(self, id: RequestId | None, method: str, params: Json = None, /) -> bytes:
        """A request line."""
        ...

    def encode_notification(self, method: str, params: Json = None, /) -> bytes:
        """A notification line."""
        ...

    def encode_result(self, id: RequestId | None, result: Json, /) -> bytes:
        """A result line."""
        ...

    def encode_error(self, id: RequestId | None, code: int, message: str | None = None, /) -> bytes:
        """An error line (`data` keyword left to the twin)."""
        ...

    def encode_batch(self, lines: Iterable[bytes], /) -> bytes:
        """A batch line of encoded lines."""
        ...

    def error_reply(self, malformed: Any, /) -> bytes | None:
        """The error line answering a malformed frame (None: nothing to answer)."""
        ...

    @property
    def forward(self) -> Callable[..., bytes]:
        """`forward(message, id=…)`: the message's line, with a new id spliced in."""
        ...


if TYPE_CHECKING:  # both twins satisfy the seam (mypy checks these two assignments)
    from . import _engine_c as _c_twin
    from . import _engine_py as _py_twin

    _PY_TWIN: Engine = _py_twin
    _C_TWIN: Engine = _c_twin
