"""Connection events of the remote server as log records, and a JSON line formatter for them.

The server logs one record per connection event on the `acp_fast.remote.events` logger
([`EVENTS_LOGGER`][acp_fast.remote.logs.EVENTS_LOGGER]) at INFO: `open`, `close` (with its
cause), `refusal` (an HTTP status the server answered a request with, 4xx or 5xx),
`agent_exit` (a child agent's exit status and its stderr tail) and `resume` (an SSE reader
that came back with `Last-Event-ID`, served or refused). Each record carries the event's
name in `event` and the connection's short id (its first 8 characters: the whole id is
what lets a client address the connection over HTTP, so it is never logged) in
`connection`, plus the event's own fields; never a message body.

[`JsonFormatter`][acp_fast.remote.logs.JsonFormatter] writes any record as one JSON object
per line, with those fields at the top level (`acp-fast serve --log-format json`):

```python
import logging
from acp_fast.remote.logs import EVENTS_LOGGER, JsonFormatter

handler = logging.StreamHandler()
handler.setFormatter(JsonFormatter())
logging.getLogger().addHandler(handler)
logging.getLogger(EVENTS_LOGGER).setLevel(logging.INFO)
```
"""

from __future__ import annotations

import json
import logging
import time

__all__ = ["EVENTS_LOGGER", "JsonFormatter", "short_id"]

EVENTS_LOGGER = "acp_fast.remote.events"
"""The logger of the remote server's connection events."""

#: Attributes every `logging.LogRecord` has: the rest of a record's attributes are fields a
#: caller added (`extra=`), written as they are.
#: A record's own attributes (not fields a caller added), and uvicorn's `color_message` (its
#: message again, with terminal colour codes).
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}


def short_id(connection_id: str) -> str:
    """The part of a connection id that logs carry (the whole id addresses the connection)."""
    return connection_id[:8]


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: `ts` (UTC, ISO 8601 with milliseconds),
    `level`, `logger`, `message`, the fields the caller added with `extra=` (an event's
    `event`, `connection` and the rest), and `exc` with the traceback when there is one.
    A value JSON cannot carry is written as its `str`."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)
