"""What the tests' fake HTTP servers (stdlib ``http.server`` on loopback) share."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log every request to stderr (the test output)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def send(
    handler: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str | None = None
) -> None:
    """Answer ``handler``'s request: ``status`` and ``data``, with its length (and type)."""
    handler.send_response(status)
    if content_type is not None:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def send_json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    """Answer ``handler``'s request with ``body`` as JSON."""
    send(handler, status, json.dumps(body).encode(), "application/json")
