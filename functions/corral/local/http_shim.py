"""API Gateway HTTP API on loopback: each request becomes a payload-format-2.0 event for the
real ``api`` handler, and its reply is written back as API Gateway would.

Routes are not matched here: the template gives the API one catch-all route (``ANY
/{proxy+}``, or ``$default``) and the handler's resolver does the routing, so the event
carries that route key and its ``proxy`` path parameter, exactly as when deployed.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger(__name__)

Invoke = Callable[[dict[str, Any]], Any]
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")


def http_event(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    source_ip: str,
    *,
    account: str = "123456789012",
    api_id: str = "local",
    host: str = "127.0.0.1",
    route_key: str = "$default",
) -> dict[str, Any]:
    url = urlsplit(target)
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    query: dict[str, str] = {}
    for key, value in parse_qsl(url.query, keep_blank_values=True):
        query[key] = f"{query[key]},{value}" if key in query else value
    content_type = merged.get("content-type", "")
    is_text = not body or content_type.startswith(_TEXT_TYPES) or "charset" in content_type
    now = datetime.now(UTC)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": url.path or "/",
        "rawQueryString": url.query,
        "headers": merged,
        "requestContext": {
            "accountId": account,
            "apiId": api_id,
            "domainName": host,
            "domainPrefix": host.split(".", maxsplit=1)[0],
            "http": {
                "method": method,
                "path": url.path or "/",
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": route_key,
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(time.time() * 1000),
        },
        "isBase64Encoded": not is_text,
    }
    if route_key.endswith("/{proxy+}"):
        event["pathParameters"] = {"proxy": (url.path or "/").lstrip("/")}
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if body:
        event["body"] = body.decode("utf-8") if is_text else base64.b64encode(body).decode()
    return event


def http_reply(result: Any) -> tuple[int, dict[str, str], list[str], bytes]:
    """(status, headers, cookies, body) from a handler's result, including the 2.0 format's
    shorthand where a bare JSON value means 200 with that body."""
    if not isinstance(result, dict) or "statusCode" not in result:
        return 200, {"content-type": "application/json"}, [], json.dumps(result).encode()
    headers = {k.lower(): str(v) for k, v in (result.get("headers") or {}).items()}
    for key, values in (result.get("multiValueHeaders") or {}).items():
        headers[key.lower()] = ",".join(str(v) for v in values)
    raw = result.get("body") or ""
    if result.get("isBase64Encoded"):
        body = base64.b64decode(raw)
    else:
        body = raw.encode() if isinstance(raw, str) else json.dumps(raw).encode()
    return int(result["statusCode"]), headers, list(result.get("cookies") or []), body


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
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
