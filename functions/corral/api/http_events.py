"""HTTP requests as API Gateway HTTP API (payload format 2.0) events, handler results back as
HTTP responses, and the limits a request body must keep before it is parsed.

One conversion for every place that serves the ``api`` handler outside API Gateway: the local
stack's loopback server and the GCP Cloud Function (Flask requests), so the same resolver and
the same routes answer everywhere.

Body limits: API Gateway and Lambda refuse a body over 6 MB before the function runs; the
local stack and Cloud Functions would not (32 MB), and nothing bounds how deeply a JSON body
nests (Python's decoder recurses, and the models after it). ``parse_json_body`` is the
resolver's JSON decoder (``json_body_deserializer=`` in ``corral.api.app``): it refuses a body
over ``MAX_BODY_BYTES`` without reading it and one nested deeper than ``MAX_JSON_DEPTH``
without parsing it, so every deployment refuses the same bodies, with the limit named (413
and 400: ``corral.api.errors``). The servers in front of the handler check the declared size
before they read the body at all, and answer in ``declared_body_size``'s words: the local
stack's (``corral.local.http_shim``) and ``corral dashboard``'s proxy
(``corral.cli.dashboard_proxy``), both waitress (``corral.local.http_server``).
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")

# Lambda's limit for a synchronous invocation: what a deployed stack accepts anyway. An agent's
# log batch (500 lines of at most 16 KiB) stays under it unless most lines are at the limit.
MAX_BODY_BYTES = 6 * 1024 * 1024
# Far deeper than any config (hyperparameter values may be nested mappings) or agent report.
MAX_JSON_DEPTH = 64
_MAX_SIZE_DIGITS = 20  # a declared body size longer than this is no size at all
# A JSON string (skipped whole: brackets inside it do not nest) or one bracket.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


class BodyRefused(Exception):
    """A request body refused before parsing; ``status`` is 413 (too large) or 400."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def check_body_size(size: int) -> None:
    if size > MAX_BODY_BYTES:
        raise BodyRefused(
            413, f"the request body is {size:,} bytes, over the limit of {MAX_BODY_BYTES:,} bytes"
        )


def declared_body_size(header: str | None) -> int:
    """The body size a ``Content-Length`` header declares (none: 0), checked before a byte of
    the body is read: 400 naming the header for anything but a byte count (negative, not a
    number), 413 for a body over ``MAX_BODY_BYTES`` (``BodyRefused``)."""
    declared = (header or "0").strip()
    # isdigit alone takes "²" (no number to int()) and other scripts' digits: ASCII only.
    if not (declared.isascii() and declared.isdigit()):
        raise BodyRefused(400, f"bad Content-Length {declared[:40]!r}: want a byte count")
    # More digits than any real size: refused unconverted (int() refuses over 4,300 digits).
    if len(declared.lstrip("0")) > _MAX_SIZE_DIGITS:
        raise BodyRefused(413, f"the request body is over the limit of {MAX_BODY_BYTES:,} bytes")
    size = int(declared)
    check_body_size(size)
    return size


def check_json_depth(text: str) -> None:
    """Refuse JSON nested deeper than ``MAX_JSON_DEPTH`` with one linear scan, no parsing."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return  # cannot nest deeper than it has brackets (the common case: no scan at all)
    depth = 0
    for token in _JSON_TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise BodyRefused(
                    400, f"the request body nests deeper than the limit of {MAX_JSON_DEPTH} levels"
                )
        elif char in "]}":
            depth -= 1


def parse_json_body(text: str) -> Any:
    """The resolver's JSON decoder: size and depth checked first (``BodyRefused``)."""
    # A character is 1 to 4 bytes of UTF-8: only a body near the limit needs encoding to count.
    if len(text) * 4 > MAX_BODY_BYTES:
        check_body_size(len(text) if len(text) > MAX_BODY_BYTES else _utf8_size(text))
    check_json_depth(text)
    return json.loads(text)


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


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
    if body and is_text:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:  # declared text, is not: passed on as bytes (refused: 400)
            is_text = False
            event["isBase64Encoded"] = True
    if body and not is_text:
        event["body"] = base64.b64encode(body).decode()
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
