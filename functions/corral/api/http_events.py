"""HTTP requests as API Gateway HTTP API (payload format 2.0) events, and handler results
back as HTTP responses.

One conversion for every place that serves the ``api`` handler outside API Gateway: the local
stack's loopback server and the GCP Cloud Function (Flask requests), so the same resolver and
the same routes answer everywhere.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

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
