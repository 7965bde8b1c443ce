"""API Gateway HTTP API on loopback: each request becomes a payload-format-2.0 event for the
real ``api`` handler, and its reply is written back as API Gateway would.

Routes are not matched here: the template gives the API one catch-all route (``ANY
/{proxy+}``, or ``$default``) and the handler's resolver does the routing, so the event
carries that route key and its ``proxy`` path parameter, exactly as when deployed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from corral.api.http_events import BodyRefused, declared_body_size, http_event, http_reply

log = logging.getLogger(__name__)

Invoke = Callable[[dict[str, Any]], Any]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: a reply goes out in two writes (headers, body); with Nagle on, the body
    # waited for the client's delayed ACK, about 40 ms per request on a kept-alive
    # connection (benchmarks/load_api.py measured 44 ms).
    disable_nagle_algorithm = True

    def _refuse(self, status: int, message: str) -> None:
        """Answer without reading the body, and close: the rest of it is never read."""
        payload = json.dumps({"message": message}).encode()
        self.close_connection = True
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header("connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(payload)

    def _serve(self) -> None:
        # Checked before reading, as API Gateway does: a huge body is never held in memory.
        try:
            length = declared_body_size(self.headers.get("Content-Length"))
        except BodyRefused as refused:
            self._refuse(refused.status, refused.message)
            return
        body = self.rfile.read(length) if length else b""
        event = http_event(
            self.command,
            self.path,
            list(self.headers.items()),
            body,
            self.client_address[0],
            host=self.headers.get("Host", "127.0.0.1"),
            route_key=self.server.route_key,
        )
        try:
            status, headers, cookies, payload = http_reply(self.server.invoke(event))
        except Exception:
            log.exception("api handler failed on %s %s", self.command, self.path)
            status, headers, cookies = 500, {"content-type": "application/json"}, []
            payload = b'{"message":"Internal Server Error"}'
        self.send_response(status)
        for key, value in headers.items():
            if key not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(key, value)
        for cookie in cookies:
            self.send_header("set-cookie", cookie)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                log.debug("client went away before the reply to %s %s", self.command, self.path)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog (socketserver's default is 5): a burst of new connections (a
    # thousand agents at once in benchmarks/load_api.py) queues instead of being refused.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], invoke: Invoke, route_key: str) -> None:
        super().__init__(address, _Handler)
        self.invoke = invoke
        self.route_key = route_key


class HttpShim:
    def __init__(self, invoke: Invoke, port: int = 0, route_key: str = "$default") -> None:
        self._server = _Server(("127.0.0.1", port), invoke, route_key)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="http-shim",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
