"""The HTTP/1.1 server on loopback behind the local stack's API (``corral.local.http_shim``)
and ``corral dashboard``'s signing proxy (``corral.cli.dashboard_proxy``): waitress, with
every error it answers itself turned into the API's JSON (``{"message": ...}``).

Why waitress (the evaluation, briefly; docs/security.md has the table): both servers were
``http.server`` with hand-written request handling, which ignored ``Transfer-Encoding:
chunked`` (the chunks were then read as a second request), took conflicting
``Content-Length`` headers, and answered ``TRACE`` or a garbage request line with an HTML
501. The candidates, against what these servers need:

- **waitress** (pure Python, no dependencies, ~0.4 MB, imports in ~30 ms like
  ``http.server``): strict HTTP/1.1 parsing: chunked bodies decoded (and bounded), a
  ``Content-Length`` that is not one byte count (conflicting or repeated, signed, hex) is a
  400, a bad request line is a 400, any method token reaches the application; the size limit
  is checked from the declared length before the body is read; keep-alive, pipelining and
  ``Expect: 100-continue``; a fixed pool of worker threads behind one poll loop (a thousand
  idle keep-alive connections cost no threads); TCP_NODELAY by default. The errors it
  generates itself go through one class (``ErrorTask``), replaced here by a JSON one.
- **h11** (installed, sans-IO): a correct parser, but the socket loop, keep-alive, threads,
  timeouts and limits would be ours to write again: what this change removes.
- **uvicorn** (installed with functions-framework, the ``gcp`` extra): ASGI on asyncio; its
  own errors are plain text and hard to replace, no body size limit, and ~130 ms of imports
  (asyncio, click) for a command a user runs on a laptop; our handlers are synchronous.
- **gunicorn** (installed): pre-fork worker processes driven by signals from the main thread:
  not embeddable as a thread of the stack's process (the handlers share its moto session and
  fault hooks); Unix only; HTML error pages.
- **werkzeug**'s development server: ``http.server`` underneath, the same defects.

The ``corral`` CLI depends on waitress in its base install (no extra): ``corral dashboard``
runs on a user's machine with nothing but ``pip install corral``, and waitress brings no
dependencies. The Lambda bundle (``functions/requirements.txt``) does not include it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask
from waitress.utilities import RequestEntityTooLarge

from corral.api.http_events import MAX_BODY_BYTES, BodyRefused, declared_body_size

log = logging.getLogger(__name__)
# "Task queue depth is N" on every request that waits for a worker: the stack's handler serves
# one request at a time (one container, as Lambda), so requests waiting is the normal case.
logging.getLogger("waitress.queue").setLevel(logging.ERROR)

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

# The listen backlog: a burst of new connections (a thousand agents at once in
# benchmarks/load_api.py) queues instead of being refused.
BACKLOG = 1024
# Open connections served at once (waitress's default is 100; past it the rest wait in the
# backlog): each is a socket in one poll loop, not a thread.
CONNECTION_LIMIT = 4096


def json_body(status: int, message: str) -> tuple[str, list[tuple[str, str]], bytes]:
    """A status line, headers and the API's JSON error body."""
    payload = json.dumps({"message": message}).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    return f"{status} {_phrase(status)}", headers, payload


def error_message(request: Any) -> tuple[int, str]:
    """(status, message) for a request waitress refused before the application saw it, in
    the words the API uses for the same refusal (``declared_body_size``)."""
    error = request.error
    declared = request.headers.get("CONTENT_LENGTH")
    if declared is not None and not request.chunked and error.code in (400, 413):
        try:
            declared_body_size(declared)
        except BodyRefused as refused:
            return refused.status, refused.message
    if isinstance(error, RequestEntityTooLarge):  # a chunked body that grew past the limit
        return 413, f"the request body is over the limit of {MAX_BODY_BYTES:,} bytes"
    return int(error.code), f"{error.reason}: {error.body}"


@dataclass(frozen=True)
class Request:
    """One request as the application sees it, its body read whole (and decoded from chunks)."""

    method: str
    target: str  # as sent: the path and query, still percent-encoded
    headers: list[tuple[str, str]]  # lower-case names; repeated ones joined by ", "
    body: bytes
    client: str

    @classmethod
    def from_environ(cls, environ: dict[str, Any]) -> Request:
        headers = [
            (key.removeprefix("HTTP_").replace("_", "-").lower(), value)
            for key, value in environ.items()
            if key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH")
        ]
        length = int(environ.get("CONTENT_LENGTH") or 0)  # waitress checked it (or set it)
        body = environ["wsgi.input"].read(length) if length else b""
        return cls(
            environ["REQUEST_METHOD"],
            environ.get("REQUEST_URI") or "/",
            headers,
            body,
            environ.get("REMOTE_ADDR") or "127.0.0.1",
        )

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)


