"""The small HTTP/1.1 client against a server that answers byte by byte as scripted: lengths,
chunks split anywhere, kept-alive and closed connections, a server that drops an idle
connection, timeouts, and a last look before the bytes go out."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gangsched.kube.io import http1
from gangsched.kube.io.http1 import ConnectionFailedError, Http1Pool, Stream
from gangsched_dev.devcluster.controlplane import _generate_pki

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """Reads one request head (and its Content-Length body) at a time and lets ``script``
    answer it; counts connections and requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                await self.script(reader, writer, len(self.requests))
                if writer.is_closing():
                    return
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()


def _answer(body: bytes, status: str = "201 Created", *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@pytest.fixture
async def pools() -> AsyncIterator[list[Http1Pool]]:
    made: list[Http1Pool] = []
    yield made
    for p in made:
        await p.aclose()


def _pool(pools: list[Http1Pool], server: RawServer) -> Http1Pool:
    pool = Http1Pool("127.0.0.1", server.port, ssl_context=None)
    pools.append(pool)
    return pool


HEAD = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n"


async def test_an_answer_with_a_length_and_the_connection_kept(pools: list[Http1Pool]) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(_answer(b'{"n":%d}' % n))

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        first = await pool.request(HEAD, b"{}", 5)
        second = await pool.request(HEAD, b"{}", 5)
    assert (first.status, first.reason, first.body) == (201, "Created", b'{"n":1}')
    assert second.body == b'{"n":2}'
    assert server.connections == 1 == pool.connections_made
    assert server.requests[0] == HEAD + b"{}"


async def test_a_chunked_answer_split_anywhere(pools: list[Http1Pool]) -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
        b"\r\n5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"
    )

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        for i in range(len(raw)):  # one byte at a time
            w.write(raw[i : i + 1])
            await w.drain()
            await asyncio.sleep(0)

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        answer = await pool.request(HEAD, b"{}", 5)
        again = await pool.request(HEAD, b"{}", 5)
    assert (answer.status, answer.body) == (200, b"hello world")
    assert again.body == b"hello world" and server.connections == 1


async def test_connection_close_and_an_answer_that_ends_with_the_connection(
    pools: list[Http1Pool],
) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            w.write(_answer(b"one", "200 OK", "Connection: close"))
        else:  # no length: the body is what comes until the connection closes
            w.write(b"HTTP/1.1 200 OK\r\n\r\ntwo, until closed")
        await w.drain()
        w.close()

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        assert (await pool.request(HEAD, b"{}", 5)).body == b"one"
        assert (await pool.request(HEAD, b"{}", 5)).body == b"two, until closed"
    assert server.connections == 2


async def test_no_body_for_204(pools: list[Http1Pool]) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        assert (await pool.request(HEAD, b"{}", 5)).status == 204
        assert (await pool.request(HEAD, b"{}", 5)).status == 204
    assert server.connections == 1


async def test_an_idle_connection_the_server_dropped_is_replaced_once(
    pools: list[Http1Pool],
) -> None:
    """The server closes a kept-alive connection while it is idle: the next request goes out
    on a new one; the caller sees nothing."""
    served: list[asyncio.StreamWriter] = []

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(_answer(b"ok", "200 OK"))
        served.append(w)

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        await pool.request(HEAD, b"{}", 5)
        served[0].close()  # dropped while idle
        await asyncio.sleep(0.05)
        answer = await pool.request(HEAD, b"{}", 5)
    assert answer.body == b"ok" and server.connections == 2


async def test_a_fresh_connection_dropped_before_an_answer_is_an_error_not_a_retry(
    pools: list[Http1Pool],
) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.close()

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        with pytest.raises(ConnectionFailedError):
            await pool.request(HEAD, b"{}", 5)
    assert len(server.requests) == 1


async def test_no_answer_in_time_is_a_connection_failure(pools: list[Http1Pool]) -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await asyncio.sleep(10)

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        with pytest.raises(ConnectionFailedError, match="no answer within"):
            await pool.request(HEAD, b"{}", 0.2)


