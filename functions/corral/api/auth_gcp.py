"""Who is calling, on GCP: a user with a Google ID token, or the agent of one GCE instance.

Both carry ``Authorization: Bearer <Google-signed ID token (JWT)>`` for the function's URL
as audience. Cloud Run's IAM (``roles/run.invoker``) has already checked the token at the
front door when the function is deployed without ``--allow-unauthenticated``; it does not
say who the caller is, so the token is verified again here (signature against Google's
certificates, expiry, audience, issuer) and read:

- An *instance identity token* (``format=full``, what ``agent_runtime`` asks the metadata
  server for) has a ``google.compute_engine`` claim naming the project, zone and instance.
  Google signs it for the instance the request came from, so the instance name (Corral's
  cloud id on GCE) is proven, not claimed. Accepted only from the configured project(s)
  and, when set, the agent's service account.
- Any other token is a user's: its ``email`` must be verified and on the allow list. The
  user is named by that email, lowercased (Google matches emails case-insensitively): the
  owner of what they submit, and what the cluster config's ``admins`` name.

Verification needs ``google-auth`` with ``requests`` (for Google's certificates, cached by
the library). It is part of the ``gcp`` extra; if it is missing, building the
authenticator fails loudly: a token is never accepted unverified. Tests inject ``verify``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from corral.api.auth import AuthError, Principal
from corral.protocol.agent import Identity, IdentityKind

GOOGLE_ISSUERS = frozenset({"accounts.google.com", "https://accounts.google.com"})
# verify(token, audience) -> claims; raises ValueError for a bad, expired or foreign token.
Verifier = Callable[[str, str], Mapping[str, Any]]


def google_verifier() -> Verifier:
    """Verify Google-signed ID tokens with google-auth (imported here, once)."""
    try:
        from google.auth.transport import requests as google_requests
        from google.oauth2 import id_token
    except ImportError as error:  # pragma: no cover - the gcp extra installs both
        raise ValueError(
            "CORRAL_API_AUTH=gcp needs google-auth and requests to verify ID tokens"
        ) from error
    request = google_requests.Request()  # reuses one HTTP session for the certificates

    def verify(token: str, audience: str) -> Mapping[str, Any]:
        claims: Mapping[str, Any] = id_token.verify_token(token, request, audience=audience)
        return claims

    return verify


def _compute_engine(claims: Mapping[str, Any]) -> Mapping[str, Any] | None:
    google = claims.get("google")
    found = google.get("compute_engine") if isinstance(google, Mapping) else None
    return found if isinstance(found, Mapping) else None


class GcpAuthenticator:
    """Implements ``corral.api.auth.Authenticator`` for Cloud Functions."""

    def __init__(
        self,
        audience: str,
        users: Collection[str],
        agent_projects: Collection[str],
        *,
        agent_service_accounts: Collection[str] = (),
        verify: Verifier | None = None,
    ) -> None:
        self._audience = audience
        self._users = {u.lower() for u in users}
        self._projects = set(agent_projects)
        self._agent_accounts = {a.lower() for a in agent_service_accounts}
        self._verify = verify or google_verifier()

    def _claims(self, token: str) -> Mapping[str, Any]:
        try:
            claims = self._verify(token, self._audience)
        except Exception as error:  # google-auth raises ValueError and transport errors
            raise AuthError(401, f"the ID token does not verify: {error}") from None
        if claims.get("iss") not in GOOGLE_ISSUERS:
            raise AuthError(401, "the ID token is not issued by Google")
        return claims

    def authenticate(self, event: Mapping[str, Any]) -> Principal:
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        scheme, _, token = str(headers.get("authorization") or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError(401, "missing 'Authorization: Bearer <Google ID token>'")
        claims = self._claims(token)
        instance = _compute_engine(claims)
        if instance is not None:
            return self._agent(claims, instance)
        email = str(claims.get("email") or "").lower()
        if not email or claims.get("email_verified") is not True:
            raise AuthError(401, "the ID token carries no verified email")
        if email not in self._users:
            raise AuthError(403, f"{email} is not a Corral user")
        return Principal(kind="user", name=email)

    def _agent(self, claims: Mapping[str, Any], instance: Mapping[str, Any]) -> Principal:
        project = str(instance.get("project_id") or "")
        name = str(instance.get("instance_name") or "")
        if project not in self._projects:
            raise AuthError(403, f"instances of project {project!r} are not Corral agents")
        email = str(claims.get("email") or "").lower()
        if self._agent_accounts and email not in self._agent_accounts:
            raise AuthError(403, f"instance {name} runs as {email}, not an agent account")
        if not name:
            raise AuthError(403, "the instance identity token names no instance")
        return Principal(kind="agent", name=name, cloud_id=name)

    def identity_refusal(self, principal: Principal, identity: Identity) -> str | None:
        """A GCE identity document (a token) must verify and name the proven instance."""
        if identity.kind is not IdentityKind.GCE:
            return None
        try:
            claims = self._claims(identity.document)
        except AuthError as error:
            return error.message
        instance = _compute_engine(claims) or {}
        named = instance.get("instance_name")
        if named != principal.cloud_id:
            return f"the identity token is for {named}, the caller is {principal.cloud_id}"
        return None


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def gcp_authenticator_from_env(
    env: Mapping[str, str], verify: Verifier | None = None
) -> GcpAuthenticator:
    """``CORRAL_API_AUDIENCE`` (the function's URL, required), ``CORRAL_USERS`` (emails,
    comma-separated), ``CORRAL_AGENT_PROJECTS`` (default ``GOOGLE_CLOUD_PROJECT``) and
    ``CORRAL_AGENT_SERVICE_ACCOUNTS`` (optional)."""
    audience = env.get("CORRAL_API_AUDIENCE", "").strip()
    if not audience:
        raise ValueError("CORRAL_API_AUDIENCE (the api function's URL) is required")
    projects = _split(env.get("CORRAL_AGENT_PROJECTS")) or _split(env.get("GOOGLE_CLOUD_PROJECT"))
    return GcpAuthenticator(
        audience,
        _split(env.get("CORRAL_USERS")),
        projects,
        agent_service_accounts=_split(env.get("CORRAL_AGENT_SERVICE_ACCOUNTS")),
        verify=verify,
    )


__all__ = ["GcpAuthenticator", "Verifier", "gcp_authenticator_from_env", "google_verifier"]
