"""The local proxy behind ``corral dashboard``: a browser cannot sign requests, this can.

Deployed, the API is IAM-authorised (SigV4 on AWS, a Google ID token on GCP). The proxy
listens on 127.0.0.1 only (as ``kubectl proxy`` does), serves the dashboard's static files
itself (the same package data the ``api`` function serves) and forwards every other request
to the API, signed with the user's own credentials.

What keeps other local processes and web pages out: the page sends the proxy's one-time
token (``Authorization: Bearer``, taken from the URL fragment the command prints, exactly as
on the local stack), which the proxy checks and never forwards; and a request whose ``Host``
is not the proxy's own address is refused (a DNS-rebinding page cannot borrow the session).
Nothing but the method, path, query, body, ``Content-Type`` and ``Accept`` reaches the API,
and only for the methods the API serves (any other is a 405 here).

HTTP itself (framing, chunked bodies, the API's body size limit before a body is read,
keep-alive) is waitress's, the same server as the local stack's: ``corral.local.http_server``
says why; a request it refuses is answered in the API's JSON, like every reply here.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from corral.api import dashboard
from corral.local.http_server import LoopbackServer, Request, StartResponse, respond

log = logging.getLogger(__name__)

UPSTREAM_TIMEOUT_S = 30.0
# What the API serves (OPTIONS too: a browser's preflight is the API's to answer).
FORWARDED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class Signer(Protocol):
    """Adds the credentials of one kind of API to a request's headers."""

    def sign(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        """The headers to send (``headers`` plus credentials); ``url`` is the full target."""
        ...


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes


def json_reply(status: int, message: str) -> Reply:
    return Reply(status, "application/json", json.dumps({"message": message}).encode())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A signed request must not be replayed to wherever a redirect points: pass it back.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class DashboardProxy:
    def __init__(self, upstream: str, signer: Signer, port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.signer = signer
        self.token = secrets.token_urlsafe(24)
        self._opener = urllib.request.build_opener(_NoRedirect())
        self._server = LoopbackServer(self._app, port, name="dashboard-proxy")
        self.port = self._server.port
        self.url = self._server.url
        self._hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}

    @property
    def page_url(self) -> str:
        """The link to print: the token rides in the fragment, which never leaves the browser."""
        return f"{self.url}/#token={self.token}"

    # ---- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        self._server.start()

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.stop()

    # ---- requests ---------------------------------------------------------------------
    def host_allowed(self, host: str | None) -> bool:
        return (host or "").lower() in self._hosts

    def authorised(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.token.encode()
        )

    def forward(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> Reply:
        url = self.upstream + target
        sent = {"accept": headers.get("accept") or "application/json"}
        sent["user-agent"] = "corral-dashboard-proxy"
        if body:
            sent["content-type"] = headers.get("content-type") or "application/json"
        try:
            signed = self.signer.sign(method, url, body or None, sent)
        except Exception as exc:  # no credentials, an expired SSO session, gcloud missing
            log.warning("cannot sign %s %s: %s", method, target, exc)
            return json_reply(502, f"corral dashboard cannot sign the request: {exc}")
        request = urllib.request.Request(url, data=body or None, headers=signed, method=method)
        try:
            with self._opener.open(request, timeout=UPSTREAM_TIMEOUT_S) as answer:
                return Reply(answer.status, answer.headers.get("content-type", ""), answer.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.headers.get("content-type", ""), exc.read())
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return json_reply(502, f"cannot reach {self.upstream}: {reason}")

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = Request.from_environ(environ)
        reply, headers = self.serve(request)
        sent = [*(headers or {"Cache-Control": "no-store"}).items()]
        if reply.content_type:
            sent = [(k, v) for k, v in sent if k.lower() != "content-type"]
            sent.append(("Content-Type", reply.content_type))
        return respond(start_response, reply.status, sent, reply.body)

    def serve(self, request: Request) -> tuple[Reply, dict[str, str] | None]:
        """The reply to one request (its body read whole), and headers other than the
        default ``Cache-Control: no-store``."""
        if not self.host_allowed(request.header("host")):
            return json_reply(403, "this proxy answers only requests to its own address"), None
        if not request.target.startswith("/"):  # "GET http://elsewhere/..." (proxy-style)
            return json_reply(400, "only paths of this server, not other URLs"), None
        path = urlsplit(request.target).path
        if request.method in ("GET", "HEAD") and _is_asset(path):
            return _asset(path, request.header("if-none-match"))
        if request.method not in FORWARDED_METHODS:
            allow = {"Allow": ", ".join(FORWARDED_METHODS), "Cache-Control": "no-store"}
            return json_reply(405, f"the API does not serve {request.method} requests"), allow
        if not self.authorised(request.header("authorization")):
            message = "missing or wrong proxy token: open the link `corral dashboard` printed"
            return json_reply(401, message), None
        headers = dict(request.headers)
        return self.forward(request.method, request.target, request.body, headers), None


def _is_asset(path: str) -> bool:
    return path == "/" or path.startswith("/dashboard/")


def _asset(path: str, if_none_match: str | None) -> tuple[Reply, dict[str, str] | None]:
    asset = dashboard.index() if path == "/" else dashboard.get(path.removeprefix("/dashboard/"))
    if asset is None:
        return json_reply(404, f"no dashboard file {path}"), None
    headers = asset.headers()
    if asset.not_modified(if_none_match):
        return Reply(304, asset.content_type, b""), headers
    return Reply(200, asset.content_type, asset.body.encode()), headers
