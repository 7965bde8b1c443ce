"""Who this instance is, and whether the cloud is about to take it away.

EC2: IMDSv2 (a session token from ``PUT /latest/api/token``, then every read carries it).
GCE: the metadata server (``Metadata-Flavor: Google``). Dev: values from the config, which
the local stack's instance emulator writes. Base URLs come from the config so tests point
them at a fake metadata server on loopback.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

import requests

from agent_runtime.clock import Clock
from agent_runtime.config import AgentConfig
from corral.protocol.agent import Identity, IdentityKind

log = logging.getLogger(__name__)

AWS_SPOT_NOTICE_S = 120.0  # EC2 spot interruption warning
GCE_PREEMPT_NOTICE_S = 30.0  # GCE preemptible / Spot VM


class MetadataError(RuntimeError):
    """The metadata server did not answer what every instance of that cloud must have."""


@dataclass(frozen=True)
class InstanceIdentity:
    cloud_id: str
    identity: Identity
    instance_type: str
    zone: str
    capacity_type: str
    private_ip: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class Notice:
    """An interruption notice. ``window_s`` is the time left before the instance goes."""

    kind: str
    window_s: float
    action: str = "preempt"  # or "drain": stop taking work, let running trials finish


class MetadataSource(Protocol):
    def identity(self) -> InstanceIdentity: ...

    def notice(self) -> Notice | None:
        """The current interruption notice, or None. Errors are logged, never raised."""

    def identity_token(self, audience: str) -> str:
        """GCE only: a fresh identity JWT for the audience."""


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # link-local metadata must never go through a proxy
    return session


class Ec2Metadata:
    TOKEN_TTL_S = 21_600

    def __init__(self, config: AgentConfig, clock: Clock) -> None:
        self._base = config.ec2_metadata_url.rstrip("/")
        self._timeout = config.metadata_timeout_s
        self._clock = clock
        self._http = _session()
        self._rebalance_action = config.rebalance_action
        self._token: str | None = None
        self._token_expiry = 0.0

    def _token_header(self) -> dict[str, str]:
        now = self._clock.monotonic()
        if self._token is None or now >= self._token_expiry:
            reply = self._http.put(
                f"{self._base}/latest/api/token",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.TOKEN_TTL_S)},
                timeout=self._timeout,
            )
            reply.raise_for_status()
            self._token = reply.text
            self._token_expiry = now + self.TOKEN_TTL_S - 60  # renew before it lapses
        return {"X-aws-ec2-metadata-token": self._token}

    def _get(self, path: str) -> str | None:
        reply = self._http.get(
            f"{self._base}/latest/{path}", headers=self._token_header(), timeout=self._timeout
        )
        if reply.status_code == 401:  # token revoked or expired early: fetch a new one once
            self._token = None
            reply = self._http.get(
                f"{self._base}/latest/{path}", headers=self._token_header(), timeout=self._timeout
            )
        if reply.status_code == 404:
            return None
        reply.raise_for_status()
        return reply.text

    def _must(self, path: str) -> str:
        value = self._get(path)
        if not value:
            raise MetadataError(f"EC2 metadata has no {path}")
        return value

    def identity(self) -> InstanceIdentity:
        document = self._must("dynamic/instance-identity/document")
        signature = self._must("dynamic/instance-identity/pkcs7")
        region = json.loads(document).get("region")
        lifecycle = self._get("meta-data/instance-life-cycle") or "on-demand"
        return InstanceIdentity(
            cloud_id=self._must("meta-data/instance-id"),
            identity=Identity(kind=IdentityKind.EC2, document=document, signature=signature),
            instance_type=self._must("meta-data/instance-type"),
            zone=self._must("meta-data/placement/availability-zone"),
            capacity_type="spot" if lifecycle == "spot" else "on-demand",
            private_ip=self._get("meta-data/local-ipv4"),
            region=region,
        )

    def notice(self) -> Notice | None:
        try:
            action = self._get("meta-data/spot/instance-action")
            if action:
                return Notice("spot-interruption", self._window(action))
            if self._rebalance_action != "ignore" and self._get(
                "meta-data/events/recommendations/rebalance"
            ):
                # A rebalance recommendation names no deadline: assume the spot warning's.
                return Notice("rebalance", AWS_SPOT_NOTICE_S, self._rebalance_action)
        except (requests.RequestException, MetadataError) as exc:
            log.warning("EC2 metadata notice check failed: %s", exc)
        return None

    def _window(self, action_json: str) -> float:
        try:
            when = json.loads(action_json)["time"]
            at = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
            return max(0.0, min(AWS_SPOT_NOTICE_S, at - self._clock.time()))
        except (ValueError, KeyError, TypeError):
            return AWS_SPOT_NOTICE_S

    def identity_token(self, audience: str) -> str:
        raise MetadataError("EC2 agents sign requests with SigV4, not identity tokens")


class GceMetadata:
    def __init__(self, config: AgentConfig, clock: Clock) -> None:
        self._base = config.gce_metadata_url.rstrip("/") + "/computeMetadata/v1"
        self._timeout = config.metadata_timeout_s
        self._http = _session()
        self._audience = config.api_url

    def _get(self, path: str, params: dict[str, str] | None = None) -> str | None:
        reply = self._http.get(
            f"{self._base}/{path}",
            headers={"Metadata-Flavor": "Google"},
            params=params,
            timeout=self._timeout,
        )
        if reply.status_code == 404:
            return None
        reply.raise_for_status()
        return reply.text

    def _must(self, path: str, params: dict[str, str] | None = None) -> str:
        value = self._get(path, params)
        if not value:
            raise MetadataError(f"GCE metadata has no {path}")
        return value

    def identity(self) -> InstanceIdentity:
        preemptible = (self._get("instance/scheduling/preemptible") or "").upper() == "TRUE"
        model = (self._get("instance/scheduling/provisioning-model") or "").upper()
        zone = self._must("instance/zone").rsplit("/", 1)[-1]  # projects/N/zones/<zone>
        return InstanceIdentity(
            cloud_id=self._must("instance/name"),
            identity=Identity(kind=IdentityKind.GCE, document=self.identity_token(self._audience)),
            instance_type=self._must("instance/machine-type").rsplit("/", 1)[-1],
            zone=zone,
            capacity_type="spot" if preemptible or model == "SPOT" else "on-demand",
            private_ip=self._get("instance/network-interfaces/0/ip"),
            region=zone.rsplit("-", 1)[0],
        )

    def notice(self) -> Notice | None:
        try:
            if (self._get("instance/preempted") or "").strip().upper() == "TRUE":
                return Notice("gce-preemption", GCE_PREEMPT_NOTICE_S)
        except requests.RequestException as exc:
            log.warning("GCE metadata notice check failed: %s", exc)
        return None

    def identity_token(self, audience: str) -> str:
        # format=full puts the instance name and zone in the token, which the control plane
        # needs to know which instance is calling.
        return self._must(
            "instance/service-accounts/default/identity",
            {"audience": audience, "format": "full"},
        )


class DevMetadata:
    """The local stack: identity from the config, notices from a file the emulator writes
    (its content, if a number, is the notice window in seconds)."""

    def __init__(self, config: AgentConfig, clock: Clock) -> None:
        self._config = config

    def identity(self) -> InstanceIdentity:
        c = self._config
        token = c.dev_token.get_secret_value() if c.dev_token else ""
        return InstanceIdentity(
            cloud_id=c.dev_instance_id or "",
            identity=Identity(kind=IdentityKind.DEV, document=token),
            instance_type=c.dev_instance_type,
            zone=c.dev_zone,
            capacity_type=c.dev_capacity_type,
            private_ip="127.0.0.1",
        )

    def notice(self) -> Notice | None:
        path: Path | None = self._config.dev_notice_file
        if path is None or not path.exists():
            return None
        try:
            window = float(path.read_text().strip() or AWS_SPOT_NOTICE_S)
        except (OSError, ValueError):
            window = AWS_SPOT_NOTICE_S
        return Notice("dev-interruption", window)

    def identity_token(self, audience: str) -> str:
        raise MetadataError("dev agents use the dev token")


def metadata_source(config: AgentConfig, clock: Clock) -> MetadataSource:
    kind = config.resolved_cloud
    if kind == "ec2":
        return Ec2Metadata(config, clock)
    if kind == "gce":
        return GceMetadata(config, clock)
    return DevMetadata(config, clock)
