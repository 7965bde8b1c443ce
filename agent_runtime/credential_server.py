"""The agent's trial-credentials endpoint: per-trial tokens, listeners, request routing.

What is served and in which shape belongs to a *source*: ECS container credentials for AWS
(trial_credentials.py), a metadata-server look-alike for GCE (trial_credentials_gce.py).
This module only knows which trial a request is from, by its token:
- ``Authorization: <token>`` on ``/v1/credentials`` (how AWS SDKs present
  ``AWS_CONTAINER_AUTHORIZATION_TOKEN``);
- a ``/trial/<token>/`` path prefix (the GCE metadata protocol has no authorization
  header, so the token rides in ``GCE_METADATA_HOST``, which clients use as a URL prefix).

Tokens are random per trial (``secrets.token_urlsafe(32)``), die when the trial's run is
cleaned up or the trial is granted again, and are looked up by their SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

log = logging.getLogger(__name__)

Network = Literal["loopback", "bridge"]
# status, extra headers, JSON-able body or raw text
Reply = tuple[int, dict[str, str], Any]
AWS_PATH = "/v1/credentials"
TRIAL_PREFIX = "/trial/"


@dataclass(frozen=True)
class TrialScope:
    trial_id: str
    experiment_id: str
    checkpoint_uri: str


class CredentialSource(Protocol):
    @property
    def ready(self) -> bool:
        """Whether trials can be granted credentials yet (the role or account is known)."""

    def adopt(self, identity: str) -> None:
        """The role/account the control plane names at registration (configured wins)."""

    def forget(self, trial_id: str) -> None: ...

    def environment(
        self, token: str, port: int, bridge_address: str | None
    ) -> tuple[dict[str, str], dict[str, str] | None]:
        """The trial's variables on the host network (loopback) and on a bridge (None: no
        bridge listener, so bridge trials get nothing)."""

    def serve(self, scope: TrialScope, path: str, headers: Mapping[str, str]) -> Reply:
        """Answer an authenticated request of the trial ``scope`` for ``path``."""


@dataclass(frozen=True)
class Grant:
    """What one trial is handed: its token and its variables, per network."""

    trial_id: str
    token: str
    loopback: dict[str, str]
    bridge: dict[str, str] | None

    def env(self, network: Network) -> dict[str, str]:
        # No bridge listener: a bridge trial gets no credentials rather than wrong ones.
        return dict(self.bridge or {}) if network == "bridge" else dict(self.loopback)


class CredentialServer:
    """Listeners on 127.0.0.1 and, once a bridge network exists, on its gateway address.
    Same port on both."""

    def __init__(self, source: CredentialSource, port: int = 0) -> None:
        self.source = source
        self._grants: dict[str, TrialScope] = {}  # sha256(token) -> trial
        self._lock = threading.Lock()
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self.port = port
        self.bridge_address: str | None = None

    # --- listeners ---------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._listen("127.0.0.1")
        except OSError as exc:
            if self.port == 0:
                raise
            # Another agent on this machine (the local stack runs several) has the port:
            # any port will do, the trials are told which.
            log.warning("port %d is taken (%s): trial credentials on another", self.port, exc)
            self.port = 0
            self._listen("127.0.0.1")

    def listen_on_bridge(self, gateway: str) -> None:
        """Also serve on the bridge's gateway address (where bridge trials reach the host)."""
        self._listen(gateway)
        self.bridge_address = gateway

    def _listen(self, address: str) -> None:
        if address in self._servers:
            return
        server = ThreadingHTTPServer((address, self.port), _handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]  # port 0: the first listener picks, all share
        self._servers[address] = server
        threading.Thread(
            target=server.serve_forever, name=f"trial-credentials-{address}", daemon=True
        ).start()
        log.info("serving trial credentials on %s:%d", address, self.port)

    def close(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        self._servers.clear()

    # --- grants ------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.source.ready

    def adopt(self, identity: str) -> None:
        self.source.adopt(identity)

    def grant(self, scope: TrialScope) -> Grant:
        token = secrets.token_urlsafe(32)
        with self._lock:
            for key, held in list(self._grants.items()):
                if held.trial_id == scope.trial_id:  # a re-run of the trial: old token dies
                    del self._grants[key]
            self._grants[_digest(token)] = scope
        loopback, bridge = self.source.environment(token, self.port, self.bridge_address)
        return Grant(scope.trial_id, token, loopback, bridge)

    def revoke(self, trial_id: str) -> None:
        with self._lock:
            for key, held in list(self._grants.items()):
                if held.trial_id == trial_id:
                    del self._grants[key]
        self.source.forget(trial_id)

    def handle(self, path: str, headers: Mapping[str, str]) -> Reply:
        """Route a request (header names lower-case) to its trial's source, or refuse it."""
        if path.startswith(TRIAL_PREFIX):
            _, _, token, rest = (path + "/").split("/", 3)
            rest = "/" + rest.rstrip("/") if rest.strip("/") else "/"
        elif urlparse(path).path.rstrip("/") == AWS_PATH:
            token, rest = (headers.get("authorization") or "").strip(), AWS_PATH
        else:
            return 404, {}, {"message": "not found"}
        if not token:
            return 401, {}, {"message": "missing token"}
        with self._lock:
            scope = self._grants.get(_digest(token))
        if scope is None:
            return 403, {}, {"message": "unknown or revoked token"}
        try:
            return self.source.serve(scope, rest, headers)
        except Exception as exc:  # STS / IAM refused or unreachable: SDKs retry
            log.warning("cannot get credentials for trial %s: %s", scope.trial_id, exc)
            return 502, {}, {"message": f"cannot get the trial's credentials: {exc}"}

    def answer(self, authorization: str | None) -> tuple[int, Any]:
        """An AWS-style request bearing ``authorization``: its status and body."""
        status, _, body = self.handle(AWS_PATH, {"authorization": authorization or ""})
        return status, body


def _digest(token: str) -> str:
    # Looked up by hash: a dict probe on the raw secret could leak its prefix through
    # timing; the hash's prefix says nothing about the token.
    return hashlib.sha256(token.encode()).hexdigest()


def _handler(server: CredentialServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # Header names lower-cased: sources look them up that way.
            received = {k.lower(): v for k, v in self.headers.items()}
            status, headers, body = server.handle(self.path, received)
            if isinstance(body, str):
                data, kind = body.encode(), "application/text"
            else:
                data, kind = json.dumps(body).encode(), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("credentials endpoint: " + format, *args)

    return Handler
