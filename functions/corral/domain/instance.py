"""The instance record: one per cloud instance Corral intends to have, and its state machine."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from corral.domain.offerings import Offering
from corral.domain.state_machine import HistoryEntry, TransitionTable, append_history


class InstanceState(StrEnum):
    QUEUED = "QUEUED"
    REQUESTED = "REQUESTED"
    ALLOCATED = "ALLOCATED"
    IDLE = "IDLE"
    BUSY = "BUSY"
    DRAINING = "DRAINING"
    LOST = "LOST"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ALLOCATION_FAILED = "ALLOCATION_FAILED"


I = InstanceState
_GONE = "the cloud says the instance is gone (terminated, interrupted or never existed)"

INSTANCE_MACHINE: TransitionTable[InstanceState] = TransitionTable.build(
    "instance",
    InstanceState,
    {
        (I.QUEUED, I.REQUESTED): "scale_up wrote its intent and is about to call the cloud",
        (I.QUEUED, I.CANCELLED): "the demand vanished before the launch was attempted",
        (I.REQUESTED, I.ALLOCATED): "the cloud returned an instance for our token",
        (I.REQUESTED, I.QUEUED): "the attempt failed or timed out; retry with a new token",
        (I.REQUESTED, I.ALLOCATION_FAILED): "invalid launch config, or attempts exhausted",
        (I.REQUESTED, I.CANCELLED): "an open spot request was cancelled before it was filled",
        (I.REQUESTED, I.TERMINATED): _GONE,
        (I.ALLOCATED, I.IDLE): "the agent proved its identity and registered its GPUs",
        (I.ALLOCATED, I.TERMINATING): "never registered within max_agent_starting_period",
        (I.ALLOCATED, I.TERMINATED): _GONE,
        (I.IDLE, I.BUSY): "a trial was assigned to the agent",
        (I.IDLE, I.DRAINING): "idle past max_idle_agent_period, or an interruption notice",
        (I.IDLE, I.LOST): "heartbeats stopped",
        (I.IDLE, I.TERMINATED): _GONE,
        (I.BUSY, I.IDLE): "the agent's last trial finished or was moved away",
        (I.BUSY, I.DRAINING): "an interruption notice: finish or checkpoint, take no new work",
        (I.BUSY, I.LOST): "heartbeats stopped",
        (I.BUSY, I.TERMINATED): _GONE,
        (I.DRAINING, I.IDLE): "demand came back before the drained agent was terminated",
        (I.DRAINING, I.TERMINATING): "confirmed empty; terminate",
        (I.DRAINING, I.LOST): "heartbeats stopped while draining",
        (I.DRAINING, I.TERMINATED): _GONE,
        (I.LOST, I.IDLE): "the agent reconnected within the grace period (no trials left)",
        (I.LOST, I.TERMINATING): "the agent did not come back within the grace period",
        (I.LOST, I.TERMINATED): _GONE,
        (I.TERMINATING, I.TERMINATED): "the cloud confirmed the termination",
    },
)

# Derived from the table, never listed by hand.
HOLDS_CLOUD_INSTANCE = INSTANCE_MACHINE.sources(I.TERMINATED)
LIVE_STATES = frozenset(INSTANCE_MACHINE.states) - INSTANCE_MACHINE.terminal
# States where the instance is on its way but not yet usable: reachable from QUEUED before
# the first registration, and still able to register. The planner counts them as capacity
# on its way, or the same demand is launched twice.
STARTING_STATES = frozenset(
    s
    for s in INSTANCE_MACHINE.reachable(I.QUEUED, avoiding=frozenset({I.IDLE}))
    if I.IDLE in INSTANCE_MACHINE.reachable(s)
)
SCHEDULABLE_STATES = frozenset({I.IDLE, I.BUSY})


@dataclass(frozen=True, slots=True)
class Instance:
    """What we know and intend about one instance. Immutable: transitions return a copy."""

    id: str
    pool: str
    offering: Offering
    state: InstanceState
    created_at: float
    version: int = 0
    history: tuple[HistoryEntry, ...] = ()
    attempt: int = 0  # launch attempt; the idempotency token is derived from (id, attempt)
    cloud_id: str | None = None  # EC2 instance id or GCE instance name
    spot_request_id: str | None = None
    requested_at: float | None = None
    launched_at: float | None = None  # when the cloud started billing (best known)
    registered_at: float | None = None
    terminated_at: float | None = None
    idle_since: float | None = None
    # trial id -> GPU indices on this agent. A zero-slot trial holds an empty tuple.
    allocations: tuple[tuple[str, tuple[int, ...]], ...] = ()
    last_error: str | None = None
    interruption_notice_at: float | None = None

    # ---- derived views -------------------------------------------------------------
    @property
    def slots(self) -> int:
        return self.offering.slots

    @property
    def used_gpus(self) -> frozenset[int]:
        return frozenset(g for _, gpus in self.allocations for g in gpus)

    @property
    def free_gpus(self) -> tuple[int, ...]:
        used = self.used_gpus
        return tuple(g for g in range(self.slots) if g not in used)

    @property
    def free_slots(self) -> int:
        return self.slots - len(self.used_gpus)

    @property
    def trial_ids(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.allocations)

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def is_starting(self) -> bool:
        return self.state in STARTING_STATES

    @property
    def is_schedulable(self) -> bool:
        return self.state in SCHEDULABLE_STATES and self.interruption_notice_at is None

    @property
    def launch_token(self) -> str:
        """Deterministic idempotency token for the current attempt (EC2 ClientToken <= 64)."""
        return f"{self.id}-a{self.attempt}"

    def entered_at(self, state: InstanceState) -> float | None:
        """When the record last entered ``state`` (for per-state deadlines)."""
        for entry in reversed(self.history):
            if entry.state == state.value:
                return entry.at
        return None

    # ---- transitions ---------------------------------------------------------------
    def transition(self, target: InstanceState, at: float, reason: str) -> Instance:
        INSTANCE_MACHINE.check(self.state, target)
        changes: dict[str, object] = {}
        if target is I.IDLE:
            changes["idle_since"] = at
        elif target is I.BUSY:
            changes["idle_since"] = None
        if target is I.TERMINATED:
            changes["terminated_at"] = at
        return replace(
            self,
            state=target,
            history=append_history(self.history, HistoryEntry(target.value, at, reason)),
            **changes,  # type: ignore[arg-type]
        )

    def with_allocation(self, trial_id: str, gpus: tuple[int, ...]) -> Instance:
        """Add a trial's GPUs; the caller moves IDLE -> BUSY in the same write."""
        if any(t == trial_id for t, _ in self.allocations):
            raise ValueError(f"trial {trial_id} already allocated on {self.id}")
        clash = set(gpus) & self.used_gpus
        if clash or any(g < 0 or g >= self.slots for g in gpus):
            raise ValueError(f"GPUs {sorted(gpus)} are not free on {self.id}")
        return replace(self, allocations=(*self.allocations, (trial_id, tuple(gpus))))

    def without_allocation(self, trial_id: str) -> Instance:
        return replace(self, allocations=tuple(a for a in self.allocations if a[0] != trial_id))


def new_instance(
    instance_id: str, pool: str, offering: Offering, now: float, reason: str
) -> Instance:
    return Instance(
        id=instance_id,
        pool=pool,
        offering=offering,
        state=I.QUEUED,
        created_at=now,
        history=(HistoryEntry(I.QUEUED.value, now, reason),),
    )
