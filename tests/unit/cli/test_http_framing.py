"""HTTP/1.1 framing on both loopback servers, over raw sockets: the local stack's API
(``HttpShim`` in front of the real resolver) and ``corral dashboard``'s proxy (in front of
that API). A chunked body is decoded, never read as a second request; ambiguous framing and
bad request lines are a 400; methods the API has no route for are answered by the API (or,
at the proxy, a 405); and every answer, the server's own refusals included, is JSON."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from corral.api.app import build_resolver
from corral.api.auth import TokenAuthenticator
from corral.cli.dashboard_cmd import BearerSigner
from corral.cli.dashboard_proxy import DashboardProxy
from corral.local.http_shim import HttpShim
from corral.local.lambda_host import LambdaContext
from tests.services.harness import Cluster

TOKEN = "user-token"


@dataclass
class Target:
    kind: str
    port: int
    token: str
    seen: list[dict[str, Any]] = field(default_factory=list)  # events that reached the API

    def head(self, request_line: str, *lines: str) -> bytes:
        """A request's head with this server's Host and token, and ``lines``."""
        common = [f"Host: 127.0.0.1:{self.port}", f"Authorization: Bearer {self.token}"]
        return "\r\n".join([request_line, *common, *lines, "", ""]).encode()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type") == "application/json", self.headers
        return json.loads(self.body)


@pytest.fixture(params=["local-api", "dashboard-proxy"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    cluster = Cluster()
    resolver = build_resolver(lambda: cluster.ctx, TokenAuthenticator({TOKEN: "me"}, b"s"))
    seen: list[dict[str, Any]] = []

    def invoke(event: dict[str, Any]) -> Any:
        seen.append(event)
        return resolver.resolve(event, LambdaContext("ApiFunction", 20, "us-east-1"))

    api = HttpShim(invoke, route_key="ANY /{proxy+}")
    api.start()
    try:
        if request.param == "local-api":
            yield Target("local-api", api.port, TOKEN, seen)
            return
        proxy = DashboardProxy(api.url, BearerSigner(TOKEN))
        proxy.start()
        try:
            yield Target("dashboard-proxy", proxy.port, proxy.token, seen)
        finally:
            proxy.stop()
    finally:
        api.stop()


def exchange(target: Target, raw: bytes, *, head: bool = False) -> list[Reply]:
    """Send ``raw`` on one connection, read until the server closes it, and split what came
    back into replies by their Content-Length (``head``: the first carries no body)."""
    with socket.create_connection(("127.0.0.1", target.port), timeout=10) as conn:
        conn.sendall(raw)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    replies: list[Reply] = []
    while data:
        header, sep, data = data.partition(b"\r\n\r\n")
        assert sep, f"a reply without the end of its head: {header!r}"
        status_line, *lines = header.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
        length = 0 if head and not replies else int(headers.get("content-length", "0"))
        replies.append(Reply(int(status_line.split()[1]), headers, data[:length]))
        data = data[length:]
    return replies


def test_a_chunked_body_is_decoded_not_read_as_a_second_request(target: Target) -> None:
    body = json.dumps({"config": "name: x\n"}).encode()
    chunks = b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
    raw = (
        target.head("POST /experiments HTTP/1.1", "Content-Type: application/json")[:-2]
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + chunks
        + target.head("GET /healthz HTTP/1.1", "Connection: close")
    )
    first, second = exchange(target, raw)  # two requests, two replies: no more, no fewer
    assert 400 <= first.status < 500 and first.json()["message"]  # the API judged the body
    assert (second.status, second.json()["status"]) == (200, "ok")
    posted = [e for e in target.seen if e["requestContext"]["http"]["method"] == "POST"]
    assert [json.loads(e["body"]) for e in posted] == [{"config": "name: x\n"}]
    assert [e["rawPath"] for e in target.seen] == ["/experiments", "/healthz"]


@pytest.mark.parametrize(
    "lengths",
    [("Content-Length: 2", "Content-Length: 3"), ("Content-Length: 2, 3",)],
    ids=["two-headers", "one-list"],
)
def test_conflicting_content_lengths_are_a_400_in_json(
    target: Target, lengths: tuple[str, ...]
) -> None:
    raw = target.head("POST /experiments HTTP/1.1", *lengths) + b"{}x"
    (reply,) = exchange(target, raw)
    assert reply.status == 400 and reply.json()["message"].startswith("bad Content-Length")
    assert reply.headers["connection"] == "close" and target.seen == []


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ("Content-Length: 3", "Transfer-Encoding: chunked"),
            "both Content-Length and Transfer-Encoding",
        ),
        (("Transfer-Encoding: gzip",), "Transfer-Encoding requested is not supported"),
    ],
    ids=["both-lengths", "unknown-coding"],
)
def test_ambiguous_framing_is_refused_in_json(
    target: Target, lines: tuple[str, ...], message: str
) -> None:
    raw = target.head("POST /experiments HTTP/1.1", *lines) + b"3\r\n{}x\r\n0\r\n\r\n"
    (reply,) = exchange(target, raw)
    # RFC 9112 6.1: a transfer coding the server does not know is a 501.
    assert reply.status in (400, 501) and message in reply.json()["message"]
    assert target.seen == []


def test_transfer_encoding_on_http_1_0_is_a_400(target: Target) -> None:
    raw = (
        target.head("POST /experiments HTTP/1.0", "Transfer-Encoding: chunked")
        + b"2\r\n{}\r\n0\r\n\r\n"
    )
    (reply,) = exchange(target, raw)  # the chunks are not read as a second request either
    assert reply.status == 400 and "HTTP/1.0" in reply.json()["message"]
    assert target.seen == []


def test_trace_is_answered_in_json_by_whoever_owns_the_path(target: Target) -> None:
    (reply,) = exchange(target, target.head("TRACE /experiments HTTP/1.1", "Connection: close"))
    if target.kind == "local-api":  # the API's resolver has no such route
        assert (reply.status, reply.json()) == (404, {"message": "no route TRACE /experiments"})
        assert [e["requestContext"]["http"]["method"] for e in target.seen] == ["TRACE"]
    else:  # the proxy forwards only the methods the API serves
        assert reply.status == 405 and "TRACE" in reply.json()["message"]
        assert "POST" in reply.headers["allow"] and target.seen == []


@pytest.mark.parametrize(
    "line",
    [b"GARBAGE", b"get /healthz HTTP/1.1", b"GET /healthz HTTP/1.1 extra", b"\x00\x01 / HTTP/1.1"],
    ids=["one-word", "lower-case-method", "four-words", "control-bytes"],
)
def test_a_bad_request_line_is_a_400_in_json(target: Target, line: bytes) -> None:
    (reply,) = exchange(target, line + b"\r\nHost: x\r\n\r\n")
    assert reply.status == 400 and reply.json()["message"].startswith("Bad Request")
    assert target.seen == []


def test_the_servers_own_refusals_are_json(target: Target) -> None:
    raw = target.head("POST /experiments HTTP/1.1", "Transfer-Encoding: chunked") + b"zz\r\n{}"
    (reply,) = exchange(target, raw)
    assert (reply.status, reply.json()) == (400, {"message": "Bad Request: Invalid chunk size"})
    assert target.seen == []


def test_a_head_reply_has_no_body_and_the_connection_carries_on(target: Target) -> None:
    # The API has no HEAD routes (its 404 has a body too); the proxy serves its page itself.
    path, status = ("/healthz", 404) if target.kind == "local-api" else ("/", 200)
    raw = target.head(f"HEAD {path} HTTP/1.1") + target.head(
        "GET /healthz HTTP/1.1", "Connection: close"
    )
    first, second = exchange(target, raw, head=True)
    assert first.status == status and first.body == b""
    assert int(first.headers["content-length"]) > 0
    assert (second.status, second.json()["status"]) == (200, "ok")
