"""``corral dashboard``'s proxy refuses a request body from its ``Content-Length`` header, with
the API's own limit and words, before it reads a byte of the body or signs anything: 400
naming the header for a length that is no byte count, 413 for one over the limit."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from corral.api.http_events import MAX_BODY_BYTES
from corral.cli.dashboard_proxy import DashboardProxy


class RecordingSigner:
    """Stands for the credentials: what it is asked to sign is what would reach the API."""

    def __init__(self) -> None:
        self.signed: list[tuple[str, bytes | None]] = []

    def sign(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        self.signed.append((method, body))
        return headers


@pytest.fixture
def running() -> Iterator[tuple[DashboardProxy, RecordingSigner]]:
    signer = RecordingSigner()
    proxy = DashboardProxy("http://127.0.0.1:9", signer)  # the discard port: never answers
    proxy.start()
    yield proxy, signer
    proxy.stop()


def exchange(
    proxy: DashboardProxy, length: str, body: bytes = b""
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """POST with ``Content-Length: length`` and ``body``, then close our side: a proxy that
    read the body would get what was sent (never a hang). (status, headers, JSON reply)."""
    head = (
        f"POST /experiments HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
        f"Authorization: Bearer {proxy.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as conn:
        conn.sendall(head.encode("latin-1") + body)
        conn.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    header, _, payload = reply.partition(b"\r\n\r\n")
    status_line, *lines = header.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, json.loads(payload)


# "²" is a digit to str.isdigit (headers are read as Latin-1) but no number to int().
@pytest.mark.parametrize("length", ["-1", "12abc", "1e3", "0x10", "²"])
def test_a_content_length_that_is_no_byte_count_is_a_400_naming_it(
    running: tuple[DashboardProxy, RecordingSigner], length: str
) -> None:
    proxy, signer = running
    status, headers, reply = exchange(proxy, length, b"{}")
    assert status == 400 and reply["message"].startswith("bad Content-Length")
    assert headers["connection"] == "close" and signer.signed == []


@pytest.mark.parametrize(
    ("length", "message"),
    [
        (
            str(MAX_BODY_BYTES + 1),
            f"the request body is {MAX_BODY_BYTES + 1:,} bytes, "
            f"over the limit of {MAX_BODY_BYTES:,} bytes",
        ),
        ("9" * 5_000, f"the request body is over the limit of {MAX_BODY_BYTES:,} bytes"),
    ],
    ids=["one-over", "5000-digits"],
)
def test_a_body_over_the_apis_limit_is_a_413_before_it_is_read(
    running: tuple[DashboardProxy, RecordingSigner], length: str, message: str
) -> None:
    proxy, signer = running
    status, headers, reply = exchange(proxy, length)  # only the headers are ever sent
    assert (status, reply["message"]) == (413, message)
    assert headers["connection"] == "close" and signer.signed == []


def test_a_body_at_the_limit_is_read_and_passed_on(
    running: tuple[DashboardProxy, RecordingSigner],
) -> None:
    proxy, signer = running
    body = b"x" * MAX_BODY_BYTES
    status, _, reply = exchange(proxy, f"00{len(body)}", body)  # leading zeros: still a count
    assert status == 502 and reply["message"].startswith("cannot reach http://127.0.0.1:9")
    assert signer.signed == [("POST", body)]
