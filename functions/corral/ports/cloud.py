"""The CloudProvider port: launch, list what we own, terminate, manage spot requests.

Contract (held by the simulated cloud and the EC2 / Compute Engine providers):
- ``launch`` carries a deterministic idempotency token; the same token never yields a second
  instance. Every instance and spot request it creates carries the ownership pair, the pool
  and the record id. It raises ``LaunchError`` with a classified error.
- ``list_owned`` returns only resources carrying the ownership pair; nothing else is ever
  described, tagged or terminated. ``terminate`` and ``cancel_spot_requests`` silently skip
  ids that are not ours or already gone (both are idempotent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from corral.domain.cloud_view import (
    CloudInstance,
    CloudState,
    SpotRequest,
    SpotRequestState,
)
from corral.domain.offerings import Offering


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    record_id: str
    pool: str
    offering: Offering
    token: str  # deterministic per (record, attempt): EC2 ClientToken, GCE requestId


@dataclass(frozen=True, slots=True)
class LaunchResult:
    """What the cloud gave back: an instance at once, or an open spot request to watch."""

    cloud_id: str | None
    spot_request_id: str | None = None
    launched_at: float | None = None


class CloudProvider(Protocol):
    def launch(self, request: LaunchRequest) -> LaunchResult: ...

    def list_owned(self) -> list[CloudInstance]: ...

    def list_spot_requests(self) -> list[SpotRequest]: ...

    def terminate(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        """Terminate those of ``cloud_ids`` that are ours; idempotent. Returns the ids the
        cloud confirms are terminating or gone: ours, terminated by this call or already on
        their way out. Any other id (unknown, foreign, or a call that failed part-way) is
        not confirmed: the caller keeps its record TERMINATING and the reconciler settles it
        from the next listing."""
        ...

    def cancel_spot_requests(self, request_ids: Sequence[str]) -> None: ...


__all__ = [
    "CloudInstance",
    "CloudProvider",
    "CloudState",
    "LaunchRequest",
    "LaunchResult",
    "SpotRequest",
    "SpotRequestState",
]
