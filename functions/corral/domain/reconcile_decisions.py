"""The decisions the reconciler emits, and its settings.

Record decisions carry the record as read; ``apply(now)`` returns the record to write,
conditionally on the read version, so a decision that lost a race simply fails its write
and the next pass decides again. Cloud decisions name a cloud id or spot request that was in
the owned listing (or on a record): the service passes them to the provider, whose calls are
idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from corral.domain.cloud_view import CloudInstance
from corral.domain.instance import Instance, InstanceState

IS = InstanceState


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    """Deadlines of the reconciler, in seconds. Defaults and where they come from:"""

    # A freshly ALLOCATED instance may be missing from a listing for a while (EC2's
    # DescribeInstances is eventually consistent).
    listing_grace_s: float = 60.0
    # An owned instance with no known record may be one whose record is being written;
    # Determined terminates disconnected instances 10 minutes later.
    orphan_grace_s: float = 600.0
    # REQUESTED with nothing to show for it (Ray: 10 minutes to be allocated).
    request_timeout_s: float = 600.0
    # An open spot request that has not filled: give the offering up, try another.
    spot_open_timeout_s: float = 300.0
    # Silent this long, an agent is LOST: its trials are requeued and its instance
    # terminated. The agent stops its trials once out of contact for ``fence_after_s``
    # (``ServiceSettings``, derived from this), and they are gone a stop grace later, so they
    # never run in two places; see docs/reliability.md, "Agent death to requeue".
    heartbeat_timeout_s: float = 90.0
    # Consecutive boot failures that open a pool's circuit breaker (Ray 5, ParallelCluster
    # 10). The service passes it to ``backoff.on_boot_failure``.
    breaker_threshold: int = 5


@dataclass(frozen=True, slots=True)
class RecordDecision:
    """A transition of one record to ``target``."""

    target: ClassVar[InstanceState]
    record: Instance
    reason: str

    def apply(self, now: float) -> Instance:
        return self.record.transition(self.target, now, self.reason)


@dataclass(frozen=True, slots=True)
class MarkTerminated(RecordDecision):
    """The cloud says the instance is gone: any state holding one -> TERMINATED. The service
    moves the trials still allocated on it off its GPUs in the same write (requeued to resume
    from their checkpoint: infrastructure loss, no restart used)."""

    target: ClassVar[InstanceState] = IS.TERMINATED


@dataclass(frozen=True, slots=True)
class Adopt(RecordDecision):
    """A launch whose record write was lost: REQUESTED -> ALLOCATED with the tagged instance."""

    target: ClassVar[InstanceState] = IS.ALLOCATED
    cloud: CloudInstance

    def apply(self, now: float) -> Instance:
        moved = RecordDecision.apply(self, now)
        launched = self.cloud.launched_at
        if self.record.is_warm_start and self.record.requested_at is not None:
            # A cloud may list the instance's creation, not its last start: this run began
            # no earlier than the start was asked for.
            launched = max(launched, self.record.requested_at)
        return replace(
            moved,
            cloud_id=self.cloud.cloud_id,
            launched_at=launched,
            spot_request_id=self.cloud.spot_request_id or moved.spot_request_id,
        )


@dataclass(frozen=True, slots=True)
class Terminate(RecordDecision):
    """-> TERMINATING, then the service terminates ``record.cloud_id``. ``boot_failure``
    feeds the pool's circuit breaker."""

    target: ClassVar[InstanceState] = IS.TERMINATING
    boot_failure: bool = False


@dataclass(frozen=True, slots=True)
class Requeue(RecordDecision):
    """REQUESTED -> QUEUED with a new attempt (a new idempotency token: the old one may have
    created something, and reusing it would return that). ``counts_as_failure`` is False for
    capacity/price refusals, which are not the record's fault."""

    target: ClassVar[InstanceState] = IS.QUEUED
    counts_as_failure: bool = True
    # Offering key to remember as refused (a spot request that closed for capacity).
    mark_unavailable: str | None = None

    def apply(self, now: float) -> Instance:
        return replace(
            RecordDecision.apply(self, now),
            attempt=self.record.attempt + 1,
            launch_failures=self.record.launch_failures + int(self.counts_as_failure),
            cloud_id=None,
            spot_request_id=None,
            requested_at=None,
            last_error=self.reason,
        )


@dataclass(frozen=True, slots=True)
class MarkStopped(RecordDecision):
    """STOPPING -> STOPPED: the cloud lists the instance stopped (the stop call's answer
    was lost, or it was still stopping when the reaper asked)."""

    target: ClassVar[InstanceState] = IS.STOPPED


@dataclass(frozen=True, slots=True)
class FailAllocation(RecordDecision):
    """REQUESTED -> ALLOCATION_FAILED: attempts exhausted."""

    target: ClassVar[InstanceState] = IS.ALLOCATION_FAILED

    def apply(self, now: float) -> Instance:
        return replace(RecordDecision.apply(self, now), last_error=self.reason)


@dataclass(frozen=True, slots=True)
class MarkLost(RecordDecision):
    """Heartbeats stopped: -> LOST. The service requeues the agent's trials and terminates
    the instance in the same pass: a LOST instance is fenced (``domain.agent_fence``), its
    agent can never take work again, so there is nothing to wait for."""

    target: ClassVar[InstanceState] = IS.LOST


@dataclass(frozen=True, slots=True)
class TerminateCloud:
    """Terminate an owned cloud instance without a record transition (orphans, strays,
    stopped instances, and re-issuing a TERMINATING record's call)."""

    cloud_id: str
    pool: str
    record_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class StopCloud:
    """Stop an owned cloud instance without a record transition: a warm-pool record whose
    instance is still (or again) running, e.g. started behind Corral's back."""

    cloud_id: str
    pool: str
    record_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class CancelSpotRequest:
    """Cancel an owned spot request; ``mark_unavailable`` is the offering key to remember as
    refused (capacity or price), if any."""

    request_id: str
    pool: str
    record_id: str | None
    reason: str
    mark_unavailable: str | None = None


Decision = (
    MarkTerminated
    | Adopt
    | Terminate
    | Requeue
    | FailAllocation
    | MarkLost
    | MarkStopped
    | TerminateCloud
    | StopCloud
    | CancelSpotRequest
)


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    decisions: tuple[Decision, ...] = ()

    @property
    def boot_failures_by_pool(self) -> Mapping[str, int]:
        counts: dict[str, int] = {}
        for d in self.decisions:
            if isinstance(d, Terminate) and d.boot_failure:
                counts[d.record.pool] = counts.get(d.record.pool, 0) + 1
        return counts
