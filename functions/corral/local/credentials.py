"""The local stack's STS: temporary credentials for the role of an instance's profile, as
EC2 hands them to the instance through its metadata service, and the lookup the local API's
SigV4 verifier (``iam_authorizer``) makes to learn whose they are.

EC2 names the role session after the instance, so a session's ARN is
``arn:aws:sts::<account>:assumed-role/<role>/<instance id>``: that is what API Gateway's IAM
authorizer reports, and what ``corral.api.auth.IamAuthenticator`` reads the instance from.
Credentials live in memory only (the stack's process serves both the metadata services and
the API), one set per instance, renewed before they expire as EC2 rotates them.
"""

from __future__ import annotations

import secrets
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LIFETIME_S = 6 * 3600.0  # what EC2 gives instance-profile credentials
RENEW_BEFORE_S = 15 * 60.0  # EC2 offers new ones well before the old ones lapse

_KEY_CHARS = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class SessionCredentials:
    access_key_id: str
    secret_access_key: str
    token: str
    expires_at: float  # epoch seconds
    issued_at: float
    role: str
    session_arn: str


class CredentialStore:
    def __init__(self, account: str, clock: Callable[[], float] = time.time) -> None:
        self.account = account
        self._clock = clock
        self._by_key: dict[str, SessionCredentials] = {}
        self._by_session: dict[tuple[str, str], SessionCredentials] = {}
        self._lock = threading.Lock()

    def for_instance(self, role: str, instance_id: str) -> SessionCredentials:
        """The instance's current credentials for ``role``: new ones when there are none or
        they are about to expire (the old ones stay valid until they do)."""
        now = self._clock()
        with self._lock:
            current = self._by_session.get((role, instance_id))
            if current is not None and current.expires_at - now > RENEW_BEFORE_S:
                return current
            made = SessionCredentials(
                access_key_id="ASIA" + "".join(secrets.choice(_KEY_CHARS) for _ in range(16)),
                secret_access_key=secrets.token_urlsafe(30),
                token=secrets.token_urlsafe(96),
                expires_at=now + LIFETIME_S,
                issued_at=now,
                role=role,
                session_arn=f"arn:aws:sts::{self.account}:assumed-role/{role}/{instance_id}",
            )
            self._by_session[(role, instance_id)] = made
            self._by_key[made.access_key_id] = made
            return made

    def find(self, access_key_id: str) -> SessionCredentials | None:
        """The live credentials with this key id, or None (unknown or expired)."""
        with self._lock:
            found = self._by_key.get(access_key_id)
        if found is None or found.expires_at <= self._clock():
            return None
        return found

    def revoke_instance(self, instance_id: str) -> None:
        """A terminated instance's credentials stop working (EC2's are only as good as the
        role's trust; here nothing else would end them)."""
        with self._lock:
            for key in [k for k in self._by_session if k[1] == instance_id]:
                gone = self._by_session.pop(key)
                self._by_key.pop(gone.access_key_id, None)
