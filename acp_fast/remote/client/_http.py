"""The remote client over Streamable HTTP: POSTs out, SSE streams in, resumed by cursor.

POSTs and SSE GETs go over lean keep-alive HTTP/1.1 connections (`_plainhttp`) unless
HTTP/2 or a proxy is in play (httpx then). The connection's SSE stream and one per session
are read at once; each remembers its last event's `id:` and is resumed with
`Last-Event-ID` after a drop (`RESUME_DELAYS`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ... import _version
from ..._kinds import BATCH, MALFORMED, REQUEST, RESPONSE
from ...engine import Decoder, encode_error
from ...protocol.facts import INITIALIZE
from .._wire import (
    BATCH_FRAMES_HEADER,
    CONNECTION_ID_HEADER,
    CONTENT_TYPE_JSON,
    CONTENT_TYPE_SSE,
    LAST_EVENT_ID_HEADER,
    SESSION_ID_HEADER,
    SseParser,
    id_key,
    one_line,
)
from . import _bridge  # _bridge.CLOSE_TIMEOUT read at use, where tests set it
from ._bridge import Bridge, Lane, RemoteConnectionLost

if TYPE_CHECKING:
    import httpx

    from ...engine import Message
    from ...jsontypes import RequestId
    from .._plainhttp import PlainHttp, Reply, StreamedReply

__all__ = ["BODY_QUOTE", "MAX_ROUTES", "MAX_SESSION_STREAMS", "RESUME_DELAYS", "RESUME_STABLE", "RESUME_TIMEOUT",
           "START_CURSOR", "HttpBridge"]

logger = logging.getLogger("acp_fast.remote")


#: Agent requests whose session is remembered so that the answer's POST names it.
MAX_ROUTES = 4096
#: Session SSE streams open at once (each is a long-lived request).
MAX_SESSION_STREAMS = 256
#: Bytes of a refused request's body quoted in the error delivered for it.
BODY_QUOTE = 512
#: Seconds before each attempt to resume a dropped SSE stream with ``Last-Event-ID``: one
#: attempt per entry, then the connection ends. A resumed stream that delivers an event (or
#: stays open :data:`RESUME_STABLE` seconds) earns the full set again.
RESUME_DELAYS = (0.05, 0.2, 0.5)
#: Seconds a resume attempt may take to connect and receive the response's head.
RESUME_TIMEOUT = 5.0
#: Seconds after which a resumed stream that delivered nothing counts as working again.
RESUME_STABLE = 5.0
#: ``Last-Event-ID`` for a stream that dropped before its first event, when the connection's
#: other streams carry ids: acp_fast's server numbers each stream's events from 1, so ``0``
#: asks for all of them (409 once they are no longer kept).
START_CURSOR = "0"
_INTERNAL_ERROR = -32603


class HttpBridge(Bridge):
    """POSTs out (`initialize` first, its reply in the body), SSE streams in.

    Two ordered send lanes: calls (requests and notifications) and answers (responses to the
    agent's requests), so that an answer the agent waits for never queues behind a request
    POST that the server holds (a server may hold a POST until its client reads more).
    """

    def __init__(self, url: str, headers: dict[str, str], http2: bool, max_message_size: int,
                 connect_timeout: float, failover: tuple[str, ...] = ()) -> None:
        import h11
        import httpx

        from .._plainhttp import Reply

        super().__init__("http", url, max_message_size)
        self._httpx = httpx
        self._h11 = h11
        self._reply = Reply
        self._client = httpx.AsyncClient(
            http2=http2,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=MAX_SESSION_STREAMS),
        )
        self._headers = headers
        #: POSTs and DELETEs go over lean keep-alive HTTP/1.1 connections where httpx would
        #: speak HTTP/1.1 directly anyway (see :mod:`._plainhttp`); SSE GETs stay on httpx.
        self._http2 = http2
        self._connect_timeout = connect_timeout
        #: the endpoints in turn (`url`, then `failover`): a front that cannot be reached is left
        #: for the next (see `_fail_over`)
        self._endpoints = (url, *failover)
        self._plain = self._plain_for(url)
        self._out = Decoder(lazy=True, max_line_size=max_message_size)
        self._inspect = Decoder(lazy=True, max_line_size=max_message_size + 1)
        self._calls: Lane[Any] = Lane()
        self._answers: Lane[Any] = Lane()
        self._lanes += [self._calls, self._answers]
        self._conn_id: str | None = None
        self._sessions: dict[str, asyncio.Task[Any]] = {}
        self._refused: set[str] = set()
        self._parsers: dict[str | None, SseParser] = {}  # each open SSE stream's, for its cursor
        self._cursored = False  # some stream carried an event id: the server resumes streams
        self._routes: collections.OrderedDict[tuple[bool, Any], str] = collections.OrderedDict()
        self._spawn(self._drain(self._calls, self._post))
        self._spawn(self._drain(self._answers, self._post))

    def _plain_for(self, url: str) -> PlainHttp | None:
        from .._plainhttp import PlainHttp, plain_http_applies

        if not plain_http_applies(url, self._http2):
            return None
        return PlainHttp(url, self._client.cookies, connect_timeout=self._connect_timeout, max_body=self._max,
                         user_agent=f"acp-fast/{_version.__version__}")

    def _fail_over(self, failed: str) -> bool:
        """The endpoint `failed` could not be reached: move to the next one (unless another
        stream did already); False when there is no other endpoint."""
        if len(self._endpoints) < 2:
            return False
        if self._url == failed:
            following = self._endpoints[(self._endpoints.index(failed) + 1) % len(self._endpoints)]
            logger.warning("remote transport: %s cannot be reached; moving to %s", failed, following)
            self._url = following
            if self._plain is not None:
                self._plain.close()
                self._plain = self._plain_for(following)
        return True

    # -- outgoing -----------------------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        frames: list[Any] = self._out.feed(data)
        for frame in frames:
            if frame.kind == MALFORMED:
                if frame.reason.startswith("line too long"):
                    self._fatal(f"an outgoing message is over max_message_size ({self._max})")
                    return
                logger.warning("remote transport: dropping an invalid outgoing line: %r", frame)
                continue
            raw = frame.raw
            lane = self._answers if frame.kind == RESPONSE else self._calls
            self._enqueue(lane, frame, len(raw))

    async def _post(self, frame: Any) -> None:
        if self._conn_id is None:
            if frame.kind == REQUEST and frame.method == INITIALIZE:
                await self._initialize(frame)
            else:
                self._refuse(frame, "no Streamable HTTP connection yet: the first message must be the "
                                    "initialize request")
            return
        headers = {**self._headers, "Content-Type": CONTENT_TYPE_JSON, CONNECTION_ID_HEADER: self._conn_id}
        session = self._session_of(frame)
        if session is not None:
            headers[SESSION_ID_HEADER] = session
        try:
            response, body = await self._exchange("POST", headers, frame.raw)
        except Exception as exc:  # noqa: BLE001 - any failure of the POST fails its requests
            self._refuse(frame, f"POST to {self._url} failed: {exc!r}")
            return
        status = response.status_code
        if 200 <= status < 300:
            if session is not None:
                # Opened once the POST is accepted: a server lets a session's stream open while
                # a request naming it is in flight, and queues its events until a reader
                # comes; a request asks again for a stream refused before (a session loaded
                # or resumed since), a notification or a response does not.
                self._open_session(session, confirmed=frame.kind in (REQUEST, BATCH))
            if body.strip():  # a server may answer in the body
                self._incoming([body], None)
            return
        self._refuse(frame, f"HTTP {status} {response.reason_phrase} from {self._url}", status, body)

    async def _initialize(self, frame: Any) -> None:
        headers = {**self._headers, "Content-Type": CONTENT_TYPE_JSON, "Accept": CONTENT_TYPE_JSON}
        try:
            response, body = await self._exchange("POST", headers, frame.raw)
        except Exception as exc:  # noqa: BLE001 - any failure of the POST fails initialize
            self._refuse(frame, f"initialize POST to {self._url} failed: {exc!r}")
            return
        status = response.status_code
        conn_id = response.headers.get(CONNECTION_ID_HEADER)
        reply = self._reply_to(body, frame.id)
        if reply is not None and reply.error is not None:
            self._deliver(one_line(body) + b"\n")  # the agent's own refusal, whatever the status
            if conn_id:  # a server that kept the refused connection: end it
                self._spawn(self._delete(conn_id))
            return
        if status != 200 or reply is None:
            self._refuse(frame, f"HTTP {status} {response.reason_phrase} from {self._url}: initialize refused",
                         status, body)
            return
        if not conn_id:
            self._refuse(frame, f"{self._url} answered initialize without an {CONNECTION_ID_HEADER} header")
            return
        self._conn_id = conn_id
        self._a.set_extra_info("acp_connection_id", conn_id)
        self._deliver(one_line(body) + b"\n")
        self._spawn(self._sse(None))

    async def _exchange(self, method: str, headers: dict[str, str], content: bytes | None = None
                        ) -> tuple[Reply, bytes]:
        """One request; the response and its body (at most `max_message_size` bytes). An
        endpoint that cannot be reached is left for the next one (`failover`), each at most once.

        Raises:
            httpx.HTTPError: the request failed.
            ValueError: the body is over `max_message_size`.
        """
        for _ in range(len(self._endpoints) - 1):
            endpoint = self._url
            try:
                return await self._exchange_once(method, headers, content)
            except (self._httpx.HTTPError, OSError, asyncio.TimeoutError) as exc:
                if not (_unreachable(exc, self._httpx) and self._fail_over(endpoint)):
                    raise
        return await self._exchange_once(method, headers, content)

    async def _exchange_once(self, method: str, headers: dict[str, str], content: bytes | None
                             ) -> tuple[Reply, bytes]:
        if self._plain is not None:
            return await self._plain.request(method, headers, content or b"")
        async with self._client.stream(method, self._url, headers=headers, content=content) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max:
                    raise ValueError(f"response body over max_message_size ({self._max})")
                chunks.append(chunk)
            return self._reply(response.status_code, response.reason_phrase, response.headers), b"".join(chunks)

    def _reply_to(self, body: bytes, ident: RequestId | None) -> Message | None:
        """`body` decoded, when it is one JSON-RPC response with id `ident`."""
        line = one_line(body)
        if not line or b"\n" in line:
            return None
        frames: list[Any] = Decoder(lazy=True, max_line_size=self._max + 1).feed(line + b"\n")
        if len(frames) != 1:
            return None
        reply = frames[0]
        if reply.kind != RESPONSE or reply.id != ident or type(reply.id) is not type(ident):
            return None
        return reply  # type: ignore[no-any-return]  # a Message: its kind was checked

    def _refuse(self, frame: Any, message: str, status: int | None = None, body: bytes = b"") -> None:
        """A POST failed: every request in it gets an error response (-32603) now."""
        data: dict[str, Any] = {"url": self._url}
        if status is not None:
            data["status"] = status
        if body:
            data["body"] = body[:BODY_QUOTE].decode("utf-8", "replace")
        entries = frame.entries if frame.kind == BATCH else [frame]
        out = []
        for entry in entries:
            if entry.kind == REQUEST:
                out.append(encode_error(entry.id, _INTERNAL_ERROR, f"{message} ({entry.method})",
                                        {**data, "method": entry.method}))
            elif entry.kind != MALFORMED:
                logger.warning("remote transport: %s; a %s was not delivered", message,
                               "response" if entry.kind == RESPONSE else f"notification {entry.method!r}")
        if out:
            self._deliver(b"".join(out))

    def _session_of(self, frame: Any) -> str | None:
        """The `Acp-Session-Id` for a POST: `params.sessionId` of a call (not `$/`
        methods), the session an answered agent request came on; for a batch, the one
        session its entries agree on."""
        if frame.kind == BATCH:
            found = {s for e in frame.entries if e.kind != MALFORMED for s in [self._session_of(e)] if s}
            return found.pop() if len(found) == 1 else None
        if frame.kind == MALFORMED:
            return None
        if frame.kind == RESPONSE:
            return self._routes.pop(id_key(frame.id), None)
        method = frame.method or ""
        if method.startswith("$/") or b'"sessionId"' not in frame.raw:
            return None
        params = frame.params
        if isinstance(params, dict):
            session = params.get("sessionId")
            if isinstance(session, str):
                return session
        return None

    # -- incoming -----------------------------------------------------------------------

    async def _sse(self, session: str | None) -> None:
        """Read one SSE stream (the connection's, or `session`'s) into the connection,
        resuming it with `Last-Event-ID` when it drops (see `RESUME_DELAYS`).

        The connection ends when the connection's stream ends for good, or when any stream
        fails without being resumed; a session stream that the server refuses at first, or
        that ends without a cursor (a server without resumable streams), just ends.
        """
        assert self._conn_id is not None
        headers = {**self._headers, "Accept": CONTENT_TYPE_SSE, CONNECTION_ID_HEADER: self._conn_id,
                   BATCH_FRAMES_HEADER: "1"}
        if session is not None:
            headers[SESSION_ID_HEADER] = session
        what = "the connection's SSE stream" if session is None else f"the SSE stream of session {session!r}"
        loop = asyncio.get_running_loop()
        cursor: str | None = None  # the id of the last event delivered: where a resume starts
        attempts = 0  # resume attempts since the stream last made progress
        why = ""  # how the last attempt ended
        failed: str | None = None  # the connection ends on this failure
        status: int | None = None  # ... refused with this HTTP status
        ended = False  # the stream ended for good without a failure
        gone: str | None = None  # the server closed the connection: it ends without a failure
        clean = False  # the last attempt ended with the end of its response
        hops = 0  # endpoints left for the next since this stream last made progress
        hop = False  # the last attempt could not reach its endpoint: the next one, at once
        try:
            while True:
                if attempts and not hop:
                    await asyncio.sleep(RESUME_DELAYS[attempts - 1])
                hop = False
                if attempts:
                    if self._closer is not None:
                        return
                    assert cursor is not None
                    headers[LAST_EVENT_ID_HEADER] = cursor
                    logger.info("remote transport: resuming %s after event %s (attempt %d of %d): %s",
                                what, cursor, attempts, len(RESUME_DELAYS), why)
                parser = SseParser(self._max)
                opened: float | None = None
                was_clean, clean = clean, False
                endpoint = self._url
                try:
                    sending = self._open_sse(headers)
                    response = await (asyncio.wait_for(sending, RESUME_TIMEOUT) if attempts else sending)
                    try:
                        if response.status_code != 200:
                            refusal = f"HTTP {response.status_code} {response.reason_phrase}"
                            if not attempts:  # the first open: the server does not serve this stream
                                if session is None:
                                    failed = f"{what} was refused: {refusal}"
                                else:
                                    self._refused.add(session)
                                    logger.warning("remote transport: %s was refused: %s", what, refusal)
                                    ended = True
                                return
                            if response.status_code == 404 and was_clean:
                                gone = f"{what} ended, and the connection is gone (HTTP 404 on resuming it)"
                                return
                            if response.status_code in (404, 409):
                                status = response.status_code
                                cause = ("the connection is gone" if status == 404
                                         else "the server cannot resume from that event")
                                quote = (await _head_of(response)).decode("utf-8", "replace")
                                failed = f"{what} dropped ({why}); resuming it after event {cursor} was refused " \
                                         f"with {refusal}, {cause}{': ' + quote if quote else ''}"
                                return
                            why = f"resume refused: {refusal}"
                        else:
                            opened = loop.time()
                            self._parsers[session] = parser
                            async for chunk in response.aiter_bytes():
                                events = parser.feed(chunk)
                                if events:
                                    self._incoming(events, session)
                                await self._until_writable()
                            why = "the server ended it"
                            clean = True
                    finally:
                        await response.aclose()
                except ValueError as exc:  # an event over the limit: resuming would meet it again
                    failed = f"{what} failed: {exc!r}"
                    return
                except (self._httpx.HTTPError, OSError, asyncio.TimeoutError, self._h11.ProtocolError) as exc:
                    why = repr(exc)
                    if (attempts and opened is None and _unreachable(exc, self._httpx)
                            and hops < len(self._endpoints) - 1 and self._fail_over(endpoint)):
                        hops += 1
                        hop = True
                        continue  # the next endpoint at once, the same attempt
                # The stream ended or dropped while the connection is open: resume it.
                seen = parser.last_event_id
                if seen is not None and seen != cursor:
                    attempts = hops = 0  # it delivered events: progress
                    cursor = seen or None  # an empty id resets the cursor (the SSE rules)
                    self._cursored = True
                elif opened is not None and loop.time() - opened >= RESUME_STABLE:
                    attempts = 0
                if cursor is None and self._cursors_seen():
                    cursor = START_CURSOR
                if cursor is None:  # a server without resumable streams: as it ended
                    if clean:
                        ended = True
                    else:
                        failed = f"{what} failed: {why} (no event id to resume from)"
                    return
                if self._closer is not None:
                    return
                if attempts >= len(RESUME_DELAYS):
                    failed = f"{what} dropped and could not be resumed after event {cursor}: " \
                             f"{attempts} attempts failed (last: {why})"
                    return
                attempts += 1
        finally:
            self._parsers.pop(session, None)
            if failed is not None:
                self.failure = RemoteConnectionLost(failed, status)
                self._fatal(failed)
            elif gone is not None:
                self._lost(gone)
            elif session is None:
                self._lost(f"{what} ended")
            else:
                self._sessions.pop(session, None)
                if ended:
                    logger.debug("remote transport: %s ended", what)

    def _open_sse(self, headers: dict[str, str]) -> Awaitable[httpx.Response | StreamedReply]:
        """Send an SSE GET; the response once its head arrived (its body read as it comes)."""
        if self._plain is not None:
            return self._plain.stream("GET", headers)
        return self._client.send(self._client.build_request("GET", self._url, headers=headers), stream=True)

    def _cursors_seen(self) -> bool:
        """True once some SSE stream of the connection has carried an event id."""
        if not self._cursored:
            self._cursored = any(p.last_event_id for p in self._parsers.values())
        return self._cursored

    def _incoming(self, payloads: list[bytes], session: str | None) -> None:
        lines = []
        for payload in payloads:
            line = one_line(payload)
            if line:
                self._inspect_incoming(line, session)
                lines.append(line)
        if lines:
            lines.append(b"")
            self._deliver(b"\n".join(lines))

    def _inspect_incoming(self, line: bytes, session: str | None) -> None:
        """Note what routing needs: the session of an agent request that came on a session
        stream (its answer's POST names it), and session ids not streamed yet (a response's
        `result.sessionId`; on the connection stream also a call's `params.sessionId`).

        Only lines that can hold such a thing are decoded: a quoted key cannot appear inside
        a JSON string (its quotes would be escaped), so plain byte tests rule out the rest,
        such as every `session/update` on a session stream.
        """
        if session is None:
            if b'"sessionId"' not in line:
                return
        elif not ((b'"method"' in line and b'"id"' in line) or (b'"result"' in line and b'"sessionId"' in line)):
            return
        frames: list[Any] = self._inspect.feed(line + b"\n")
        for frame in frames:
            entries: list[Any] = frame.entries if frame.kind == BATCH else [frame]
            for m in entries:
                if m.kind == MALFORMED:
                    continue
                if m.kind == RESPONSE:
                    found, confirmed = m.result, True
                elif session is not None:
                    if m.kind == REQUEST:
                        self._remember_route(m.id, session)
                    continue
                else:
                    found, confirmed = m.params, False
                sid = found.get("sessionId") if isinstance(found, dict) else None
                if isinstance(sid, str):
                    self._open_session(sid, confirmed=confirmed)

    def _remember_route(self, ident: Any, session: str) -> None:
        routes = self._routes
        routes[id_key(ident)] = session
        while len(routes) > MAX_ROUTES:
            routes.popitem(last=False)

    def _open_session(self, session: str, *, confirmed: bool) -> None:
        """Open `session`'s SSE stream unless it is open. One the server refused is asked
        for again only when a response names the session (`confirmed`)."""
        if session in self._sessions or self._closer is not None or self._conn_id is None:
            return
        if session in self._refused:
            if not confirmed:
                return
            self._refused.discard(session)
        if len(self._sessions) >= MAX_SESSION_STREAMS:
            logger.warning("remote transport: %d session streams open; not opening one for %r",
                           len(self._sessions), session)
            return
        if len(self._refused) > MAX_ROUTES:
            self._refused.clear()
        self._sessions[session] = self._spawn(self._sse(session))

    # -- closing ------------------------------------------------------------------------

    async def _delete(self, conn_id: str) -> None:
        """End the server's connection `conn_id` (best effort, bounded)."""
        headers = {**self._headers, CONNECTION_ID_HEADER: conn_id}
        try:
            await asyncio.wait_for(self._exchange("DELETE", headers), _bridge.CLOSE_TIMEOUT)
        except (asyncio.TimeoutError, self._httpx.HTTPError, OSError, ValueError, self._h11.ProtocolError) as exc:
            logger.debug("remote transport: DELETE of connection %s failed: %r", conn_id, exc)

    async def _close_network(self, flushed: bool) -> None:
        try:
            if self._conn_id is not None:
                await self._delete(self._conn_id)
        finally:
            if self._plain is not None:
                self._plain.close()
            await self._client.aclose()


def _unreachable(exc: BaseException, httpx: Any) -> bool:
    """Whether `exc` says the endpoint could not be reached at all (refused, unroutable, a
    connect that timed out): nothing was sent, another endpoint may serve the request."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, ConnectionRefusedError, asyncio.TimeoutError)) \
        or (isinstance(exc, OSError) and not isinstance(exc, (ConnectionResetError, BrokenPipeError)))


async def _head_of(response: httpx.Response | StreamedReply) -> bytes:
    """The first `BODY_QUOTE` bytes of a refusal's body, stripped (the rest unread)."""
    head = b""
    try:
        async for chunk in response.aiter_bytes():
            head += chunk
            if len(head) >= BODY_QUOTE:
                break
    except Exception:  # noqa: BLE001 - only a quote for an error message
        pass
    return head[:BODY_QUOTE].strip()
