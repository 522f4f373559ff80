# Stub of the compiled engine twin (acp_fast/_engine_c.pyx). Its API is the pure twin's
# (acp_fast/_engine_py.py), which stays the reference: keep both in step (mypy.stubtest
# checks this stub against the built module in CI).
from collections.abc import Iterable, Iterator
from typing import Any, Final, TypeAlias

from typing_extensions import disjoint_base

from acp_fast._kinds import BATCH as BATCH
from acp_fast._kinds import MALFORMED as MALFORMED
from acp_fast._kinds import NOTIFICATION as NOTIFICATION
from acp_fast._kinds import REQUEST as REQUEST
from acp_fast._kinds import RESPONSE as RESPONSE
from acp_fast._rawjson import RawJson as RawJson
from acp_fast._replies import BatchReply as BatchReply
from acp_fast._replies import error_reply as error_reply
from acp_fast._strictjson import MAX_DEPTH_LIMIT as MAX_DEPTH_LIMIT

__all__ = [
    "IMPLEMENTATION",
    "REQUEST",
    "NOTIFICATION",
    "RESPONSE",
    "BATCH",
    "MALFORMED",
    "DEFAULT_MAX_LINE_SIZE",
    "DEFAULT_MAX_DEPTH",
    "MAX_DEPTH_LIMIT",
    "DEFAULT_MAX_BATCH_SIZE",
    "RawJson",
    "Message",
    "Batch",
    "Malformed",
    "Frame",
    "Decoder",
    "encode_request",
    "encode_notification",
    "encode_result",
    "encode_error",
    "encode_batch",
    "encode_value",
    "forward",
    "BatchReply",
    "error_reply",
]

IMPLEMENTATION: Final[str]
DEFAULT_MAX_LINE_SIZE: Final[int]
DEFAULT_MAX_DEPTH: Final[int]
DEFAULT_MAX_BATCH_SIZE: Final[int]

@disjoint_base
class Message:
    kind: int
    id: int | str | None
    method: str | None
    error: dict[str, Any] | None
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    @property
    def params(self) -> Any: ...
    @property
    def result(self) -> Any: ...
    @property
    def params_raw(self) -> RawJson | None: ...
    @property
    def result_raw(self) -> RawJson | None: ...
    @property
    def raw(self) -> RawJson: ...
    @property
    def is_error(self) -> bool: ...

@disjoint_base
class Batch:
    kind: int
    entries: list[Message | Malformed]
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    @property
    def raw(self) -> RawJson: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Message | Malformed]: ...
    def __getitem__(self, i: int, /) -> Message | Malformed: ...

@disjoint_base
class Malformed:
    kind: int
    raw: bytes
    code: int
    reason: str
    response_shaped: bool
    def __init__(self, raw: bytes, code: int, reason: str, response_shaped: bool = False) -> None: ...

Frame: TypeAlias = Message | Batch | Malformed

@disjoint_base
class Decoder:
    def __init__(
        self,
        *,
        lazy: bool = False,
        max_line_size: int = ...,
        max_depth: int = ...,
        max_batch_size: int = ...,
    ) -> None: ...
    @property
    def lazy(self) -> bool: ...
    @property
    def max_line_size(self) -> int: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def max_batch_size(self) -> int: ...
    @property
    def buffered(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]: ...
    def feed_eof(self) -> list[Frame]: ...

def encode_value(obj: Any) -> bytes: ...
def encode_request(id: int | str | None, method: str, params: Any = None) -> bytes: ...
def encode_notification(method: str, params: Any = None) -> bytes: ...
def encode_result(id: int | str | None, result: Any) -> bytes: ...
def encode_error(id: int | str | None, code: int, message: str | None = None, data: Any = ...) -> bytes: ...
def encode_batch(lines: Iterable[bytes]) -> bytes: ...
def forward(message: Message, id: Any = ...) -> bytes: ...