def respond(
    start_response: StartResponse,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
) -> list[bytes]:
    """A WSGI reply with its length (a reply to HEAD keeps the length and loses the body:
    ``_no_body_for_head``; waitress sends none with a 204 or 304)."""
    sent = [(k, v) for k, v in headers if k.lower() not in _FRAMING]
    start_response(f"{status} {_phrase(status)}", [*sent, ("Content-Length", str(len(body)))])
    return [body]


# Set by the server from the body it sends, never by the application's reply.
_FRAMING = ("content-length", "connection", "transfer-encoding", "keep-alive")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status Python has no name for (a handler may answer 599)
        return "Unknown"


def _no_body_for_head(app: WsgiApp) -> WsgiApp:
    """A reply to HEAD carries the length of the body GET would get, and no body (waitress
    would send it, and a kept-alive connection would read it as the next reply)."""

    def wrapped(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        body = app(environ, start_response)
        return [] if environ["REQUEST_METHOD"] == "HEAD" else body

    return wrapped


class _JsonErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's own refusals (400, 413, 431, 501 for an unknown transfer coding, 500) as
    JSON; the connection closes after it (the rest of the request was never read)."""

    def execute(self) -> None:
        status, message = error_message(self.request)
        self.status, headers, payload = json_body(status, message)
        self.response_headers.extend([*headers, ("Cache-Control", "no-store")])
        self.set_close_on_finish()
        self.content_length = len(payload)
        if getattr(self.request, "command", None) != "HEAD":  # unset: no request line read
            self.write(payload)


class _Parser(HTTPRequestParser):  # type: ignore[misc]
    """waitress's parser, stricter where RFC 9112 lets a server refuse ambiguous framing."""

    def parse_header(self, header_plus: bytes) -> None:
        try:
            super().parse_header(header_plus)
        except ValueError as exc:  # int() of a Content-Length over 4,300 digits
            raise ParsingError("Content-Length is invalid") from exc
        # 6.1: HTTP/1.0 has no transfer codings (waitress decodes chunks on 1.1 only and
        # would read them as the next request): faulty framing, refused and closed.
        if self.version != "1.1" and "TRANSFER_ENCODING" in self.headers:
            raise ParsingError("Transfer-Encoding is not allowed in an HTTP/1.0 request")
        # 6.3: both lengths at once is how requests are smuggled past a proxy; a server may
        # refuse it rather than follow Transfer-Encoding alone.
        if self.chunked and "CONTENT_LENGTH" in self.headers:
            raise ParsingError("both Content-Length and Transfer-Encoding")


class _Channel(HTTPChannel):  # type: ignore[misc]
    error_task_class = _JsonErrorTask
    parser_class = _Parser


class _Server(TcpWSGIServer):  # type: ignore[misc]
    channel_class = _Channel


class LoopbackServer:
    """``app`` served on 127.0.0.1:``port`` (0: any free port) by a poll loop in one thread
    and ``threads`` workers. Bodies over ``MAX_BODY_BYTES`` are refused from their declared
    size (413) before they are read; chunked ones as they cross it."""

    def __init__(self, app: WsgiApp, port: int = 0, *, name: str, threads: int = 8) -> None:
        adjustments = Adjustments(
            host="127.0.0.1",
            port=port,
            threads=threads,
            backlog=BACKLOG,
            connection_limit=CONNECTION_LIMIT,
            # waitress refuses a body of max_request_body_size bytes or more.
            max_request_body_size=MAX_BODY_BYTES + 1,
            asyncore_use_poll=True,  # select() fails past 1,024 descriptors
            ident="corral",
            # TCP_NODELAY is in waitress's default socket_options: a reply is not held back
            # ~40 ms for the client's delayed ACK on a kept-alive connection.
        )
        self._server = _Server(_no_body_for_head(app), adj=adjustments)
        self.port = int(self._server.effective_port)
        self.url = f"http://127.0.0.1:{self.port}"
        self._name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name=self._name, daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        """Serve until ``stop``; then every connection and worker is closed."""
        try:
            while not self._stopping.is_set():
                wasyncore.loop(timeout=0.2, use_poll=True, map=self._server._map, count=1)
        finally:
            wasyncore.close_all(self._server._map)
            self._server.task_dispatcher.shutdown(timeout=5)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            # Wakes the poll loop now; it may have seen the flag and closed the trigger.
            with contextlib.suppress(OSError):
                self._server.pull_trigger()
            self._thread.join(timeout=10)
        else:  # never started: close the listening socket
            wasyncore.close_all(self._server._map)
            self._server.task_dispatcher.shutdown(timeout=5)
