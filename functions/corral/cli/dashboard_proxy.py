"""The local proxy behind ``corral dashboard``: a browser cannot sign requests, this can.

Deployed, the API is IAM-authorised (SigV4 on AWS, a Google ID token on GCP). The proxy
listens on 127.0.0.1 only (as ``kubectl proxy`` does), serves the dashboard's static files
itself (the same package data the ``api`` function serves) and forwards every other request
to the API, signed with the user's own credentials.

What keeps other local processes and web pages out: the page sends the proxy's one-time
token (``Authorization: Bearer``, taken from the URL fragment the command prints, exactly as
on the local stack), which the proxy checks and never forwards; and a request whose ``Host``
is not the proxy's own address is refused (a DNS-rebinding page cannot borrow the session).
Nothing but the method, path, query, body, ``Content-Type`` and ``Accept`` reaches the API.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from corral.api import dashboard
from corral.api.http_events import BodyRefused, declared_body_size

log = logging.getLogger(__name__)

UPSTREAM_TIMEOUT_S = 30.0


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
        self._server = _Server(("127.0.0.1", port), self)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self._thread: threading.Thread | None = None

    @property
    def page_url(self) -> str:
        """The link to print: the token rides in the fragment, which never leaves the browser."""
        return f"{self.url}/#token={self.token}"

    # ---- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="dashboard-proxy",
            daemon=True,
        )
        self._thread.start()

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], proxy: DashboardProxy) -> None:
        super().__init__(address, _Handler)
        self.proxy = proxy


def _is_asset(path: str) -> bool:
    return path == "/" or path.startswith("/dashboard/")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        proxy = self.server.proxy
        if not proxy.host_allowed(self.headers.get("Host")):
            self._reply(json_reply(403, "this proxy answers only requests to its own address"))
            return
        if not self.path.startswith("/"):  # "GET http://elsewhere/..." (proxy-style)
            self._reply(json_reply(400, "only paths of this server, not other URLs"))
            return
        path = urlsplit(self.path).path
        if self.command in ("GET", "HEAD") and _is_asset(path):
            self._asset(path)
            return
        if not proxy.authorised(self.headers.get("Authorization")):
            message = "missing or wrong proxy token: open the link `corral dashboard` printed"
            self._reply(json_reply(401, message))
            return
        # The API's own limit, checked before a byte of the body is read.
        try:
            length = declared_body_size(self.headers.get("Content-Length"))
        except BodyRefused as refused:
            # The body stays unread, so the connection cannot carry another request.
            closing = {"Cache-Control": "no-store", "Connection": "close"}
            self._reply(json_reply(refused.status, refused.message), closing)
            return
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._reply(proxy.forward(self.command, self.path, body, headers))

    def _asset(self, path: str) -> None:
        asset = (
            dashboard.index() if path == "/" else dashboard.get(path.removeprefix("/dashboard/"))
        )
        if asset is None:
            self._reply(json_reply(404, f"no dashboard file {path}"))
            return
        headers = asset.headers()
        if asset.not_modified(self.headers.get("If-None-Match")):
            self._reply(Reply(304, asset.content_type, b""), headers)
            return
        self._reply(Reply(200, asset.content_type, asset.body.encode()), headers)

    def _reply(self, reply: Reply, headers: dict[str, str] | None = None) -> None:
        self.send_response(reply.status)
        for key, value in (headers or {"Cache-Control": "no-store"}).items():
            if key.lower() != "content-type":
                self.send_header(key, value)
        if reply.content_type:
            self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if self.command != "HEAD" and reply.status != 304:
            try:
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                log.debug("the browser went away before the reply to %s", self.path)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)
