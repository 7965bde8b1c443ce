"""``corral dashboard``'s signing proxy against a loopback fake of the deployed API: what
reaches the API is the request as the page made it (method, path, query, body), signed
with SigV4 (the signature recomputed here with botocore), and never the proxy's own token;
what does not carry that token, or comes for another host, never reaches it."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from corral.cli.client import CliError, Endpoint
from corral.cli.dashboard_cmd import (
    ID_TOKEN_REFRESH_S,
    BearerSigner,
    GoogleIdTokenSigner,
    SigV4Signer,
    choose_signer,
)
from corral.cli.dashboard_proxy import DashboardProxy

REGION = "eu-west-1"
CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-1")
AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)/"
    r"execute-api/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeApi:
    url: str
    seen: list[Seen] = field(default_factory=list)
    status: int = 200
    reply: dict[str, Any] = field(default_factory=lambda: {"ok": True})


@pytest.fixture
def upstream() -> Iterator[FakeApi]:
    fake = FakeApi(url="")

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.seen.append(Seen(self.command, self.path, headers, body))
            payload = json.dumps(fake.reply).encode()
            self.send_response(fake.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/prod"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(upstream: FakeApi) -> Iterator[DashboardProxy]:
    running = DashboardProxy(upstream.url, SigV4Signer(REGION, CREDENTIALS))
    running.start()
    yield running
    running.stop()


def call(
    proxy: DashboardProxy,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: str | None = "proxy",
    host: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {proxy.token if token == 'proxy' else token}"
    if host is not None:
        headers["Host"] = host
    request = urllib.request.Request(proxy.url + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers.items()), reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


def verify_sigv4(seen: Seen, upstream: FakeApi) -> dict[str, str]:
    """Recompute the signature from what arrived, as API Gateway would; returns its parts."""
    match = AUTH.match(seen.headers["authorization"])
    assert match, seen.headers["authorization"]
    signed = match["signed"].split(";")
    assert {"host", "x-amz-date", "x-amz-security-token"} <= set(signed)
    origin = upstream.url.removesuffix("/prod")
    request = AWSRequest(
        method=seen.method,
        url=origin + seen.path,
        data=seen.body or None,
        headers={name: seen.headers[name] for name in signed},
    )
    request.context["timestamp"] = seen.headers["x-amz-date"]
    auth = SigV4Auth(CREDENTIALS, "execute-api", REGION)
    string_to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    assert auth.signature(string_to_sign, request) == match["signature"]
    return match.groupdict()


def test_a_post_reaches_the_api_unchanged_and_correctly_signed(
    proxy: DashboardProxy, upstream: FakeApi
) -> None:
    body = json.dumps({"config": "name: x\nentrypoint: python t.py\n"}).encode()
    status, _, reply = call(proxy, "POST", "/experiments/exp-1/kill?reason=a%20b&n=1", body)
    assert status == 200 and json.loads(reply) == {"ok": True}
    (seen,) = upstream.seen
    assert (seen.method, seen.path, seen.body) == (
        "POST",
        "/prod/experiments/exp-1/kill?reason=a%20b&n=1",
        body,
    )
    assert seen.headers["content-type"] == "application/json"
    parts = verify_sigv4(seen, upstream)
    assert parts["key"] == "AKIDEXAMPLE" and parts["region"] == REGION
    assert parts["date"] == datetime.now(UTC).strftime("%Y%m%d")
    assert seen.headers["x-amz-security-token"] == "session-1"
    assert proxy.token not in json.dumps(seen.headers)  # the proxy's token stays local


def test_a_get_with_a_query_is_signed_over_the_query(
    proxy: DashboardProxy, upstream: FakeApi
) -> None:
    status, headers, _ = call(proxy, "GET", "/events?since=1700000000.5&limit=500&pool=gpu")
    assert status == 200 and headers["Cache-Control"] == "no-store"
    (seen,) = upstream.seen
    assert seen.path == "/prod/events?since=1700000000.5&limit=500&pool=gpu" and seen.body == b""
    verify_sigv4(seen, upstream)


@pytest.mark.parametrize("token", [None, "wrong"])
def test_without_the_proxy_token_nothing_reaches_the_api(
    proxy: DashboardProxy, upstream: FakeApi, token: str | None
) -> None:
    status, _, reply = call(proxy, "POST", "/experiments/exp-1/kill", b"{}", token=token)
    assert status == 401
    assert "open the link `corral dashboard` printed" in json.loads(reply)["message"]
    assert upstream.seen == []


def test_a_request_for_another_host_is_refused(proxy: DashboardProxy, upstream: FakeApi) -> None:
    # A page on attacker.example that re-pointed its DNS name at 127.0.0.1.
    status, _, _ = call(proxy, "GET", "/experiments", host=f"attacker.example:{proxy.port}")
    assert status == 403 and upstream.seen == []


def test_a_proxy_style_absolute_url_is_refused(proxy: DashboardProxy, upstream: FakeApi) -> None:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    connection.request(
        "GET",
        "http://example.com/experiments",
        headers={"Host": f"127.0.0.1:{proxy.port}", "Authorization": f"Bearer {proxy.token}"},
    )
    reply = connection.getresponse()
    assert reply.status == 400 and upstream.seen == []
    connection.close()


def test_the_page_is_served_locally_without_a_token(
    proxy: DashboardProxy, upstream: FakeApi
) -> None:
    status, headers, page = call(proxy, "GET", "/", token=None)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'src="dashboard/app.js"' in page
    status, headers, _ = call(proxy, "GET", "/dashboard/app.js", token=None)
    assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8"
    status, _, _ = call(proxy, "GET", "/dashboard/dashboard_proxy.py", token=None)
    assert status == 404
    assert upstream.seen == []


def test_api_errors_pass_through_with_their_status(
    proxy: DashboardProxy, upstream: FakeApi
) -> None:
    upstream.status, upstream.reply = 404, {"message": "no experiment exp-9"}
    status, _, reply = call(proxy, "GET", "/experiments/exp-9")
    assert status == 404 and json.loads(reply) == {"message": "no experiment exp-9"}


def test_an_unreachable_api_is_a_502_naming_it(upstream: FakeApi) -> None:
    running = DashboardProxy("http://127.0.0.1:9", BearerSigner("t"))  # discard port: refused
    running.start()
    try:
        status, _, reply = call(running, "GET", "/experiments")
    finally:
        running.stop()
    assert status == 502
    assert json.loads(reply)["message"].startswith("cannot reach http://127.0.0.1:9")


def test_a_signing_failure_is_a_502_saying_so(upstream: FakeApi) -> None:
    def no_token(audience: str) -> str:
        raise CliError("cannot get a Google ID token (gcloud): not logged in")

    running = DashboardProxy(upstream.url, GoogleIdTokenSigner(upstream.url, fetch=no_token))
    running.start()
    try:
        status, _, reply = call(running, "GET", "/experiments")
    finally:
        running.stop()
    assert status == 502 and "not logged in" in json.loads(reply)["message"]
    assert upstream.seen == []


def test_google_id_tokens_are_fetched_once_and_renewed_before_expiry() -> None:
    now = [0.0]
    fetched: list[str] = []

    def fetch(audience: str) -> str:
        fetched.append(audience)
        return f"token-{len(fetched)}"

    signer = GoogleIdTokenSigner("https://api.example", fetch=fetch, clock=lambda: now[0])
    sign = lambda: signer.sign("GET", "https://api.example/x", None, {})["authorization"]  # noqa: E731
    assert sign() == "Bearer token-1"
    now[0] = ID_TOKEN_REFRESH_S - 1
    assert sign() == "Bearer token-1"
    now[0] = ID_TOKEN_REFRESH_S
    assert sign() == "Bearer token-2"
    assert fetched == ["https://api.example", "https://api.example"]


def test_the_signer_follows_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    deployed = Endpoint("https://abc123.execute-api.eu-west-1.amazonaws.com", None, "eu-west-1")
    signer = choose_signer(deployed)
    assert isinstance(signer, SigV4Signer) and signer.region == "eu-west-1"
    custom = choose_signer(Endpoint("https://corral.example.com", None), aws_region="us-east-2")
    assert isinstance(custom, SigV4Signer) and custom.region == "us-east-2"
    google = choose_signer(Endpoint("https://corral-api-xyz.a.run.app", None))
    assert isinstance(google, GoogleIdTokenSigner)
    assert google.audience == "https://corral-api-xyz.a.run.app"
    local = choose_signer(Endpoint("http://127.0.0.1:8080", "tok"))
    assert local.sign("GET", "http://127.0.0.1:8080/x", None, {}) == {"authorization": "Bearer tok"}
    with pytest.raises(CliError, match=r"no credentials for https://corral\.example\.com"):
        choose_signer(Endpoint("https://corral.example.com", None))
