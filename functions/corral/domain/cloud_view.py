"""What the cloud says it has: provider-neutral views of instances and spot requests.

Values only; the CloudProvider port produces them and the reconciler reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CloudState(StrEnum):
    """Provider-neutral instance lifecycle."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATING = "terminating"  # shutting-down (EC2), STOPPING for deletion (GCE)
    TERMINATED = "terminated"

    @property
    def is_gone(self) -> bool:
        return self in (CloudState.TERMINATING, CloudState.TERMINATED)


class SpotRequestState(StrEnum):
    OPEN = "open"
    ACTIVE = "active"  # fulfilled: an instance exists
    CLOSED = "closed"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class CloudInstance:
    cloud_id: str
    pool: str
    record_id: str | None  # from our record tag; None if someone stripped it
    instance_type: str
    location: str
    is_spot: bool
    state: CloudState
    launched_at: float
    spot_request_id: str | None = None
    private_ip: str | None = None


@dataclass(frozen=True, slots=True)
class SpotRequest:
    request_id: str
    pool: str
    record_id: str | None
    state: SpotRequestState
    status_code: str  # the cloud's status, e.g. capacity-not-available, price-too-low
    created_at: float
    instance_id: str | None = None
