"""Authenticators: who a request comes from, deployed (IAM) and on the local stack (tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.api.auth import (
    AuthError,
    IamAuthenticator,
    Principal,
    TokenAuthenticator,
    agent_token_cloud_id,
    authenticator_from_env,
    mint_agent_token,
    token_digest,
)
from corral.protocol.agent import Identity, IdentityKind
from tests.services.harness import Cluster

from .conftest import ApiClient
from .events import ACCOUNT, agent_arn, http_event, user_arn

SECRET = b"dev-secret"
INSTANCE = "i-0123456789abcdef0"


def test_iam_users_and_agents() -> None:
    auth = IamAuthenticator("corral-agent", ACCOUNT)
    user = auth.authenticate(http_event("GET", "/", iam_arn=user_arn("bob")))
    assert user == Principal(kind="user", name=user_arn("bob"))
    other_role = "arn:aws:sts::123456789012:assumed-role/Admin/bob@example.com"
    assert auth.authenticate(http_event("GET", "/", iam_arn=other_role)).kind == "user"
    agent = auth.authenticate(http_event("GET", "/", iam_arn=agent_arn(INSTANCE)))
    assert agent == Principal(kind="agent", name=INSTANCE, cloud_id=INSTANCE)
    with pytest.raises(AuthError) as foreign:
        auth.authenticate(
            http_event("GET", "/", iam_arn=agent_arn(INSTANCE, account="999999999999"))
        )
    assert foreign.value.status == 403
    with pytest.raises(AuthError) as unsigned:
        auth.authenticate(http_event("GET", "/"))
    assert unsigned.value.status == 401


def test_iam_identity_document_must_name_the_proven_instance() -> None:
    auth = IamAuthenticator("corral-agent")
    me = Principal(kind="agent", name=INSTANCE, cloud_id=INSTANCE)
    good = Identity(kind=IdentityKind.EC2, document=f'{{"instanceId": "{INSTANCE}"}}')
    assert auth.identity_refusal(me, good) is None
    bad = Identity(kind=IdentityKind.EC2, document='{"instanceId": "i-0ffffffffffffffff"}')
    assert "i-0ffffffffffffffff" in (auth.identity_refusal(me, bad) or "")
    assert auth.identity_refusal(me, Identity(kind=IdentityKind.EC2, document="<xml/>"))


def test_agent_tokens_are_bound_to_their_instance() -> None:
    token = mint_agent_token(SECRET, INSTANCE)
    assert agent_token_cloud_id(SECRET, token) == INSTANCE
    assert agent_token_cloud_id(b"other-secret", token) is None
    forged = token.replace(INSTANCE, "i-0ffffffffffffffff")
    assert agent_token_cloud_id(SECRET, forged) is None
    assert agent_token_cloud_id(SECRET, "garbage") is None


def test_token_authenticator() -> None:
    auth = TokenAuthenticator({"user-token": "local"}, SECRET)
    user = auth.authenticate(http_event("GET", "/", bearer="user-token"))
    assert user == Principal(kind="user", name="local")
    token = mint_agent_token(SECRET, INSTANCE)
    agent = auth.authenticate(http_event("GET", "/", headers={"Authorization": f"bearer {token}"}))
    assert agent.cloud_id == INSTANCE
    for bad in ({"authorization": "Bearer nope"}, {"authorization": "Basic dXNlcg=="}, {}):
        with pytest.raises(AuthError) as refused:
            auth.authenticate(http_event("GET", "/", headers=bad))
        assert refused.value.status == 401
    no_agents = TokenAuthenticator({"user-token": "local"}, None)
    with pytest.raises(AuthError):
        no_agents.authenticate(http_event("GET", "/", bearer=token))


def test_dev_identity_token_must_be_the_callers_own() -> None:
    auth = TokenAuthenticator({}, SECRET)
    me = Principal(kind="agent", name=INSTANCE, cloud_id=INSTANCE)
    mine = Identity(kind=IdentityKind.DEV, document=mint_agent_token(SECRET, INSTANCE))
    theirs = Identity(
        kind=IdentityKind.DEV, document=mint_agent_token(SECRET, "i-0ffffffffffffffff")
    )
    assert auth.identity_refusal(me, mine) is None
    assert auth.identity_refusal(me, theirs)


def test_authenticator_from_env() -> None:
    iam = authenticator_from_env({"CORRAL_AGENT_ROLE_NAME": "corral-agent"})
    assert isinstance(iam, IamAuthenticator)
    token = authenticator_from_env(
        {"CORRAL_API_AUTH": "token", "CORRAL_USER_TOKEN": "t", "CORRAL_AGENT_TOKEN_SECRET": "s"}
    )
    assert isinstance(token, TokenAuthenticator)
    for env in ({}, {"CORRAL_API_AUTH": "token"}, {"CORRAL_API_AUTH": "none"}):
        with pytest.raises(ValueError):
            authenticator_from_env(env)


def test_local_stack_tokens_through_the_api(cluster: Cluster) -> None:
    api = ApiClient(cluster, TokenAuthenticator({"user-token": "local"}, SECRET))
    created = api.post(
        "/experiments", {"config": {"entrypoint": "x"}}, caller=None, bearer="user-token"
    )
    assert created.status == 201 and created.json["owner"] == "local"
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = cluster.running_cloud_ids()
    token = mint_agent_token(SECRET, cloud_id)
    body = {
        "cloud_id": cloud_id,
        "identity": {"kind": "dev", "document": token},
        "instance_type": "g.1",
        "zone": "zone-a",
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "fake", "memory_mib": 1}],
    }
    registered = api.post("/agents/register", body, caller=None, bearer=token)
    assert registered.status == 200, registered.text
    other = mint_agent_token(SECRET, "i-0ffffffffffffffff")
    assert api.post("/agents/register", body, caller=None, bearer=other).status == 403
    assert api.get("/experiments", caller=None, bearer=token).status == 403


def test_the_users_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    users_file = tmp_path / "users.json"
    auth = TokenAuthenticator({"env-token": "ci"}, None, users_file)

    def who(token: str) -> str | int:
        try:
            return auth.authenticate(http_event("GET", "/", bearer=token)).name
        except AuthError as refused:
            return refused.status

    assert (who("env-token"), who("bob-token")) == ("ci", 401)  # no file yet: env users only
    entries = [{"name": "bob", "token_sha256": token_digest("bob-token")}]
    users_file.write_text(json.dumps({"users": entries}))
    assert who("bob-token") == "bob"
    assert "bob-token" not in users_file.read_text()  # only digests are kept
    users_file.write_text("{half written")  # a broken file locks no one out
    assert who("bob-token") == "bob"
    users_file.write_text(json.dumps({"users": []}))  # removed: refused from now on
    assert who("bob-token") == 401
    users_file.unlink()
    assert (who("env-token"), who("bob-token")) == ("ci", 401)


def test_the_users_file_from_the_environment(tmp_path: Path) -> None:
    users_file = tmp_path / "users.json"
    entries = [{"name": "carol", "token_sha256": token_digest("carol-token")}]
    users_file.write_text(json.dumps({"users": entries}))
    auth = authenticator_from_env(
        {"CORRAL_API_AUTH": "token", "CORRAL_USERS_FILE": str(users_file)}
    )
    user = auth.authenticate(http_event("GET", "/", bearer="carol-token"))
    assert user == Principal(kind="user", name="carol")
    with pytest.raises(AuthError):
        auth.authenticate(http_event("GET", "/", bearer=mint_agent_token(SECRET, INSTANCE)))


def test_an_iam_user_is_named_by_the_whole_arn_session_included() -> None:
    # The owner of what they submit (docs/security.md, "Owners and admins").
    auth = IamAuthenticator("corral-agent", ACCOUNT)
    sso = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev_0123/alice@example.com"
    assert auth.authenticate(http_event("GET", "/", iam_arn=sso)).name == sso
