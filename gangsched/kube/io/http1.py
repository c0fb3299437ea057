"""A small HTTP/1.1 client for the scheduler's writes: bindings, events, status.

Each binding and each event is one small request with a small answer, and there is one of each
per pod. Through aiohttp a request costs about 150-200 microseconds of Python (URL parsing,
header multidicts, trace signals, the connector's bookkeeping), more than the rest of a pod's
handling together. Here a request is one ``bytes`` join written to a kept-alive connection
and an answer parsed from the bytes that come back (Content-Length or chunked): a few tens of
microseconds. Lists come the same way, and watches are streamed on connections of their own
(:meth:`Http1Pool.stream`): the scheduler needs no other HTTP client unless a proxy is in the
way.

A connection is used by one request at a time; idle ones are kept (most recent first) and
reused. A request that fails on a reused connection before any byte of an answer came back
(the server closed it while it was idle) is sent once more on a new connection, as Go's
``net/http`` does; for a binding that was in fact received, the repeat gets 409 and the binder
reads the pod (see binder.py). A ``before_send`` callable, when given, is asked right before
the request's bytes are written; if it raises, nothing is written.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from gangsched.kube.io.turns import Turns

__all__ = ["ConnectionFailedError", "Http1Pool", "Response", "Stream"]

_MAX_HEAD = 64 * 1024
_NO_BODY = frozenset({204, 304})
# A stream stops reading from its socket while this much of its body waits to be taken, and
# reads again once the reader has taken it down to a tenth of that.
_STREAM_HIGH_WATER = 8 * 1024 * 1024
# New connections a pool opens at once, at most (a TLS handshake each, for the client and the
# server): a burst of requests is served by the connections that come free meanwhile and by a
# few new ones at a time, instead of waiting behind as many handshakes as it has requests.
CONNECTS_AT_ONCE = 8


class ConnectionFailedError(Exception):
    """The connection failed (refused, reset, closed, timed out) before a whole answer came."""

    def __init__(self, message: str, *, answered: bool = False) -> None:
        super().__init__(message)
        self.answered = answered  # some bytes of an answer had come back


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    body: bytes


class _Socket(asyncio.Protocol):
    """A connection the pool opens and closes: one for requests, or a stream."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.lost: asyncio.Future[None] | None = None  # done once the socket is closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def _released(self) -> None:
        """The socket is closed (from connection_lost)."""
        self.closed = True
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


P = TypeVar("P", bound=_Socket)


