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
  authorization is a user, named by its ARN exactly as STS gives it: an IAM user's
  ``arn:aws:iam::<acct>:user/<name>``, or for a role session (SSO, ``assume-role``)
  ``arn:aws:sts::<acct>:assumed-role/<role>/<session>``, the session included, since it is
  what tells the people sharing a role apart (an SSO session is named after the user).
  That name is the owner of what they submit (``corral.domain.access``).
- ``TokenAuthenticator`` (the local stack, and tests). ``Authorization: Bearer <token>``. User
  tokens come from the environment and from a users file (``UsersFile``: the local stack's
  ``users.json``, which ``corral dev user add`` extends), read again whenever it changes,
  so a user added while the API runs can call it at once. Agent tokens are stateless:
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
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from corral.protocol.agent import Identity, IdentityKind

log = logging.getLogger(__name__)

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


def token_digest(token: str) -> str:
    """What a users file stores of a token (never the token itself)."""
    return hashlib.sha256(token.encode()).hexdigest()


class UsersFile:
    """A JSON file of named users: ``{"users": [{"name": ..., "token_sha256": ...}]}``.

    Read again when it changes (its inode, size or modification time), so users added or
    removed while the API runs count from the next request. A file that cannot be read or
    parsed keeps the users last read (logged): a half-edited file locks no one out.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._users: dict[str, str] = {}  # token digest -> name

    def users(self) -> dict[str, str]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._users = None, {}
            return self._users
        except OSError as error:
            log.warning("cannot read the users file %s: %s", self.path, error)
            return self._users
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp != self._stamp:
            try:
                self._users = parse_users(self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
            except (OSError, ValueError) as error:
                log.warning("keeping the last users read: %s: %s", self.path, error)
        return self._users


def parse_users(text: str) -> dict[str, str]:
    """token digest -> user name, from a users file's text; ValueError if it is not one."""
    data = json.loads(text)
    entries = data.get("users") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError('not {"users": [...]}')
    users: dict[str, str] = {}
    for n, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        digest = entry.get("token_sha256") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(digest, str) or not name or not digest:
            raise ValueError(f"users[{n}] needs a name and a token_sha256")
        users[digest] = name
    return users


class TokenAuthenticator:
    def __init__(
        self,
        user_tokens: Mapping[str, str],
        agent_secret: bytes | None,
        users_file: Path | None = None,
    ) -> None:
        """``user_tokens``: token -> user name. ``agent_secret``: None disables agents.
        ``users_file``: more users, read again whenever the file changes (``UsersFile``)."""
        self._users = {token_digest(t): name for t, name in user_tokens.items()}
        self._secret = agent_secret
        self._file = UsersFile(users_file) if users_file is not None else None

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
        # Digests of equal length, compared against every user (no early exit), so timing
        # says nothing about which token is close to which.
        digest = token_digest(token).encode()
        known = {**self._users, **(self._file.users() if self._file else {})}
        name = None
        for candidate, user in known.items():
            if hmac.compare_digest(candidate.encode(), digest):
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


class TokenOrIamAuthenticator:
    """The local stack: users with bearer tokens, agents with SigV4 as on AWS. The stack's
    IAM authorizer (``corral.local.iam_authorizer``) fills ``requestContext.authorizer.iam``
    for signed requests only, so an event carrying it is judged by ``IamAuthenticator``,
    any other by ``TokenAuthenticator``."""

    def __init__(self, token: TokenAuthenticator, iam: IamAuthenticator) -> None:
        self._token = token
        self._iam = iam

    def authenticate(self, event: Mapping[str, Any]) -> Principal:
        authorizer = (event.get("requestContext") or {}).get("authorizer") or {}
        if authorizer.get("iam"):
            return self._iam.authenticate(event)
        return self._token.authenticate(event)

    def identity_refusal(self, principal: Principal, identity: Identity) -> str | None:
        return self._iam.identity_refusal(principal, identity) or self._token.identity_refusal(
            principal, identity
        )


def authenticator_from_env(env: Mapping[str, str]) -> Authenticator:
    """``CORRAL_API_AUTH=iam`` (default): ``CORRAL_AGENT_ROLE_NAME`` (required) and
    ``CORRAL_ACCOUNT_ID`` (optional). ``CORRAL_API_AUTH=token``: ``CORRAL_USER_TOKEN`` (the
    user is named ``CORRAL_USER_NAME``, default "local") and/or ``CORRAL_USERS_FILE`` (a
    ``UsersFile``), at least one of them; ``CORRAL_AGENT_TOKEN_SECRET`` (optional; without
    it no agent can authenticate); with ``CORRAL_AGENT_ROLE_NAME`` too, agents may also sign
    with SigV4 as on AWS (``TokenOrIamAuthenticator``: the local stack)."""
    mode = env.get("CORRAL_API_AUTH", "iam")
    if mode == "iam":
        role = env.get("CORRAL_AGENT_ROLE_NAME")
        if not role:
            raise ValueError("CORRAL_AGENT_ROLE_NAME is required with CORRAL_API_AUTH=iam")
        return IamAuthenticator(role, env.get("CORRAL_ACCOUNT_ID") or None)
    if mode == "token":
        token = env.get("CORRAL_USER_TOKEN")
        users_file = env.get("CORRAL_USERS_FILE")
        if not token and not users_file:
            raise ValueError(
                "CORRAL_USER_TOKEN or CORRAL_USERS_FILE is required with CORRAL_API_AUTH=token"
            )
        secret = env.get("CORRAL_AGENT_TOKEN_SECRET")
        tokens = TokenAuthenticator(
            {token: env.get("CORRAL_USER_NAME", "local")} if token else {},
            secret.encode() if secret else None,
            Path(users_file) if users_file else None,
        )
        role = env.get("CORRAL_AGENT_ROLE_NAME")
        if not role:
            return tokens
        return TokenOrIamAuthenticator(
            tokens, IamAuthenticator(role, env.get("CORRAL_ACCOUNT_ID") or None)
        )
    raise ValueError(f"CORRAL_API_AUTH must be 'iam' or 'token', not {mode!r}")
