"""Who is calling: a user, or the agent of one cloud instance.

Two authenticators read the (HTTP API v2) event:

- ``IamAuthenticator`` (deployed). The HTTP API uses ``AWS_IAM`` authorization, so API
  Gateway has already checked the SigV4 signature and put the caller in
  ``requestContext.authorizer.iam``. The agent role's credentials come from the instance
  profile, and EC2 names their STS session after the instance, so an agent's ARN is
  ``arn:aws:sts::<acct>:assumed-role/<agent-role>/i-0abc...``: the instance id is proven by
  STS, not claimed by the agent. This holds only while the agent role trusts
  ``ec2.amazonaws.com`` alone (anyone allowed to ``sts:AssumeRole`` it could pick any session
  name): the template must keep it so. Every other principal that gets past the API's
  authorization is a user, named by its ARN.
- ``TokenAuthenticator`` (the local stack, and tests). ``Authorization: Bearer <token>``. User
  tokens come from the stack's config. Agent tokens are stateless:
  ``corral-agent.<cloud id>.<hex HMAC-SHA256(secret, "corral-agent:" + cloud id)>``, minted
  by the instance emulator with ``mint_agent_token`` when it starts an agent, so the API
  needs no table of issued tokens and a token is worthless for any other instance.

The registration call may also carry the instance's identity document. It is checked for
consistency with the proven id (``identity_refusal``: an EC2 document must name the
proven instance; a dev token document must be the caller's own). The EC2 document's PKCS7
signature is NOT verified: the SigV4 session (or the HMAC token) is the proof, and the
document adds no authority.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from corral.protocol.agent import Identity, IdentityKind

AGENT_TOKEN_PREFIX = "corral-agent"
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_ASSUMED_ROLE = re.compile(
    r"^arn:aws[a-z-]*:sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/(?P<session>[^/]+)$"
)


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Literal["user", "agent"]
    name: str  # a user's ARN or token name; an agent's cloud id
    cloud_id: str | None = None  # agents only: the instance the caller proved it is


class AuthError(Exception):
    """401: no usable credentials; 403: credentials that may not do this."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Authenticator(Protocol):
    def authenticate(self, event: Mapping[str, Any]) -> Principal:
        """The caller of a raw HTTP API v2 event; raises AuthError when there is none."""
        ...

    def identity_refusal(self, principal: Principal, identity: Identity) -> str | None:
        """Why an agent's registration identity contradicts the id it proved, or None."""
        ...


def require(principal: Principal, kind: Literal["user", "agent"]) -> Principal:
    if principal.kind != kind:
        raise AuthError(403, f"this route is for {kind}s, not {principal.kind}s")
    return principal


class IamAuthenticator:
    def __init__(self, agent_role_name: str, account_id: str | None = None) -> None:
        self._role = agent_role_name
        self._account = account_id

    def authenticate(self, event: Mapping[str, Any]) -> Principal:
        iam = ((event.get("requestContext") or {}).get("authorizer") or {}).get("iam") or {}
        arn = iam.get("userArn")
        if not isinstance(arn, str) or not arn:
            raise AuthError(401, "the request is not IAM-signed")
        match = _ASSUMED_ROLE.match(arn)
        if match is None or match["role"] != self._role:
            return Principal(kind="user", name=arn)
        if self._account is not None and match["account"] != self._account:
            # Same role name in another account: not our agents, and not trusted as a user.
            raise AuthError(403, f"agent role of account {match['account']} is not trusted")
        session = match["session"]
        if not _INSTANCE_ID.match(session):
            raise AuthError(403, "the agent role may only be used by instance profiles")
        return Principal(kind="agent", name=session, cloud_id=session)

    def identity_refusal(self, principal: Principal, identity: Identity) -> str | None:
        """An EC2 document must name the proven instance (its signature is not checked)."""
        if identity.kind is not IdentityKind.EC2:
            return None
        try:
            document = json.loads(identity.document)
        except ValueError:
            return "the EC2 identity document is not JSON"
        claimed = document.get("instanceId") if isinstance(document, dict) else None
        if claimed != principal.cloud_id:
            return f"the identity document is for {claimed}, the caller is {principal.cloud_id}"
        return None


