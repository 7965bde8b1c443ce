"""API Gateway's IAM authorizer for the local API: checks a SigV4-signed request and names the
caller in ``requestContext.authorizer.iam`` as API Gateway does, so the same code as in the
cloud (``corral.api.auth.IamAuthenticator``) decides who it is.

Only requests signed with ``AWS4-HMAC-SHA256`` are checked; others (the local stack's users
and their bearer tokens) pass as they came. A signed request whose key is unknown or expired,
whose security token is not the key's, whose date is more than 15 minutes off, or whose
signature does not match is refused with API Gateway's 403, before any handler runs. The
keys are the ones the stack's metadata services hand out (``corral.local.credentials``).

The signature is recomputed here from the event with the standard library, not by botocore's
signer (the agent's side), so a mistake in either shows up as a refusal.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote

from corral.local.credentials import CredentialStore, SessionCredentials

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_S = 15 * 60
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*"
    r"SignedHeaders=(?P<signed>[^,\s]+),\s*Signature=(?P<signature>[0-9a-f]{64})\s*$"
)

Invoke = Callable[[dict[str, Any]], Any]


class Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class IamAuthorizer:
    def __init__(
        self,
        credentials: CredentialStore,
        service: str = "execute-api",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = credentials
        self._service = service
        self._clock = clock

    def wrap(self, invoke: Invoke) -> Invoke:
        """The handler behind the authorizer: the one hook where the API's events are made."""

        def authorized(event: dict[str, Any]) -> Any:
            try:
                checked = self.authorize(event)
            except Refused as refused:
                return {
                    "statusCode": 403,
                    "headers": {"content-type": "application/json"},
                    "body": json.dumps({"message": refused.message}),
                }
            return invoke(checked)

        return authorized

    def authorize(self, event: dict[str, Any]) -> dict[str, Any]:
        """The event with the caller added if it is SigV4-signed; raises Refused when the
        signature does not hold."""
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        header = headers.get("authorization", "")
        if not header.startswith(ALGORITHM):
            return event
        creds = self.verify(event, headers, header)
        # IAM's "role id:session name" (a role id is AROA + 17 characters; this one is made
        # up, stable per role).
        role_id = "AROA" + hashlib.sha256(creds.role.encode()).hexdigest()[:17].upper()
        caller = f"{role_id}:{creds.session_arn.rsplit('/', 1)[1]}"
        context = dict(event.get("requestContext") or {})
        context["authorizer"] = {
            "iam": {
                "accessKey": creds.access_key_id,
                "accountId": self._credentials.account,
                "callerId": caller,
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": creds.session_arn,
                "userId": caller,
            }
        }
        return {**event, "requestContext": context}

    def verify(
        self, event: Mapping[str, Any], headers: Mapping[str, str], header: str
    ) -> SessionCredentials:
        match = _AUTH.match(header)
        if match is None:
            raise Refused("Authorization header requires Credential, SignedHeaders and Signature")
        key_id, date, region, service, terminal = (match["credential"].split("/") + [""] * 5)[:5]
        if service != self._service or terminal != "aws4_request":
            raise Refused(f"Credential should be scoped to the {self._service} service")
        creds = self._credentials.find(key_id)
        if creds is None:
            raise Refused("The security token included in the request is invalid.")
        if headers.get("x-amz-security-token") != creds.token:
            raise Refused("The security token included in the request is invalid.")
        signed = match["signed"].split(";")
        if "host" not in signed or "x-amz-date" not in signed:
            raise Refused("SignedHeaders must include host and x-amz-date")
        amz_date = headers.get("x-amz-date", "")
        try:
            when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise Refused("X-Amz-Date is missing or not in the ISO 8601 basic format") from None
        if abs(when.timestamp() - self._clock()) > MAX_SKEW_S or not amz_date.startswith(date):
            raise Refused("Signature expired: the request's date is more than 15 minutes off")
        scope = f"{date}/{region}/{service}/aws4_request"
        canonical = canonical_request(event, headers, signed)
        to_sign = "\n".join(
            [ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = signing_key(creds.secret_access_key, date, region, service)
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, match["signature"]):
            raise Refused(
                "The request signature we calculated does not match the signature you provided."
            )
        return creds


def body_bytes(event: Mapping[str, Any]) -> bytes:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        return base64.b64decode(body)
    return str(body).encode()


def canonical_request(
    event: Mapping[str, Any], headers: Mapping[str, str], signed: list[str]
) -> str:
    method = str(((event.get("requestContext") or {}).get("http") or {}).get("method", "GET"))
    # Every path segment encoded once more, as SigV4 wants for services other than S3.
    path = quote(str(event.get("rawPath") or "/"), safe="/~")
    pairs = parse_qsl(str(event.get("rawQueryString") or ""), keep_blank_values=True)
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs))
    lines = "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed)
    payload = hashlib.sha256(body_bytes(event)).hexdigest()
    return "\n".join([method, path, query, lines, ";".join(signed), payload])


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key
