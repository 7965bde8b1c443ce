"""Real-shaped API Gateway HTTP API (payload format 2.0) events, as the ``api`` Lambda gets them.

Header names are lower-case and repeated query parameters are joined with commas, as API
Gateway does. ``iam_arn`` fills ``requestContext.authorizer.iam`` the way an AWS_IAM-authorized
route does after checking the SigV4 signature.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlencode

ACCOUNT = "123456789012"
AGENT_ROLE = "corral-agent"


def agent_arn(instance_id: str, role: str = AGENT_ROLE, account: str = ACCOUNT) -> str:
    return f"arn:aws:sts::{account}:assumed-role/{role}/{instance_id}"


def user_arn(name: str = "alice", account: str = ACCOUNT) -> str:
    return f"arn:aws:iam::{account}:user/{name}"


def http_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    query: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    iam_arn: str | None = None,
    bearer: str | None = None,
    raw_body: str | None = None,
) -> dict[str, Any]:
    hdrs = {"content-type": "application/json", "user-agent": "corral-tests"}
    hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
    if bearer is not None:
        hdrs["authorization"] = f"Bearer {bearer}"
    qs = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (query or {}).items()}
    request_context: dict[str, Any] = {
        "accountId": ACCOUNT,
        "apiId": "abc123",
        "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
        "domainPrefix": "abc123",
        "http": {
            "method": method,
            "path": path,
            "protocol": "HTTP/1.1",
            "sourceIp": "203.0.113.7",
            "userAgent": "corral-tests",
        },
        "requestId": str(uuid.uuid4()),
        "routeKey": "$default",
        "stage": "$default",
        "time": "01/Jan/2025:00:00:00 +0000",
        "timeEpoch": 1735689600000,
    }
    if iam_arn is not None:
        request_context["authorizer"] = {
            "iam": {
                "accessKey": "ASIAEXAMPLE",
                "accountId": ACCOUNT,
                "callerId": "AROAEXAMPLE:session",
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": iam_arn,
                "userId": "AROAEXAMPLE:session",
            }
        }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": urlencode(qs),
        "headers": hdrs,
        "requestContext": request_context,
        "isBase64Encoded": False,
    }
    if qs:
        event["queryStringParameters"] = qs
    if raw_body is not None:
        event["body"] = raw_body
    elif body is not None:
        event["body"] = json.dumps(body)
    return event