def mint_agent_token(secret: bytes, cloud_id: str) -> str:
    """The bearer token of the agent on ``cloud_id`` (for the local stack's emulator)."""
    return f"{AGENT_TOKEN_PREFIX}.{cloud_id}.{_mac(secret, cloud_id)}"


def _mac(secret: bytes, cloud_id: str) -> str:
    return hmac.new(secret, f"{AGENT_TOKEN_PREFIX}:{cloud_id}".encode(), hashlib.sha256).hexdigest()


def agent_token_cloud_id(secret: bytes, token: str) -> str | None:
    """The cloud id a well-formed, correctly signed agent token names, else None."""
    prefix, _, rest = token.partition(".")
    cloud_id, _, mac = rest.rpartition(".")
    if prefix != AGENT_TOKEN_PREFIX or not cloud_id:
        return None
    return cloud_id if hmac.compare_digest(mac, _mac(secret, cloud_id)) else None


class TokenAuthenticator:
    def __init__(self, user_tokens: Mapping[str, str], agent_secret: bytes | None) -> None:
        """``user_tokens``: token -> user name. ``agent_secret``: None disables agents."""
        self._users = dict(user_tokens)
        self._secret = agent_secret

    def authenticate(self, event: Mapping[str, Any]) -> Principal:
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        scheme, _, token = str(headers.get("authorization") or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError(401, "missing 'Authorization: Bearer <token>'")
        if token.startswith(AGENT_TOKEN_PREFIX + ".") and self._secret is not None:
            cloud_id = agent_token_cloud_id(self._secret, token)
            if cloud_id is not None:
                return Principal(kind="agent", name=cloud_id, cloud_id=cloud_id)
        # Compare against every token (no early exit) so timing says nothing about which.
        name = None
        for known, user in self._users.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                name = user
        if name is None:
            raise AuthError(401, "unknown token")
        return Principal(kind="user", name=name)

    def identity_refusal(self, principal: Principal, identity: Identity) -> str | None:
        """A dev document that is an agent token must name the proven instance."""
        if identity.kind is not IdentityKind.DEV or self._secret is None:
            return None
        named = agent_token_cloud_id(self._secret, identity.document)
        if named is not None and named != principal.cloud_id:
            return f"the dev token is for {named}, the caller is {principal.cloud_id}"
        return None


def authenticator_from_env(env: Mapping[str, str]) -> Authenticator:
    """``CORRAL_API_AUTH=iam`` (default): ``CORRAL_AGENT_ROLE_NAME`` (required) and
    ``CORRAL_ACCOUNT_ID`` (optional). ``CORRAL_API_AUTH=token``: ``CORRAL_USER_TOKEN``
    (required; the user is named ``CORRAL_USER_NAME``, default "local") and
    ``CORRAL_AGENT_TOKEN_SECRET`` (optional; without it no agent can authenticate)."""
    mode = env.get("CORRAL_API_AUTH", "iam")
    if mode == "iam":
        role = env.get("CORRAL_AGENT_ROLE_NAME")
        if not role:
            raise ValueError("CORRAL_AGENT_ROLE_NAME is required with CORRAL_API_AUTH=iam")
        return IamAuthenticator(role, env.get("CORRAL_ACCOUNT_ID") or None)
    if mode == "token":
        token = env.get("CORRAL_USER_TOKEN")
        if not token:
            raise ValueError("CORRAL_USER_TOKEN is required with CORRAL_API_AUTH=token")
        secret = env.get("CORRAL_AGENT_TOKEN_SECRET")
        return TokenAuthenticator(
            {token: env.get("CORRAL_USER_NAME", "local")}, secret.encode() if secret else None
        )
    raise ValueError(f"CORRAL_API_AUTH must be 'iam' or 'token', not {mode!r}")
