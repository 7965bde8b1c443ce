"""One emulated instance's metadata service (IMDSv2) on loopback: the "hardware" an EC2
instance's agent and botocore read, at the address the emulator gives the boot in
``AWS_EC2_METADATA_SERVICE_ENDPOINT``.

What it answers, as EC2 does: ``PUT /latest/api/token`` (every other call needs the token in
``X-aws-ec2-metadata-token``, else 401), the instance's id, type, zone, lifecycle and
address, the identity document and a signature (``pkcs7``: an HMAC of the document under the
emulator's key; nothing verifies it, as the API does not verify EC2's), the credentials of
the role of the instance profile (none without a profile: such an agent cannot sign, as on
EC2), ``spot/instance-action`` while an interruption notice stands (``corral dev
interrupt``), ``events/recommendations/rebalance`` when one was made, and the instance's
tags when the launch enabled ``InstanceMetadataTags``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from corral.local.credentials import CredentialStore

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
MAX_TOKEN_TTL_S = 21_600


def iso(epoch: float) -> str:
    """EC2's timestamps: whole seconds, rounded up (a notice never claims less time than the
    emulator gives: it terminates at or after the moment named)."""
    return datetime.fromtimestamp(math.ceil(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class InstanceFacts:
    """What the metadata service knows of its instance (from DescribeInstances)."""

    instance_id: str
    instance_type: str
    zone: str
    region: str
    account: str
    image_id: str
    spot: bool
    private_ip: str
    launched_at: str
    role: str | None  # the instance profile's role; None: no profile
    tags: dict[str, str] | None  # None: InstanceMetadataTags disabled
    notice_file: Path  # exists while a spot interruption notice stands (its text: window s)
    rebalance_file: Path  # exists once a rebalance recommendation was made
    signing_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def document(self) -> str:
        return json.dumps(
            {
                "accountId": self.account,
                "architecture": "x86_64",
                "availabilityZone": self.zone,
                "imageId": self.image_id,
                "instanceId": self.instance_id,
                "instanceType": self.instance_type,
                "pendingTime": self.launched_at,
                "privateIp": self.private_ip,
                "region": self.region,
                "version": "2017-09-30",
            },
            indent=2,
        )


class MetadataService:
    def __init__(
        self,
        facts: InstanceFacts,
        credentials: CredentialStore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.facts = facts
        self._credentials = credentials
        self._clock = clock
        self._tokens: dict[str, float] = {}  # token -> expiry (epoch)
        self._server = _Server(("127.0.0.1", 0), self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"imds-{facts.instance_id}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- the answers (status, body); None body: 404 -----------------------------------
    def new_token(self, ttl: str | None) -> tuple[int, str]:
        try:
            seconds = int(ttl or "")
        except ValueError:
            return 400, "missing or bad " + TTL_HEADER
        if not 1 <= seconds <= MAX_TOKEN_TTL_S:
            return 400, f"{TTL_HEADER} must be 1 to {MAX_TOKEN_TTL_S}"
        token = secrets.token_urlsafe(32)
        self._tokens[token] = self._clock() + seconds
        return 200, token

    def valid(self, token: str | None) -> bool:
        expiry = self._tokens.get(token or "")
        return expiry is not None and expiry > self._clock()

    def get(self, path: str) -> str | None:
        f = self.facts
        fixed = {
            "meta-data/instance-id": f.instance_id,
            "meta-data/instance-type": f.instance_type,
            "meta-data/placement/availability-zone": f.zone,
            "meta-data/placement/region": f.region,
            "meta-data/instance-life-cycle": "spot" if f.spot else "on-demand",
            "meta-data/local-ipv4": f.private_ip,
            "meta-data/ami-id": f.image_id,
            "dynamic/instance-identity/document": f.document(),
            "dynamic/instance-identity/pkcs7": self._signature(),
        }
        if path in fixed:
            return fixed[path]
        if path == "meta-data/spot/instance-action":
            return self._instance_action()
        if path == "meta-data/events/recommendations/rebalance":
            if not f.rebalance_file.exists():
                return None
            made = f.rebalance_file.stat().st_mtime
            return json.dumps({"noticeTime": iso(made)})
        if path.startswith("meta-data/iam/"):
            return self._iam(path.removeprefix("meta-data/iam/"))
        if path.startswith("meta-data/tags/instance") and f.tags is not None:
            key = path.removeprefix("meta-data/tags/instance").strip("/")
            if not key:
                return "\n".join(sorted(f.tags))
            return f.tags.get(key)
        return None

    def _signature(self) -> str:
        mac = hmac.new(self.facts.signing_key, self.facts.document().encode(), hashlib.sha256)
        return base64.b64encode(mac.digest()).decode()

    def _instance_action(self) -> str | None:
        notice = self.facts.notice_file
        try:
            window = float(notice.read_text().strip() or "120")
            at = notice.stat().st_mtime + window
        except (OSError, ValueError):
            return None
        return json.dumps({"action": "terminate", "time": iso(at)})

    def _iam(self, rest: str) -> str | None:
        role = self.facts.role
        if role is None:
            return None
        if rest == "security-credentials/":
            return role
        if rest == "info":
            return json.dumps(
                {
                    "Code": "Success",
                    "InstanceProfileArn": f"arn:aws:iam::{self.facts.account}:instance-profile/"
                    + role,
                }
            )
        if rest != f"security-credentials/{role}":
            return None
        creds = self._credentials.for_instance(role, self.facts.instance_id)
        return json.dumps(
            {
                "Code": "Success",
                "LastUpdated": iso(creds.issued_at),
                "Type": "AWS-HMAC",
                "AccessKeyId": creds.access_key_id,
                "SecretAccessKey": creds.secret_access_key,
                "Token": creds.token,
                "Expiration": iso(creds.expires_at),
            }
        )


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _reply(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/latest/api/token":
            self._reply(404, "Not Found")
            return
        self._reply(*self.server.service.new_token(self.headers.get(TTL_HEADER)))

    def do_GET(self) -> None:
        service = self.server.service
        if not self.path.startswith("/latest/"):
            self._reply(404, "Not Found")
            return
        if not service.valid(self.headers.get(TOKEN_HEADER)):
            self._reply(401, "Unauthorized")  # IMDSv2 only: the launches require tokens
            return
        body = service.get(self.path.removeprefix("/latest/"))
        if body is None:
            self._reply(404, "Not Found")
        else:
            self._reply(200, body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("imds %s: %s", self.server.service.facts.instance_id, format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: MetadataService) -> None:
        super().__init__(address, _Handler)
        self.service = service
