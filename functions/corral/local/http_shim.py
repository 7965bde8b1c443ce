"""API Gateway HTTP API on loopback: each request becomes a payload-format-2.0 event for the
real ``api`` handler, and its reply is written back as API Gateway would.

Routes are not matched here: the template gives the API one catch-all route (``ANY
/{proxy+}``, or ``$default``) and the handler's resolver does the routing, so the event
carries that route key and its ``proxy`` path parameter, exactly as when deployed. Every
method reaches the handler (``TRACE`` too: the resolver answers it, in JSON).

HTTP itself (framing, chunked bodies, limits, keep-alive) is waitress's, in
``corral.local.http_server`` (why that library: its docstring); a request waitress refuses
never reaches the handler, and is answered in the API's JSON too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from corral.api.http_events import http_event, http_reply
from corral.local.http_server import LoopbackServer, Request, StartResponse, respond

log = logging.getLogger(__name__)

Invoke = Callable[[dict[str, Any]], Any]


def request_event(request: Request, route_key: str) -> dict[str, Any]:
    """The one place a request becomes the handler's event (a check on the request, such as
    a signature, belongs here)."""
    return http_event(
        request.method,
        request.target,
        request.headers,
        request.body,
        request.client,
        host=request.header("host") or "127.0.0.1",
        route_key=route_key,
    )


class _Api:
    """The WSGI application: one request, one invocation of the handler."""

    def __init__(self, invoke: Invoke, route_key: str) -> None:
        self.invoke = invoke
        self.route_key = route_key

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = Request.from_environ(environ)
        try:
            status, headers, cookies, payload = http_reply(
                self.invoke(request_event(request, self.route_key))
            )
        except Exception:
            log.exception("api handler failed on %s %s", request.method, request.target)
            status, headers, cookies = 500, {"content-type": "application/json"}, []
            payload = b'{"message":"Internal Server Error"}'
        sent = [*headers.items(), *(("set-cookie", cookie) for cookie in cookies)]
        return respond(start_response, status, sent, payload)


class HttpShim:
    def __init__(self, invoke: Invoke, port: int = 0, route_key: str = "$default") -> None:
        # Eight workers: the stack's handler serves one request at a time (one container, as
        # Lambda), the others wait their turn instead of a new connection's.
        self._server = LoopbackServer(_Api(invoke, route_key), port, name="http-shim")
        self.port = self._server.port
        self.url = self._server.url

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()
