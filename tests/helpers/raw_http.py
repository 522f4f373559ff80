"""A raw HTTP/1.1 test server for one Streamable HTTP connection (not a test module).

:class:`RawHttp` owns the request loop (request line, headers, a ``Content-Length`` body,
the connection kept open for the next request) and its tail (a client that goes ends it
quietly; the socket is closed); a subclass says what each request gets in :meth:`answer`.
The helpers write the replies both test servers share. Serve it with
``asyncio.start_server(server.handle, "127.0.0.1", 0)``.
"""

from __future__ import annotations

import asyncio

__all__ = ["ACCEPTED", "SSE_HEAD", "RawHttp", "initialize_reply", "sse_event"]

#: The head of an SSE response (chunked: each event one chunk, :func:`sse_event`).
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
#: A 202 with no body (what a POST after ``initialize`` gets).
ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"


def sse_event(data: bytes) -> bytes:
    """One ``data:`` event as one chunk of a chunked SSE response."""
    event = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def initialize_reply(writer: asyncio.StreamWriter, reply: bytes) -> None:
    """Answer ``initialize`` 200 with ``reply`` as the body, naming connection ``c1``."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nAcp-Connection-Id: c1\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(reply), reply))


class RawHttp:
    """The request loop of a raw HTTP/1.1 test server; subclasses answer in :meth:`answer`."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one TCP connection's requests until :meth:`answer` ends it or the client goes."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method = lines[0].split(" ")[0]
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self.answer(method, headers, body, reader, writer):
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, headers: dict[str, str], body: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
        """Write the answer to one request; False ends the TCP connection (after what was written)."""
        raise NotImplementedError
