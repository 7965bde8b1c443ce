"""GcpAuthenticator with an injected verifier (no network): users, agents, refusals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from corral.api.auth import AuthError
from corral.api.auth_gcp import GcpAuthenticator, gcp_authenticator_from_env
from corral.protocol.agent import Identity, IdentityKind

AUDIENCE = "https://api-xyz.a.run.app"
GOOGLE = "https://accounts.google.com"
TOKENS: dict[str, dict[str, Any]] = {
    "alice": {"iss": GOOGLE, "email": "Alice@example.com", "email_verified": True},
    "mallory": {"iss": GOOGLE, "email": "mallory@example.com", "email_verified": True},
    "unverified": {"iss": GOOGLE, "email": "alice@example.com", "email_verified": False},
    "foreign-issuer": {"iss": "https://evil.example", "email": "alice@example.com"},
    "agent": {
        "iss": GOOGLE,
        "email": "agent@proj-1.iam.gserviceaccount.com",
        "google": {
            "compute_engine": {
                "project_id": "proj-1",
                "zone": "us-central1-a",
                "instance_name": "corral-agent-inst-1",
            }
        },
    },
    "other-project-agent": {
        "iss": GOOGLE,
        "google": {"compute_engine": {"project_id": "proj-2", "instance_name": "x"}},
    },
}


def verify(token: str, audience: str) -> Mapping[str, Any]:
    assert audience == AUDIENCE
    if token not in TOKENS:
        raise ValueError("Could not verify token signature.")
    return TOKENS[token]


def auth(**kw: Any) -> GcpAuthenticator:
    return GcpAuthenticator(AUDIENCE, ["alice@example.com"], ["proj-1"], verify=verify, **kw)


def event(token: str | None) -> dict[str, Any]:
    return {"headers": {} if token is None else {"Authorization": f"Bearer {token}"}}


def test_a_listed_user_with_a_verified_email() -> None:
    principal = auth().authenticate(event("alice"))
    assert (principal.kind, principal.name) == ("user", "alice@example.com")


@pytest.mark.parametrize(
    ("token", "status"),
    [
        (None, 401),
        ("forged", 401),
        ("unverified", 401),
        ("foreign-issuer", 401),
        ("mallory", 403),
        ("other-project-agent", 403),
    ],
)
def test_refusals(token: str | None, status: int) -> None:
    with pytest.raises(AuthError) as raised:
        auth().authenticate(event(token))
    assert raised.value.status == status


def test_an_instance_identity_token_proves_the_instance() -> None:
    principal = auth().authenticate(event("agent"))
    assert (principal.kind, principal.cloud_id) == ("agent", "corral-agent-inst-1")


def test_agents_may_be_limited_to_a_service_account() -> None:
    strict = auth(agent_service_accounts=["other@proj-1.iam.gserviceaccount.com"])
    with pytest.raises(AuthError) as raised:
        strict.authenticate(event("agent"))
    assert raised.value.status == 403


def test_identity_documents_must_name_the_proven_instance() -> None:
    authenticator = auth()
    principal = authenticator.authenticate(event("agent"))
    same = Identity(kind=IdentityKind.GCE, document="agent")
    assert authenticator.identity_refusal(principal, same) is None
    forged = Identity(kind=IdentityKind.GCE, document="forged")
    assert "does not verify" in (authenticator.identity_refusal(principal, forged) or "")
    other = principal.__class__(kind="agent", name="y", cloud_id="y")
    assert "is for corral-agent-inst-1" in (authenticator.identity_refusal(other, same) or "")


def test_from_env() -> None:
    env = {
        "CORRAL_API_AUDIENCE": AUDIENCE,
        "CORRAL_USERS": "alice@example.com, bob@example.com",
        "GOOGLE_CLOUD_PROJECT": "proj-1",
    }
    authenticator = gcp_authenticator_from_env(env, verify=verify)
    assert authenticator.authenticate(event("agent")).kind == "agent"
    with pytest.raises(ValueError, match="AUDIENCE"):
        gcp_authenticator_from_env({}, verify=verify)
