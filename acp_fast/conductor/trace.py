"""`--trace PATH`: one JSON object per line per hop message (protocol.md §8.7.38).

Records (`ts` = monotonic seconds since the conductor started):

```text
{"type":"request","ts","protocol":"acp","from","to","id","method","session"?,"params"}
{"type":"response","ts","from","to","id","is_error","payload"}
{"type":"notification","ts","protocol":"acp","from","to","method","session"?,"params"}
{"type":"negotiation","ts","requested","selected","pinned","probing","attempts","outcome","error","components"}
```

The `negotiation` record is acp_fast's (not in §8.7.38): written once, when the chain's
`initialize` is answered, it shows how the protocol version was selected (the client's
request, the version of each attempt, what each component answered at each version: see
`acp_fast.conductor.selection.Selection.record`). `acp-fast trace view|summary`
skip it.

Component names are `Client`, `Proxy(i)`, `Agent` (and `Successor` for a
proxy-mode conductor's parent side). The trace is idealized: successor envelopes are
unwrapped to the message they carry, and each message is recorded once, for the hop it
travels. A request's `id` is the id the conductor allocated on the receiving component's
connection, and its response carries the same `id`, so the pair correlates within a hop
(ids are per hop and need not be numbers). Requests the conductor answers itself are
recorded as a response `from: "Conductor"`. The file is truncated when the conductor starts
and written line-buffered (flushed per event). Tracing decodes params, so it costs what the
pass-through path otherwise avoids. Look at a trace with `acp-fast trace view PATH -o
trace.html` (a sequence diagram per session) or `acp-fast trace summary PATH`
(`trace_view`).
"""

from __future__ import annotations

import json
import os
import time
from typing import IO

from ..jsontypes import Json, JsonObject, RequestId

__all__ = ["Tracer", "decoded"]


def decoded(raw: object) -> Json:
    """A raw JSON value (`RawJson` or lazy params) decoded; `None` when absent or not JSON."""
    if raw is None:
        return None
    try:
        return raw.decode_json() if hasattr(raw, "decode_json") else raw
    except ValueError:
        return None


def _session(params: Json) -> str | None:
    if type(params) is dict:
        sid = params.get("sessionId")
        if type(sid) is str:
            return sid
    return None


class Tracer:
    """Writes trace events to `path` (truncated on open)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8", buffering=1)
        self._t0 = time.monotonic()

    def _write(self, record: JsonObject) -> None:
        if not self._file.closed:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")

    def call(self, src: str, dst: str, rid: RequestId | None, method: str, params_raw: object,
             is_request: bool) -> None:
        """Record a request (`is_request`; `rid` its id on this hop) or a notification
        from component `src` to `dst`; `params_raw` is decoded (`None` if it is not JSON)."""
        params = decoded(params_raw)
        record: JsonObject = {"type": "request" if is_request else "notification",
                                  "ts": time.monotonic() - self._t0, "protocol": "acp",
                                  "from": src, "to": dst}
        if is_request:
            record["id"] = rid
        record["method"] = method
        session = _session(params)
        if session is not None:
            record["session"] = session
        record["params"] = params
        self._write(record)

    def response(self, src: str, dst: str, rid: RequestId | None, error: Json, result_raw: object) -> None:
        """Record the response to request `rid` from `src` to `dst`: `error` when it is
        not `None`, else the decoded `result_raw`."""
        self._write({"type": "response", "ts": time.monotonic() - self._t0, "from": src, "to": dst,
                     "id": rid, "is_error": error is not None,
                     "payload": error if error is not None else decoded(result_raw)})

    def negotiation(self, record: JsonObject) -> None:
        """Record the chain's protocol version selection (`record`: `Conductor.negotiation`)
        as `{"type": "negotiation", "ts", ...record}`."""
        self._write({"type": "negotiation", "ts": time.monotonic() - self._t0, **record})

    def close(self) -> None:
        """Close the file; later events are not written."""
        self._file.close()
