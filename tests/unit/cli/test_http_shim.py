"""The local stack's HTTP server: a body over the limit is refused from its declared size,
before a byte of it is read; replies are not held back by Nagle; bursts of connections queue.
(Framing, methods and bad request lines, for this server and the dashboard proxy alike:
test_http_framing.py.)"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from corral.api.http_events import MAX_BODY_BYTES
from corral.local.http_shim import HttpShim


@pytest.fixture
def shim() -> Iterator[tuple[HttpShim, list[dict[str, Any]]]]:
    invoked: list[dict[str, Any]] = []

    def invoke(event: dict[str, Any]) -> Any:
        invoked.append(event)
        return {"statusCode": 200, "body": "{}", "headers": {"content-type": "application/json"}}

    server = HttpShim(invoke)
    server.start()
    yield server, invoked
    server.stop()


def _exchange(shim: HttpShim, head: str, body: bytes = b"") -> tuple[str, dict[str, Any]]:
    """Send ``head`` (and ``body``) on a fresh connection and read until the server closes it
    (every request here ends the connection); (status line, JSON reply body)."""
    with socket.create_connection(("127.0.0.1", shim.port), timeout=10) as conn:
        conn.sendall(head.encode() + body)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    header, _, payload = reply.partition(b"\r\n\r\n")
    return header.decode().splitlines()[0], json.loads(payload or b"{}")


def test_an_oversized_body_is_refused_before_it_is_read(
    shim: tuple[HttpShim, list[dict[str, Any]]],
) -> None:
    server, invoked = shim
    size = MAX_BODY_BYTES + 1
    # Only the headers are sent: a server that tried to read the body would wait (and the
    # client time out) instead of answering.
    head = (
        f"POST /experiments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    status, body = _exchange(server, head)
    assert status == "HTTP/1.1 413 Request Entity Too Large"
    assert body["message"] == (
        f"the request body is {size:,} bytes, over the limit of {MAX_BODY_BYTES:,} bytes"
    )
    assert invoked == []


def test_a_body_under_the_limit_is_read_and_passed_on(
    shim: tuple[HttpShim, list[dict[str, Any]]],
) -> None:
    server, invoked = shim
    body = b"x" * 1024
    head = (
        f"POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    status, _ = _exchange(server, head, body)
    assert status.startswith("HTTP/1.1 200") and invoked[0]["body"] == "x" * 1024


@pytest.mark.parametrize("length", ["-1", "12abc", "1e3"])
def test_a_content_length_that_is_no_byte_count_is_a_400(
    shim: tuple[HttpShim, list[dict[str, Any]]], length: str
) -> None:
    server, invoked = shim
    status, body = _exchange(server, f"POST /x HTTP/1.1\r\nContent-Length: {length}\r\n\r\n")
    assert status.startswith("HTTP/1.1 400") and "Content-Length" in body["message"]
    assert invoked == []


def test_replies_are_sent_without_nagle_delay_and_bursts_queue(
    shim: tuple[HttpShim, list[dict[str, Any]]],
) -> None:
    server, _ = shim
    waitress: Any = server._server._server
    assert waitress.adj.backlog >= 128 and waitress.adj.connection_limit >= 1000
    # The server's side of a kept-alive connection has TCP_NODELAY set (the reply's headers
    # and body may be two writes; with Nagle the body waits ~40 ms for the client's delayed
    # ACK).
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")
        channels = [c for c in list(waitress._map.values()) if hasattr(c, "requests")]
        assert len(channels) == 1
        assert channels[0].socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"\xb2", "400"),  # latin-1 for a superscript two: a "digit" int() cannot read
        (b"9" * 5000, "413"),  # more digits than int() converts by default
    ],
)
def test_a_content_length_int_cannot_read_is_refused_not_crashed_on(
    shim: tuple[HttpShim, list[dict[str, Any]]], raw: bytes, status: str
) -> None:
    server, invoked = shim
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b"POST /x HTTP/1.1\r\nContent-Length: " + raw + b"\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    assert reply.split(b"\r\n", 1)[0].decode().startswith(f"HTTP/1.1 {status}")
    assert invoked == []
