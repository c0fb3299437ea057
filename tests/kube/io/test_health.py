"""The health and metrics endpoints on asyncio's own streams: the three paths and their
answers, what is refused (other paths, methods, garbage, a head too long), a client that says
nothing cannot hold the others up, and stop() closes what is open."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from gangsched.kube.io import health
from gangsched.kube.io.health import HealthServer


class State:
    live = True
    ready = False


@pytest.fixture
async def served() -> AsyncIterator[tuple[HealthServer, State]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = State()
    server = HealthServer(
        f"127.0.0.1:{port}",
        lambda: b"# HELP up\nup 1\n",
        lambda: state.ready,
        lambda: state.live,
    )
    await server.start()
    yield server, state
    await server.stop()


async def _ask(server: HealthServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)  # until the server closes
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def _get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def test_the_three_paths(served: tuple[HealthServer, State]) -> None:
    server, state = served
    status, headers, body = await _ask(server, _get("/metrics"))
    assert (status, body) == (200, b"# HELP up\nup 1\n")
    assert headers["content-type"] == "text/plain; version=0.0.4"
    assert headers["content-length"] == str(len(body)) and headers["connection"] == "close"
    assert (await _ask(server, _get("/healthz")))[::2] == (200, b"ok")
    assert (await _ask(server, _get("/readyz?verbose")))[::2] == (503, b"not ready")
    state.ready, state.live = True, False
    assert (await _ask(server, _get("/readyz")))[::2] == (200, b"ok")
    assert (await _ask(server, _get("/healthz")))[::2] == (500, b"stalled")
    status, headers, body = await _ask(server, _get("/metrics", "HEAD"))
    assert (status, body) == (200, b"") and int(headers["content-length"]) > 0


async def test_what_is_refused(served: tuple[HealthServer, State]) -> None:
    server, _ = served
    assert (await _ask(server, _get("/nothing")))[0] == 404
    assert (await _ask(server, _get("/metrics", "POST")))[0] == 405
    assert (await _ask(server, b"hello\r\n\r\n"))[0] == 400
    assert (await _ask(server, b"GET / SPDY/3\r\n\r\n"))[0] == 400
    too_long = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (64 * 1024) + b"\r\n\r\n"
    assert (await _ask(server, too_long))[0] == 400


async def test_a_silent_client_holds_nobody_up_and_is_let_go(
    served: tuple[HealthServer, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = served
    monkeypatch.setattr(health, "REQUEST_SECONDS", 0.3)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
    assert (await _ask(server, _get("/healthz")))[0] == 200
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, unanswered
    writer.close()


async def test_stop_closes_the_open_connections(served: tuple[HealthServer, State]) -> None:
    server, _ = served
    reader, writer = await asyncio.open_connection(server.host, server.port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(server.stop(), 5)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection(server.host, server.port)