async def test_nothing_is_written_when_the_last_look_says_no(pools: list[Http1Pool]) -> None:
    class NoError(Exception):
        pass

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(_answer(b"ok", "200 OK"))

    def refuse() -> None:
        raise NoError

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        await pool.request(HEAD, b"{}", 5)
        with pytest.raises(NoError):
            await pool.request(HEAD, b"{}", 5, refuse)
        await pool.request(HEAD, b"{}", 5)  # the connection is still good
    assert len(server.requests) == 2 and server.connections == 1


async def test_a_refused_connection_is_a_connection_failure() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = Http1Pool("127.0.0.1", port, ssl_context=None)
    with pytest.raises(ConnectionFailedError, match="cannot connect"):
        await pool.request(HEAD, b"{}", 5)


async def test_a_garbled_answer_is_a_connection_failure(pools: list[Http1Pool]) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"SMTP ready\r\n\r\n")

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        with pytest.raises(ConnectionFailedError, match="unreadable answer"):
            await pool.request(HEAD, b"{}", 5)


async def test_close_closes_the_connections_in_use_too(pools: list[Http1Pool]) -> None:
    """A client closed while a request is on its way leaves no socket open: the request
    fails, as it would through aiohttp's session."""
    arrived = asyncio.Event()

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        arrived.set()
        await asyncio.sleep(10)

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        pending = asyncio.create_task(pool.request(HEAD, b"{}", 30))
        await asyncio.wait_for(arrived.wait(), 5)
        pool.close()
        with pytest.raises(ConnectionFailedError):
            await asyncio.wait_for(pending, 5)
        with pytest.raises(ConnectionFailedError, match="closed"):
            await pool.request(HEAD, b"{}", 5)