class _Connection(_Socket):
    def __init__(self) -> None:
        super().__init__()
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[Response, bool]] | None = None
        self._got_bytes = False
        # the answer's head, once parsed: status, reason, content length (-1: chunked,
        # -2: until the connection closes), keep-alive
        self._head: tuple[int, str, int, bool] | None = None
        self._body_at = 0
        self._chunks: list[bytes] = []
        self._chunk_at = 0

    # ---- protocol ---------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        self._buf += data
        if self._waiter is not None and not self._waiter.done():
            try:
                self._parse()
            except ValueError as e:
                self._fail(ConnectionFailedError(f"unreadable answer: {e}", answered=True))
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._released()
        if self._head is not None and self._head[2] == -2 and self._waiter is not None:
            status, reason, _, _ = self._head
            if not self._waiter.done():
                body = bytes(self._buf[self._body_at :])
                self._waiter.set_result((Response(status, reason, body), False))
            return
        why = f"connection lost: {exc}" if exc else "connection closed by the server"
        self._fail(ConnectionFailedError(why, answered=self._got_bytes))

    # ---- one exchange ---------------------------------------------------------------
    def send(self, data: bytes) -> asyncio.Future[tuple[Response, bool]]:
        assert self.transport is not None
        self._buf.clear()
        self._head = None
        self._chunks = []
        self._got_bytes = False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    def _fail(self, error: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _parse(self) -> None:
        buf = self._buf
        if self._head is None:
            head = _parse_head(buf)
            if head is None:
                return
            self._head = head[:4]
            self._body_at = self._chunk_at = head[4]
        status, reason, length, keep = self._head
        if length >= 0:
            stop = self._body_at + length
            if len(buf) >= stop:
                body = bytes(buf[self._body_at : stop])
                del buf[:stop]
                assert self._waiter is not None
                self._waiter.set_result((Response(status, reason, body), keep))
            return
        if length == -1:
            self._parse_chunks(status, reason, keep)

    def _parse_chunks(self, status: int, reason: str, keep: bool) -> None:
        buf = self._buf
        while True:
            eol = buf.find(b"\r\n", self._chunk_at)
            if eol < 0:
                return
            size = int(bytes(buf[self._chunk_at : eol]).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # the last chunk, then (no trailers are asked for) the final CRLF
                end = buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    return
                del buf[: end + 4]
                assert self._waiter is not None
                body = b"".join(self._chunks)
                self._waiter.set_result((Response(status, reason, body), keep))
                return
            start, stop = eol + 2, eol + 2 + size
            if len(buf) < stop + 2:
                return
            self._chunks.append(bytes(buf[start:stop]))
            self._chunk_at = stop + 2


def _parse_head(buf: bytearray) -> tuple[int, str, int, bool, int] | None:
    """The answer's head at the start of ``buf``: status, reason, content length (-1:
    chunked, -2: until the connection closes, 0 for answers without a body), whether the
    connection is kept alive, and where the body starts; None while the head is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > _MAX_HEAD:
            raise ValueError("answer head too long")
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(parts[1])
    reason = parts[2] if len(parts) > 2 else ""
    length, chunked, keep = -2, False, parts[0] != "HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif name == "connection":
            v = value.strip().lower()
            keep = v == "keep-alive" or (keep and v != "close")
    if chunked:
        length = -1
    elif status in _NO_BODY or 100 <= status < 200:
        length = 0
    return status, reason, length, keep and length != -2, end + 4


class Stream(_Socket):
    """One answer read as it comes, on a connection of its own (a watch): :meth:`head`
    waits for the status, :meth:`next` gives the body's bytes piece by piece (chunked
    encoding undone) and None at its end. The connection is closed at the end of the body,
    and by :meth:`close`."""

    def __init__(self) -> None:
        super().__init__()
        self.status = 0
        self.reason = ""
        self._buf = bytearray()
        self._length: int | None = None  # as _parse_head gives it, once the head is in
        self._left = 0  # bytes left of the body (Content-Length) or of the current chunk
        self._in_chunk = False
        self._pieces: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._paused = False
        self._ended = False
        self._error: ConnectionFailedError | None = None
        self._wake: asyncio.Future[None] | None = None
        self._got_head: asyncio.Future[None] | None = None

    # ---- protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._got_head = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self._ended or self._error is not None:
            return
        self._buf += data
        try:
            self._take()
        except ValueError as e:
            self._fail(ConnectionFailedError(f"unreadable answer: {e}", answered=True))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._released()
        if self._ended:
            return
        if self._length == -2:  # the body was "until the connection closes": it has
            self._end()
            return
        why = f"connection lost: {exc}" if exc else "connection closed by the server"
        self._fail(ConnectionFailedError(why, answered=self._length is not None))

    # ---- reading ----------------------------------------------------------------------
    def _take(self) -> None:
        buf = self._buf
        if self._length is None:
            head = _parse_head(buf)
            if head is None:
                return
            self.status, self.reason, self._length, _, body_at = head
            del buf[:body_at]
            self._left = max(self._length, 0)
            assert self._got_head is not None
            if not self._got_head.done():
                self._got_head.set_result(None)
            if self._length == 0:
                self._end()
                return
        if self._length == -1:
            self._take_chunks()
        elif self._length == -2:
            if buf:
                self._put(bytes(buf))
                buf.clear()
        else:
            n = min(len(buf), self._left)
            if n:
                self._put(bytes(buf[:n]))
                del buf[:n]
                self._left -= n
            if self._left == 0:
                self._end()

    def _take_chunks(self) -> None:
        buf = self._buf
        while buf and not self._ended:
            if self._in_chunk:
                if self._left:
                    n = min(len(buf), self._left)
                    self._put(bytes(buf[:n]))
                    del buf[:n]
                    self._left -= n
                    if self._left:
                        return
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise ValueError("a chunk does not end with CRLF")
                del buf[:2]
                self._in_chunk = False
                continue
            eol = buf.find(b"\r\n")
            if eol < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("chunk size line too long")
                return
            size = int(bytes(buf[:eol]).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # the last chunk, then (no trailers are asked for) the final CRLF
                if buf.find(b"\r\n\r\n", eol) < 0:
                    return
                buf.clear()
                self._end()
                return
            del buf[: eol + 2]
            self._in_chunk, self._left = True, size

    def _put(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._queued += len(piece)
        if self._queued > _STREAM_HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._notify()

    def _end(self) -> None:
        self._ended = True
        self._notify()
        self.close()  # the connection serves this one answer only

    def _fail(self, error: ConnectionFailedError) -> None:
        if self._error is None:
            self._error = error
        if self._got_head is not None and not self._got_head.done():
            self._got_head.set_exception(error)
            self._got_head.exception()  # retrieved: head() may never be awaited again
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def head(self, timeout: float) -> None:
        """Wait for the answer's head (:attr:`status`, :attr:`reason`), ``timeout`` seconds
        at most; :class:`ConnectionFailedError` if it does not come."""
        assert self._got_head is not None
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._got_head)
        except TimeoutError as e:
            self.close()
            raise ConnectionFailedError(f"no answer within {timeout:g}s") from e

    async def next(self) -> bytes | None:
        """The next piece of the body as it came; None once the body is whole;
        :class:`ConnectionFailedError` if the connection ended before that."""
        while not self._pieces:
            if self._error is not None:
                raise self._error
            if self._ended:
                return None
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
        piece = self._pieces.popleft()
        self._queued -= len(piece)
        if self._paused and self._queued <= _STREAM_HIGH_WATER // 10 and self.transport:
            self._paused = False
            self.transport.resume_reading()
        return piece

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's pieces as :meth:`next` gives them, to the end."""
        while (piece := await self.next()) is not None:
            yield piece

    async def read(self) -> bytes:
        """The rest of the body, whole (an error's answer)."""
        return b"".join([piece async for piece in self.pieces()])


class Http1Pool:
    """Kept-alive HTTP/1.1 connections to one server (``https://host:port`` or ``http://``)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._open: set[_Socket] = set()  # idle or in use, and streams: what close() closes
        # closed but perhaps not yet shut: a TLS connection is closed by an exchange of
        # close_notify alerts, and its socket is only released when that is done
        self._closing: set[_Socket] = set()
        self._closed = False
        self.connections_made = 0
        self._connecting = 0  # connections being opened for requests (CONNECTS_AT_ONCE)
        # requests waiting for an idle connection or a turn to open one, in arrival order
        self._waiting = Turns()

    async def _connect(self) -> _Connection:
        return await self._open_with(_Connection)

    async def _open_with(self, protocol: Callable[[], P]) -> P:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    protocol,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise ConnectionFailedError(f"cannot connect: {type(e).__name__}: {e}") from e
        self.connections_made += 1
        if self._closed:  # closed while this connected
            conn.close()
            raise ConnectionFailedError("the client is closed")
        self._open.add(conn)
        return conn

    async def _checkout(self) -> tuple[_Connection, bool]:
        """An idle connection (and True), else a new one (and False) once fewer than
        CONNECTS_AT_ONCE are being opened; until then, whichever comes first of a connection
        coming back idle and a turn to open one."""
        while True:
            if self._closed:
                raise ConnectionFailedError("the client is closed")
            if self._idle:
                return self._idle.pop(), True
            if self._connecting < CONNECTS_AT_ONCE:
                self._connecting += 1
                try:
                    return await self._connect(), False
                finally:
                    self._connecting -= 1
                    self._waiting.give()  # an opening ended
            await self._waiting.wait()

    def _give_back(self, conn: _Connection) -> None:
        self._idle.append(conn)
        self._waiting.give()

    async def warm(self, count: int) -> int:
        """Open connections until ``count`` are idle (a TLS handshake each, done before the
        requests that will use them); how many were opened. A connection that fails is left
        to the requests to report."""
        missing = count - len(self._idle)
        if missing <= 0 or self._closed:
            return 0
        made = await asyncio.gather(
            *(self._connect() for _ in range(missing)), return_exceptions=True
        )
        opened = [c for c in made if isinstance(c, _Connection)]
        for c in opened:
            if not c.closed:
                self._give_back(c)
        return len(opened)

    async def stream(self, head: bytes, timeout: float) -> Stream:
        """Send ``head`` (a request without a body) on a connection of its own and return the
        answer once its head is in (``timeout`` seconds at most for the connection and the
        head), its body to be read from the :class:`Stream` as it comes. The stream is closed
        with the pool."""
        if self._closed:
            raise ConnectionFailedError("the client is closed")
        conn = await self._open_with(Stream)
        assert conn.transport is not None and conn.lost is not None
        conn.lost.add_done_callback(lambda _: self._open.discard(conn))
        conn.transport.write(head)
        try:
            await conn.head(timeout)
        except BaseException:
            self._drop(conn)
            raise
        return conn

    async def request(
        self,
        head: bytes,
        body: bytes,
        timeout: float,
        before_send: Callable[[], None] | None = None,
    ) -> Response:
        """Send ``head`` (request line and headers, ending with the blank line) and ``body``;
        the whole answer, or :class:`ConnectionFailedError`."""
        if self._closed:
            raise ConnectionFailedError("the client is closed")
        data = head + body
        for attempt in (0, 1):
            conn, reused = await self._checkout()
            if conn.closed:
                self._open.discard(conn)
                if attempt == 0:
                    continue
                conn = await self._connect()
                reused = False
            if before_send is not None:
                try:
                    before_send()
                except BaseException:
                    self._give_back(conn)
                    raise
            try:
                async with asyncio.timeout(timeout):
                    response, keep = await conn.send(data)
            except ConnectionFailedError as e:
                self._drop(conn)
                if reused and not e.answered and attempt == 0:
                    continue  # the server closed it while it was idle: once more, anew
                raise
            except TimeoutError as e:
                self._drop(conn)
                raise ConnectionFailedError(f"no answer within {timeout:g}s") from e
            except BaseException:
                self._drop(conn)  # cancelled half-way: the connection's state is unknown
                raise
            if keep and not conn.closed and not self._closed:
                self._give_back(conn)
            else:
                self._drop(conn)
            return response
        raise ConnectionFailedError("connection closed by the server")

    def _drop(self, conn: _Socket) -> None:
        conn.close()
        self._open.discard(conn)
        self._shutting(conn)

    def _shutting(self, conn: _Socket) -> None:
        if conn.lost is not None and not conn.lost.done():
            self._closing.add(conn)
            conn.lost.add_done_callback(lambda _: self._closing.discard(conn))

    def close(self) -> None:
        """Close every connection, those in use too (their requests fail). TLS connections
        finish their shutdown while the event loop runs; :meth:`aclose` waits for it."""
        self._closed = True
        for conn in list(self._open):
            conn.close()
            self._shutting(conn)
        self._open.clear()
        self._idle.clear()
        self._waiting.give(len(self._waiting))  # each finds the pool closed

    async def aclose(self, timeout: float = 1.0) -> None:
        """:meth:`close`, then wait up to ``timeout`` seconds for every connection's socket
        to be released, and cut those still open (a server that does not answer the TLS
        close_notify). Without this, an event loop that ends right after closing leaves
        sockets open."""
        self.close()
        waiting = [c.lost for c in self._closing if c.lost is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout)
        cut = [c.lost for c in self._closing if c.lost is not None]
        for conn in list(self._closing):
            conn.abort()
        if cut:  # an aborted socket is released a loop turn or two later
            await asyncio.wait(cut, timeout=1.0)
        self._closing.clear()
