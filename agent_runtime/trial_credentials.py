"""Credentials of a trial's own, served to its container the way ECS serves a task's.

A trial must reach its data (``s3://`` datasets, its checkpoint prefix) but must never act as
the instance: the instance role may call the control plane's agent routes and EC2. So the
agent assumes the deployment's *trial role* (infra/template.yaml ``TrialRole``) once per
trial, with the session named after the trial and a session policy that narrows the
checkpoint bucket to the experiment's own prefix, and serves those credentials over HTTP in
the ECS container-credentials format. Every AWS SDK and the CLI read them from
``AWS_CONTAINER_CREDENTIALS_FULL_URI`` with ``AWS_CONTAINER_AUTHORIZATION_TOKEN`` in the
``Authorization`` header; the token is random per trial, so one trial cannot read another's.

Where the URI points (botocore's ``ContainerMetadataFetcher._validate_allowed_url``, and the
other SDKs alike, accept plain HTTP only from a loopback address or 169.254.170.2,
169.254.170.23, fd00:ec2::23):
- host network (multi-agent trials, ``agent_docker_network: host``) and process trials:
  ``http://127.0.0.1:<port>/...``, the agent's loopback listener;
- a bridge network: ``http://169.254.170.2/...``, ECS's own address, which the agent's
  firewall rule (metadata_guard.py) DNATs to its listener on the bridge's gateway address.
  The gateway address itself would be refused by the SDKs (not loopback, not allowed).

Credentials are cached per trial until ``REFRESH_BEFORE_S`` before they expire (the SDKs
re-read the endpoint on their own as expiry nears), and a trial's grant is revoked when its
run is cleaned up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from agent_runtime.credential_server import (
    AWS_PATH,
    CredentialServer,
    Grant,
    Reply,
    TrialScope,
)

__all__ = ["CredentialServer", "Grant", "TrialRoleSource", "TrialScope"]

log = logging.getLogger(__name__)

URI_ENV = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
TOKEN_ENV = "AWS_CONTAINER_AUTHORIZATION_TOKEN"
# ECS's task-credentials address: an SDK accepts it over plain HTTP (see the docstring).
ECS_ADDRESS = "169.254.170.2"
PATH = AWS_PATH
SESSION_S = 3600  # role chaining (instance role -> trial role) caps sessions at one hour
REFRESH_BEFORE_S = 300.0
# Variables that would make an SDK use other credentials before the container endpoint
# (environment variables come first in every SDK's chain): a granted trial never gets them.
SHADOWING_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration: datetime
    role_arn: str | None = None

    def container_json(self) -> dict[str, str]:
        """The body ECS serves (what botocore's ContainerProvider parses)."""
        body = {
            "AccessKeyId": self.access_key_id,
            "SecretAccessKey": self.secret_access_key,
            "Token": self.session_token,
            "Expiration": self.expiration.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if self.role_arn:
            body["RoleArn"] = self.role_arn
        return body


def session_name(trial_id: str) -> str:
    """``trial-<id>`` in the characters and length STS allows (64, ``[\\w+=,.@-]``), so
    CloudTrail names the trial behind every call; a shortened id keeps a hash suffix."""
    name = "trial-" + re.sub(r"[^\w+=,.@-]", "-", trial_id)
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(trial_id.encode()).hexdigest()[:8]
    return f"{name[:55]}-{digest}"


def session_policy(scope: TrialScope, partition: str = "aws") -> str | None:
    """Narrow the trial role to the experiment's part of its checkpoint bucket: a session
    policy intersects the role's permissions, so S3 elsewhere (the data buckets) stays as
    the role allows, and the checkpoint bucket is reachable only under
    ``<prefix>/<experiment id>/``, where the control plane puts every trial of the
    experiment (services/shared/assignment_spec.checkpoint_uri). None for non-S3 storage."""
    uri = urlparse(scope.checkpoint_uri)
    if uri.scheme != "s3" or not uri.netloc:
        return None
    key = uri.path.strip("/")
    if key.endswith(f"/{scope.trial_id}") or key == scope.trial_id:
        key = key[: -len(scope.trial_id)].rstrip("/")  # .../<experiment id>
    prefix = f"{key}/" if key else ""
    arn = f"arn:{partition}:s3:::{uri.netloc}"
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ExperimentCheckpoints",
            "Effect": "Allow",
            "Action": "s3:*",
            "Resource": f"{arn}/{prefix}*",
        },
        {
            "Sid": "ListExperimentCheckpoints",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
        },
        {
            "Sid": "OtherBuckets",
            "Effect": "Allow",
            "Action": "s3:*",
            "NotResource": [arn, f"{arn}/*"],
        },
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


class TrialRoleSource:
    """Assumes the trial role with the instance's own credentials (boto3's default chain:
    the agent is the one process allowed to reach the metadata service)."""

    dnat_ecs_address = True  # bridge trials reach 169.254.170.2 (metadata_guard.py)

    def __init__(
        self,
        role_arn: str | None,
        sts: Any,
        now: Callable[[], float] = time.time,
        refresh_before_s: float = REFRESH_BEFORE_S,
    ) -> None:
        self.role_arn = role_arn
        self._sts = sts
        self._now = now
        self._refresh_before_s = refresh_before_s
        self._cache: dict[str, Credentials] = {}
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.role_arn is not None

    def environment(
        self, token: str, port: int, bridge_address: str | None
    ) -> tuple[dict[str, str], dict[str, str] | None]:
        loopback = {URI_ENV: f"http://127.0.0.1:{port}{PATH}", TOKEN_ENV: token}
        # Bridge trials: ECS's address, DNAT'd to the listener on the gateway (docstring).
        bridge = {URI_ENV: f"http://{ECS_ADDRESS}{PATH}", TOKEN_ENV: token}
        return loopback, bridge if bridge_address else None

    def serve(self, scope: TrialScope, path: str, headers: Mapping[str, str]) -> Reply:
        if path != PATH:
            return 404, {}, {"message": "not found"}
        return 200, {}, self.credentials(scope).container_json()

    def adopt(self, role_arn: str) -> None:
        with self._lock:
            if self.role_arn is None:
                log.info("trials get sessions of %s", role_arn)
                self.role_arn = role_arn

    def credentials(self, scope: TrialScope) -> Credentials:
        with self._lock:
            cached = self._cache.get(scope.trial_id)
            if cached is not None and self._fresh(cached):
                return cached
            fresh = self._assume(scope)
            self._cache[scope.trial_id] = fresh
            return fresh

    def forget(self, trial_id: str) -> None:
        with self._lock:
            self._cache.pop(trial_id, None)

    def _fresh(self, creds: Credentials) -> bool:
        return creds.expiration.timestamp() - self._now() > self._refresh_before_s

    def _assume(self, scope: TrialScope) -> Credentials:
        if self.role_arn is None:
            raise RuntimeError("no trial role known yet")
        kwargs: dict[str, Any] = {
            "RoleArn": self.role_arn,
            "RoleSessionName": session_name(scope.trial_id),
            "DurationSeconds": SESSION_S,
            # Session tags (sts:TagSession): CloudTrail and S3 access logs name the trial and
            # its experiment; a deployment may condition policies on aws:PrincipalTag.
            "Tags": [
                {"Key": "corral-trial", "Value": scope.trial_id[:256]},
                {"Key": "corral-experiment", "Value": scope.experiment_id[:256]},
            ],
        }
        policy = session_policy(scope, self.role_arn.split(":")[1])
        if policy is not None:
            kwargs["Policy"] = policy
        reply = self._sts.assume_role(**kwargs)
        c = reply["Credentials"]
        expiration = c["Expiration"]
        if not isinstance(expiration, datetime):
            expiration = datetime.fromisoformat(str(expiration).replace("Z", "+00:00"))
        log.info("assumed the trial role for %s until %s", scope.trial_id, expiration)
        return Credentials(
            access_key_id=c["AccessKeyId"],
            secret_access_key=c["SecretAccessKey"],
            session_token=c["SessionToken"],
            expiration=expiration,
            role_arn=(reply.get("AssumedRoleUser") or {}).get("Arn"),
        )