async def test_aclose_releases_tls_sockets_even_when_the_server_never_ends_the_shutdown(
    tmp_path: Path,
) -> None:
    """Closing a TLS connection sends close_notify and waits for the server's; the socket is
    only released when that comes. A client whose event loop ends right after ``close()``
    would leave the socket open: ``aclose()`` waits a moment, then cuts it."""
    _generate_pki(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Event()

    def serve() -> None:  # answers once, then holds the connection without a word
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            tls.sendall(_answer(b"ok", "200 OK"))
            done.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    pool = Http1Pool("127.0.0.1", port, ssl_context=client_ctx, server_hostname="localhost")
    try:
        response = await pool.request(HEAD, b"{}", 5)
        assert response.status == 200
        [conn] = list(pool._open)
        pool.close()
        await asyncio.sleep(0.2)
        assert conn.lost is not None and not conn.lost.done(), "the server ends no shutdown"
        t0 = time.monotonic()
        await pool.aclose(timeout=0.3)
        assert conn.lost.done()
        assert time.monotonic() - t0 < 2
    finally:
        done.set()
        listener.close()
        thread.join(10)


# ---- streams (watches) ------------------------------------------------------------------

GET = b"GET /w?watch=true HTTP/1.1\r\nHost: h\r\n\r\n"


async def _drain(stream: Stream) -> list[bytes]:
    pieces = []
    while (piece := await stream.next()) is not None:
        pieces.append(piece)
    return pieces


async def test_a_stream_gives_the_chunks_as_they_come_split_anywhere(
    pools: list[Http1Pool],
) -> None:
    """The head first (before any of the body), then the body's bytes with the chunked
    encoding undone, however the bytes were cut; None at the last chunk, and the connection
    (one of its own, outside the pool's idle ones) is closed."""
    body = [b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n{"ty', b'pe":"DELETED"}\n']
    raw = b"".join(b"%x;x=y\r\n%s\r\n" % (len(c), c) for c in body) + b"0\r\n\r\n"
    go = asyncio.Event()

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await w.drain()
        await go.wait()
        for i in range(len(raw)):
            w.write(raw[i : i + 1])
            await w.drain()
            await asyncio.sleep(0)

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        stream = await pool.stream(GET, 5)
        assert (stream.status, stream.reason) == (200, "OK")
        go.set()
        got = await asyncio.wait_for(_drain(stream), 10)
        assert b"".join(got) == b"".join(body)
        assert await stream.next() is None
        await asyncio.wait_for(asyncio.shield(stream.lost), 5)  # type: ignore[arg-type]
        assert server.requests == [GET] and not pool._open


async def test_a_stream_with_a_length_or_until_closed(pools: list[Http1Pool]) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            w.write(_answer(b'{"kind":"Status","code":410}', "410 Gone"))
        else:
            w.write(b"HTTP/1.1 200 OK\r\n\r\nuntil")
            await w.drain()
            w.write(b" closed")
            await w.drain()
            w.close()

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        gone = await pool.stream(GET, 5)
        assert gone.status == 410
        assert await gone.read() == b'{"kind":"Status","code":410}'
        closed = await pool.stream(GET, 5)
        assert await asyncio.wait_for(closed.read(), 5) == b"until closed"
    assert server.connections == 2


async def test_a_stream_cut_before_its_last_chunk_is_a_connection_failure(
    pools: list[Http1Pool],
) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\nde")
        await w.drain()
        w.close()

    async with RawServer(script) as server:
        stream = await _pool(pools, server).stream(GET, 5)
        assert await stream.next() == b"abc"
        assert await stream.next() == b"de"  # what came of the chunk, as it came
        with pytest.raises(ConnectionFailedError) as cut:
            await asyncio.wait_for(stream.next(), 5)
        assert cut.value.answered


async def test_a_stream_without_a_head_in_time_or_garbled_fails(pools: list[Http1Pool]) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            await asyncio.sleep(10)
        else:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        with pytest.raises(ConnectionFailedError, match="no answer within"):
            await pool.stream(GET, 0.2)
        garbled = await pool.stream(GET, 5)
        with pytest.raises(ConnectionFailedError, match="unreadable answer"):
            await asyncio.wait_for(garbled.next(), 5)
        await asyncio.sleep(0.1)
        assert not pool._open


async def test_a_stream_read_slowly_stops_its_socket_and_loses_nothing(
    pools: list[Http1Pool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back-pressure: past the high-water mark the stream stops reading from its socket (what
    the server sends waits in the sockets' buffers), and reads again as its reader catches
    up."""
    monkeypatch.setattr(http1, "_STREAM_HIGH_WATER", 1000)
    piece = b"x" * 99 + b"\n"

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _i in range(2000):
            w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()

    async with RawServer(script) as server:
        stream = await _pool(pools, server).stream(GET, 5)
        await asyncio.sleep(0.3)  # the server writes; nobody reads
        # paused past the mark, with at most one more socket read (asyncio reads up to
        # 256 KiB at a time) taken in; and no more reads while paused
        held = stream._queued
        assert stream._paused and held < 1000 + 256 * 1024
        await asyncio.sleep(0.2)
        assert stream._queued == held
        got = await asyncio.wait_for(_drain(stream), 10)
    assert b"".join(got) == piece * 2000 and not stream._paused


async def test_close_closes_the_streams_too(pools: list[Http1Pool]) -> None:
    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await asyncio.sleep(10)

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        stream = await pool.stream(GET, 5)
        await pool.aclose()
        assert stream.lost is not None and stream.lost.done()
        with pytest.raises(ConnectionFailedError):
            await asyncio.wait_for(stream.next(), 5)


async def _answer_empty(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
    w.write(_answer(b"{}"))


def _slow_connects(pool: Http1Pool, seconds: float) -> list[int]:
    """Make each new connection of ``pool`` take ``seconds`` (a handshake's time); the list
    returned holds how many were being opened at once, at each opening."""
    at_once: list[int] = []
    opening = 0
    connect = pool._connect

    async def slow() -> http1._Connection:
        nonlocal opening
        opening += 1
        at_once.append(opening)
        try:
            await asyncio.sleep(seconds)
            return await connect()
        finally:
            opening -= 1

    pool._connect = slow  # type: ignore[method-assign]
    return at_once


async def test_a_burst_opens_a_few_connections_at_a_time_and_reuses_those_that_free(
    pools: list[Http1Pool],
) -> None:
    """Forty requests at once on an empty pool: never more than CONNECTS_AT_ONCE handshakes
    at a time, every request answered, and requests that found no turn to connect took the
    connections that came free instead of opening forty."""

    async def script(_: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        w.write(_answer(b'{"n":%d}' % n))

    async with RawServer(script) as server:
        pool = _pool(pools, server)
        at_once = _slow_connects(pool, 0.05)
        answers = await asyncio.wait_for(
            asyncio.gather(*(pool.request(HEAD, b"{}", 5) for _ in range(40))), 10
        )
    assert sorted(int(a.body[5:-1]) for a in answers) == list(range(1, 41))
    assert max(at_once) == http1.CONNECTS_AT_ONCE
    assert http1.CONNECTS_AT_ONCE <= pool.connections_made < 40
    assert server.connections == pool.connections_made


async def test_a_request_cancelled_while_waiting_for_a_turn_holds_up_no_other(
    pools: list[Http1Pool],
) -> None:
    """Requests waiting for a connection are cancelled: every other request is answered."""

    async with RawServer(_answer_empty) as server:
        pool = _pool(pools, server)
        _slow_connects(pool, 0.05)
        tasks = [asyncio.create_task(pool.request(HEAD, b"{}", 5)) for _ in range(30)]
        await asyncio.sleep(0.01)  # eight connecting, the rest waiting
        assert len(pool._waiting) == 30 - http1.CONNECTS_AT_ONCE
        for t in tasks[http1.CONNECTS_AT_ONCE : http1.CONNECTS_AT_ONCE + 6]:
            t.cancel()
        _, pending = await asyncio.wait(tasks, timeout=10)
    assert not pending
    cancelled = [t for t in tasks if t.cancelled()]
    assert len(cancelled) == 6
    assert all(t.result().status == 201 for t in tasks if not t.cancelled())
    assert not pool._waiting


async def test_close_fails_the_requests_waiting_for_a_connection(pools: list[Http1Pool]) -> None:
    async with RawServer(_answer_empty) as server:
        pool = _pool(pools, server)
        _slow_connects(pool, 0.2)
        tasks = [asyncio.create_task(pool.request(HEAD, b"{}", 5)) for _ in range(12)]
        await asyncio.sleep(0.01)
        pool.close()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
    assert all(isinstance(r, ConnectionFailedError) for r in results)


async def test_a_turn_given_to_a_request_cancelled_before_it_ran_goes_to_the_next(
    pools: list[Http1Pool],
) -> None:
    """Every opening turn is taken by a connection that takes very long; a connection comes
    back idle and wakes the first waiting request, which is cancelled before it runs. The
    next one takes the idle connection at once, not when an opening ends."""
    async with RawServer(_answer_empty) as server:
        pool = _pool(pools, server)
        spare = await pool._connect()
        _slow_connects(pool, 60)
        opening = [asyncio.create_task(pool.request(HEAD, b"{}", 90)) for _ in range(8)]
        first = asyncio.create_task(pool.request(HEAD, b"{}", 5))
        second = asyncio.create_task(pool.request(HEAD, b"{}", 5))
        await asyncio.sleep(0.01)
        assert len(pool._waiting) == 2
        pool._give_back(spare)  # wakes ``first``
        first.cancel()
        try:
            answer = await asyncio.wait_for(second, 5)
        finally:
            for t in opening:
                t.cancel()
            await asyncio.gather(*opening, return_exceptions=True)
    assert answer.status == 201
    assert first.cancelled()
