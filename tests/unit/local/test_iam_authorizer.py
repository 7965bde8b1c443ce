"""The local API's IAM authorizer: a request the agent's own ``SigV4Auth`` signed (botocore)
becomes an event naming the instance's role session, which ``IamAuthenticator`` turns into
the agent; anything tampered with, stale, or signed with unknown keys is refused as API
Gateway refuses it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_runtime.client import SigV4Auth
from corral.api.auth import IamAuthenticator, TokenOrIamAuthenticator, authenticator_from_env
from corral.api.http_events import http_event
from corral.local.credentials import CredentialStore
from corral.local.iam_authorizer import IamAuthorizer, Refused

ACCOUNT = "123456789012"
INSTANCE = "i-0123456789abcdef0"
URL = "http://127.0.0.1:8080/agents/register"
BODY = json.dumps({"pool": "gpu"}).encode()


class _Session:
    """A boto3 session whose credentials are the instance's (as botocore finds them)."""

    def __init__(self, access: str, secret: str, token: str) -> None:
        import botocore.credentials

        self._credentials = botocore.credentials.Credentials(access, secret, token)

    def get_credentials(self) -> Any:
        return self._credentials


def signed_event(store: CredentialStore, body: bytes = BODY, **override: str) -> dict[str, Any]:
    creds = store.for_instance("agent-role", INSTANCE)
    session = _Session(
        override.get("access", creds.access_key_id),
        override.get("secret", creds.secret_access_key),
        creds.token,
    )
    headers = SigV4Auth("us-east-1", session=session).headers(
        "POST", URL, BODY, {"Content-Type": "application/json"}
    )
    headers.setdefault("Host", "127.0.0.1:8080")
    return http_event(
        "POST", "/agents/register", list(headers.items()), body, "127.0.0.1", host="127.0.0.1"
    )


@pytest.fixture
def store() -> CredentialStore:
    return CredentialStore(ACCOUNT)


def test_a_signed_request_names_the_instance_as_api_gateway_does(store: CredentialStore) -> None:
    event = IamAuthorizer(store).authorize(signed_event(store))
    iam = event["requestContext"]["authorizer"]["iam"]
    assert iam["userArn"] == f"arn:aws:sts::{ACCOUNT}:assumed-role/agent-role/{INSTANCE}"
    principal = IamAuthenticator("agent-role", ACCOUNT).authenticate(event)
    assert (principal.kind, principal.cloud_id) == ("agent", INSTANCE)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"body": b'{"pool": "other"}'}, "signature we calculated does not match"),
        ({"secret": "not-the-secret"}, "signature we calculated does not match"),
        ({"access": "ASIAUNKNOWN0000000"}, "security token included in the request is invalid"),
    ],
)
def test_a_tampered_or_forged_request_is_refused(
    store: CredentialStore, change: dict[str, Any], reason: str
) -> None:
    body = change.pop("body", BODY)
    event = signed_event(store, body, **change)
    with pytest.raises(Refused, match=reason):
        IamAuthorizer(store).authorize(event)


def test_a_replayed_request_is_refused_after_fifteen_minutes(store: CredentialStore) -> None:
    event = signed_event(store)
    import time

    later = IamAuthorizer(store, clock=lambda: time.time() + 16 * 60)
    with pytest.raises(Refused, match="Signature expired"):
        later.authorize(event)


def test_the_wrapped_api_answers_403_and_never_runs_the_handler(store: CredentialStore) -> None:
    calls: list[dict[str, Any]] = []
    api = IamAuthorizer(store).wrap(lambda event: calls.append(event) or {"statusCode": 200})
    event = signed_event(store, b'{"pool": "other"}')
    assert api(event)["statusCode"] == 403
    assert calls == []
    assert api(signed_event(store))["statusCode"] == 200
    assert calls[0]["requestContext"]["authorizer"]["iam"]["userArn"].endswith(INSTANCE)


def test_unsigned_requests_pass_as_they_came_and_cannot_claim_a_caller(
    store: CredentialStore,
) -> None:
    event = http_event(
        "GET", "/experiments", [("Authorization", "Bearer t")], b"", "127.0.0.1", host="h"
    )
    assert IamAuthorizer(store).authorize(event) is event


def test_the_local_api_takes_user_tokens_and_signed_agents() -> None:
    auth = authenticator_from_env(
        {
            "CORRAL_API_AUTH": "token",
            "CORRAL_USER_TOKEN": "user-token",
            "CORRAL_AGENT_ROLE_NAME": "agent-role",
            "CORRAL_ACCOUNT_ID": ACCOUNT,
        }
    )
    assert isinstance(auth, TokenOrIamAuthenticator)
    user = http_event(
        "GET", "/experiments", [("Authorization", "Bearer user-token")], b"", "1", host="h"
    )
    assert auth.authenticate(user).kind == "user"
    store = CredentialStore(ACCOUNT)
    agent = IamAuthorizer(store).authorize(signed_event(store))
    assert auth.authenticate(agent).cloud_id == INSTANCE
