"""The CLI's HTTP client for the Corral API.

Where: ``--endpoint``, else ``CORRAL_ENDPOINT``, else the local stack's ``endpoint`` file
(``.corral/dev/endpoint``, or under ``CORRAL_DEV_DIR``).
Who: a deployed API (an ``execute-api`` host) gets requests SigV4-signed with the caller's
AWS credentials (the HTTP API uses IAM authorization); anything else gets
``Authorization: Bearer`` with ``CORRAL_TOKEN`` or the local stack's ``token`` file.

Stdlib HTTP on purpose: the CLI's own dependencies stay small, and botocore is imported only
to sign for a deployed API. Every failure is a ``CliError``: one line, a non-zero exit.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# CliError and the exit codes live in errors.py (the signer raises it too); importers of the
# client keep finding them here.
from corral.cli.errors import EXIT_ERROR, EXIT_USAGE, CliError
from corral.local.state import StateDir

ENDPOINT_ENV = "CORRAL_ENDPOINT"
TOKEN_ENV = "CORRAL_TOKEN"
_EXECUTE_API = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str | None
    sigv4_region: str | None = None


def resolve_endpoint(option: str | None = None, state: StateDir | None = None) -> Endpoint:
    state = state or StateDir.default()
    url = option or os.environ.get(ENDPOINT_ENV) or state.endpoint()
    if not url:
        raise CliError(
            "no Corral endpoint: pass --endpoint, set CORRAL_ENDPOINT, or start the local "
            "stack with `corral dev up`"
        )
    url = check_url(url)
    host = urllib.parse.urlsplit(url).hostname or ""
    match = _EXECUTE_API.match(host)
    if match:
        return Endpoint(url, None, sigv4_region=match.group(1))
    token = os.environ.get(TOKEN_ENV)
    if token is None and (option is None or option.rstrip("/") == state.endpoint()):
        token = state.token()  # only hand the local stack's token to the local stack
    return Endpoint(url, token)


def check_url(url: str) -> str:
    """``url`` without a trailing slash, if it can be an API endpoint (``http(s)://HOST[:PORT]``
    and a path); otherwise a one-line ``CliError`` saying what is wrong with it."""
    text = url.strip()
    usage = "want http://HOST[:PORT] or https://HOST"

    def bad(problem: str) -> CliError:
        return CliError(f"bad endpoint {url!r}: {problem} ({usage})", EXIT_USAGE)

    if not text or any(c.isspace() for c in text):
        raise bad("not a URL")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # parses it: raises on a port that is not a number in range
    except ValueError as exc:
        problem = "bad port" if "port" in str(exc).lower() else "not a URL"
        raise bad(f"{problem}: {exc}") from None
    if not parts.scheme:
        raise bad("not a URL")
    if parts.scheme.lower() not in ("http", "https"):
        raise bad(f"the scheme must be http or https, not {parts.scheme!r}")
    if not parts.hostname:
        raise bad("no host")
    if port == 0:
        raise bad("bad port 0")
    return text.rstrip("/")


def _error_message(status: int, body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        message = str(data.get("message") or data.get("Message") or f"HTTP {status}")
        problems = [
            f"{e.get('field') or '(document)'}: {e.get('reason')}"
            for e in data.get("errors") or []
            if isinstance(e, dict)
        ]
        # A message that is its one problem ("field: reason") is said once, not twice.
        return "; ".join(dict.fromkeys([message, *problems]))
    text = body.decode("utf-8", errors="replace").strip().splitlines()
    return text[0][:200] if text else f"HTTP {status}"


class ApiClient:
    def __init__(self, endpoint: Endpoint, timeout_s: float = 30.0) -> None:
        self.endpoint = endpoint
        self._timeout = timeout_s

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body if body is not None else {})

    def post_with_status(self, path: str, body: Any = None) -> tuple[int, Any]:
        """``post``, with the HTTP status of the (successful) reply: a create with a client
        token answers 201 when it created, 200 when it found what an earlier try created."""
        return self.exchange("POST", path, body=body if body is not None else {})

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        return self.exchange(method, path, params=params, body=body)[1]

    def exchange(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> tuple[int, Any]:
        """(HTTP status, decoded body) of a 2xx reply; anything else is a ``CliError``."""
        query = {k: _q(v) for k, v in (params or {}).items() if v is not None}
        url = self.endpoint.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"accept": "application/json", "user-agent": "corral-cli"}
        if data is not None:
            headers["content-type"] = "application/json"
        if self.endpoint.sigv4_region:
            from corral.cli.signing import SigV4Signer  # lazily: botocore only when signing

            signer = SigV4Signer.from_environment(self.endpoint.sigv4_region)
            headers.update(signer.sign(method, url, data, headers))
        elif self.endpoint.token:
            headers["authorization"] = f"Bearer {self.endpoint.token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as reply:
                status = int(reply.status)
                raw = reply.read()
        except urllib.error.HTTPError as exc:
            message = _error_message(exc.code, exc.read())
            if exc.code == 401:
                # Only for missing or unknown credentials: a 403 says what the caller, known
                # to the API, may not do (another user's experiment), and why.
                message += " (check CORRAL_TOKEN / your AWS credentials)"
            raise CliError(message, EXIT_USAGE if 400 <= exc.code < 500 else EXIT_ERROR) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CliError(f"cannot reach {self.endpoint.url}: {_reason(exc)}") from None
        except http.client.HTTPException as exc:  # it answered, but not in HTTP
            raise CliError(
                f"cannot reach {self.endpoint.url}: bad reply ({type(exc).__name__})"
            ) from None
        except ValueError as exc:  # a URL urllib refuses (an Endpoint made by hand)
            raise CliError(f"bad endpoint {self.endpoint.url!r}: {exc}", EXIT_USAGE) from None
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            raise CliError(
                f"{method} {path}: the API answered something that is not JSON"
            ) from None


def api_path(*segments: str) -> str:
    """``/experiments/<id>/trials`` from ``("experiments", id, "trials")``, each segment
    percent-encoded whole (``safe=""``): an id with ``/``, ``?``, ``#`` or a space stays one
    segment that the API refuses with its own 404, instead of naming another route, a query,
    a fragment, or a URL urllib cannot send. An empty, ``.`` or ``..`` id is refused here:
    an empty segment names the collection, and URL normalization (ours or a proxy's) would
    resolve the dot segments to another route before the API saw them."""
    for segment in segments:
        if segment in ("", ".", ".."):
            raise CliError(f"bad ID {segment!r}", EXIT_USAGE)
    return "".join("/" + urllib.parse.quote(segment, safe="") for segment in segments)


def _reason(exc: BaseException) -> str:
    """``Connection refused`` rather than ``<urlopen error [Errno 111] Connection refused>``."""
    reason: Any = getattr(exc, "reason", exc)
    if isinstance(reason, OSError) and reason.strerror:
        return str(reason.strerror)
    if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
        return "timed out"
    return str(reason) or type(reason).__name__


def _q(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def client_from(endpoint_option: str | None) -> ApiClient:
    return ApiClient(resolve_endpoint(endpoint_option))


# CliError and the exit codes are errors.py's, exported here too for the client's callers.
__all__ = [
    "ENDPOINT_ENV",
    "EXIT_ERROR",
    "EXIT_USAGE",
    "TOKEN_ENV",
    "ApiClient",
    "CliError",
    "Endpoint",
    "api_path",
    "check_url",
    "client_from",
    "resolve_endpoint",
]
