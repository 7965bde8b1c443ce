"""The CloudProvider port: launch, list what we own, stop and start again (a warm pool),
terminate, manage spot requests.

Contract (held by the simulated cloud and the EC2 / Compute Engine providers):
- ``launch`` carries a deterministic idempotency token; the same token never yields a second
  instance. Every instance and spot request it creates carries the ownership pair, the pool
  and the record id. It raises ``LaunchError`` with a classified error.
- ``list_owned`` returns only resources carrying the ownership pair; nothing else is ever
  described, tagged, stopped, started or terminated. ``terminate``, ``stop`` and
  ``cancel_spot_requests`` silently skip ids that are not ours or already gone (all three are
  idempotent); ``start`` refuses them with a ``LaunchError``.
- ``stop`` keeps the instance's disks (and so the agent image's cache and the trial images
  it pulled) and its tags; billing for compute ends. ``start`` brings the same instance back
  with a fresh boot: the agent registers again as it does after a launch.
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
    # The pool keeps a warm pool: the instance must be stoppable and startable again. On EC2
    # a spot instance then comes from a persistent request that stops on interruption (a
    # one-time request's instance cannot be stopped); the provider cancels that request
    # before it terminates the instance, so EC2 never relaunches it.
    stoppable: bool = False


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

    def stop(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        """Stop those of ``cloud_ids`` that are ours, keeping their disks; idempotent.
        Returns the ids the cloud confirms stopping or stopped. Any other id (unknown,
        foreign, gone, or a call that failed part-way) is not confirmed: the caller keeps
        its record STOPPING and the reconciler settles it from the next listing."""
        ...

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        """Start one stopped instance of ours again (``token``: deterministic per record and
        attempt, for clouds that take one). Idempotent: an instance already pending or
        running is confirmed as it is. Returns its id and when billing started again.
        Raises ``LaunchError``: CAPACITY (or PRICE) when the cloud cannot start it now (it
        stays stopped), THROTTLED while it is still stopping (retry soon), INVALID_CONFIG
        when it is not ours, gone, or cannot be started at all."""
        ...


__all__ = [
    "CloudInstance",
    "CloudProvider",
    "CloudState",
    "LaunchRequest",
    "LaunchResult",
    "SpotRequest",
    "SpotRequestState",
]
