"""The instance record: one per cloud instance Corral intends to have, and its state machine."""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    STOPPING = "STOPPING"  # a warm pool keeps it: stop requested, disks kept
    STOPPED = "STOPPED"  # in the warm pool: no compute billed, started again for demand
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ALLOCATION_FAILED = "ALLOCATION_FAILED"


IS = InstanceState
_GONE = "the cloud says the instance is gone (terminated, interrupted or never existed)"

INSTANCE_MACHINE: TransitionTable[InstanceState] = TransitionTable.build(
    "instance",
    InstanceState,
    {
        (IS.QUEUED, IS.REQUESTED): "scale_up wrote its intent and is about to call the cloud",
        (IS.QUEUED, IS.CANCELLED): "the demand vanished before the launch was attempted",
        (IS.QUEUED, IS.STOPPED): "a warm start no longer wanted, or its offering has no capacity",
        (IS.QUEUED, IS.TERMINATED): _GONE,
        (IS.REQUESTED, IS.ALLOCATED): "the cloud returned an instance for our token",
        (IS.REQUESTED, IS.QUEUED): "the attempt failed or timed out; retry with a new token",
        (IS.REQUESTED, IS.ALLOCATION_FAILED): "invalid launch config, or attempts exhausted",
        (IS.REQUESTED, IS.CANCELLED): "an open spot request was cancelled before it was filled",
        (IS.REQUESTED, IS.TERMINATED): _GONE,
        (IS.REQUESTED, IS.STOPPED): "the cloud could not start the warm instance now (capacity)",
        (IS.REQUESTED, IS.TERMINATING): "the cloud refused to start the warm instance: given up",
        (IS.ALLOCATED, IS.IDLE): "the agent proved its identity and registered its GPUs",
        (IS.ALLOCATED, IS.TERMINATING): "never registered within max_agent_starting_period",
        (IS.ALLOCATED, IS.TERMINATED): _GONE,
        (IS.IDLE, IS.BUSY): "a trial was assigned to the agent",
        (IS.IDLE, IS.DRAINING): "idle past max_idle_agent_period, or an interruption notice",
        (IS.IDLE, IS.LOST): "heartbeats stopped",
        (IS.IDLE, IS.TERMINATED): _GONE,
        (IS.BUSY, IS.IDLE): "the agent's last trial finished or was moved away",
        (IS.BUSY, IS.DRAINING): "an interruption notice: finish or checkpoint, take no new work",
        (IS.BUSY, IS.LOST): "heartbeats stopped",
        (IS.BUSY, IS.TERMINATED): _GONE,
        (IS.DRAINING, IS.IDLE): "demand came back before the drained agent was terminated",
        (IS.DRAINING, IS.TERMINATING): "confirmed empty; terminate",
        (IS.DRAINING, IS.STOPPING): "confirmed empty; stopped into the pool's warm pool",
        (IS.DRAINING, IS.LOST): "heartbeats stopped while draining",
        (IS.DRAINING, IS.TERMINATED): _GONE,
        (IS.LOST, IS.TERMINATING): "at once: its agent is fenced and its trials run elsewhere",
        (IS.LOST, IS.TERMINATED): _GONE,
        (IS.TERMINATING, IS.TERMINATED): "the cloud confirmed the termination",
        (IS.STOPPING, IS.STOPPED): "the cloud confirmed the stop",
        (IS.STOPPING, IS.TERMINATING): "the cloud would not stop it",
        (IS.STOPPING, IS.TERMINATED): _GONE,
        (IS.STOPPED, IS.QUEUED): "started again for waiting demand (a warm start)",
        (IS.STOPPED, IS.TERMINATING): "stopped past max_stopped_period, or over the warm pool size",
        (IS.STOPPED, IS.TERMINATED): _GONE,
    },
)

# Derived from the table, never listed by hand.
HOLDS_CLOUD_INSTANCE = INSTANCE_MACHINE.sources(IS.TERMINATED)
LIVE_STATES = frozenset(INSTANCE_MACHINE.states) - INSTANCE_MACHINE.terminal
# A warm pool's instances: stopped (or being stopped), disks kept. Live records (they hold a
# cloud instance) that are not capacity: no GPUs, no compute billed, not counted against
# max_instances until a warm start takes one back to QUEUED.
PARKED_STATES = frozenset({IS.STOPPING, IS.STOPPED})
# States where the instance is on its way but not yet usable: reachable from QUEUED before
# the first registration, and still able to register. The planner counts them as capacity
# on its way, or the same demand is launched twice. (A stopped instance is not on its way:
# only the warm start that takes it back to QUEUED is.)
STARTING_STATES = frozenset(
    s
    for s in INSTANCE_MACHINE.reachable(IS.QUEUED, avoiding=frozenset({IS.IDLE, IS.STOPPED}))
    if IS.IDLE in INSTANCE_MACHINE.reachable(s)
)
SCHEDULABLE_STATES = frozenset({IS.IDLE, IS.BUSY})


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
    # Failed attempts that use up launch_error_retries (capacity refusals do not).
    launch_failures: int = 0
    cloud_id: str | None = None  # EC2 instance id or GCE instance name
    spot_request_id: str | None = None
    requested_at: float | None = None
    launched_at: float | None = None  # when the cloud started billing (best known)
    registered_at: float | None = None
    terminated_at: float | None = None
    idle_since: float | None = None
    # trial id -> GPU indices on this agent. A zero-slot trial holds an empty tuple.
    allocations: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # Demand this instance was launched for: (trial id, GPUs) pairs. The planner counts the
    # GPUs as taken while those trials still wait, so planning twice never launches twice.
    planned_for: tuple[tuple[str, int], ...] = ()
    last_error: str | None = None
    address: str | None = None  # the agent's private IP (rendezvous for multi-agent trials)
    interruption_notice_at: float | None = None
    # When consolidation drained it to move its trials elsewhere: like an interruption
    # notice, such an agent never takes work again (taking it back would undo the move).
    consolidated_at: float | None = None
    # When the schedule pass last sent a QUEUED record's launch message again (at most once
    # per redrive period: the scale-up queue does not dedupe), or, when in the future, when
    # the delayed retry of a deferred launch is due (``services/shared/launch_retry.py``).
    redriven_at: float | None = None
    stopped_at: float | None = None  # when it last entered the warm pool (STOPPING)
    # Launched to be stoppable (its pool had a warm pool): only such an instance is stopped
    # into it (EC2 cannot stop one of a one-time spot request).
    stoppable: bool = False
    # Compute spend of its runs before the last stop (a warm pool's instance runs again).
    closed_usd: float = 0.0
    # Its latest run ended in the warm pool and its spend was closed then; set on STOPPING,
    # cleared on ALLOCATED (a warm start's new run begins).
    run_closed: bool = False
    # When its cloud instance's disks began to bill: its first launch. Unlike ``launched_at``
    # it survives warm starts (the disks are kept while stopped). Maintained by
    # ``__post_init__``, so no transition has to remember it.
    disk_since: float | None = None

    def __post_init__(self) -> None:
        if self.cloud_id is None:
            since = None  # no cloud instance (yet, or any more after a failed attempt)
        elif self.disk_since is None:
            since = self._first_launch()
        else:
            since = self.disk_since
        if since != self.disk_since:
            object.__setattr__(self, "disk_since", since)

    def _first_launch(self) -> float | None:
        """The earliest launch the record knows: its launch time, or its first ALLOCATED
        entry (a record stored before ``disk_since`` existed may be on a later run, or
        between runs of a warm start with no launch time)."""
        allocated = [e.at for e in self.history if e.state == InstanceState.ALLOCATED.value]
        known = [t for t in (self.launched_at, min(allocated, default=None)) if t is not None]
        return min(known, default=None)

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
    def is_parked(self) -> bool:
        """In the warm pool (stopped or stopping): held, but no capacity."""
        return self.state in PARKED_STATES

    @property
    def holds_capacity(self) -> bool:
        """Live and not parked: what counts against max_instances and is billed for compute."""
        return self.state in LIVE_STATES and self.state not in PARKED_STATES

    @property
    def is_warm_start(self) -> bool:
        """A stopped instance being started again: QUEUED or REQUESTED with its cloud id
        (a fresh launch learns its cloud id only when it leaves REQUESTED)."""
        return self.cloud_id is not None and self.state in (IS.QUEUED, IS.REQUESTED)

    @property
    def drained_for_idleness(self) -> bool:
        """Drained only because it idled (or to make room): the agent may be taken back for
        new work. One drained for an interruption notice or by consolidation never is."""
        return (
            self.state is IS.DRAINING
            and self.interruption_notice_at is None
            and self.consolidated_at is None
        )

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
        if target is IS.IDLE:
            changes["idle_since"] = at
        elif target is IS.BUSY:
            changes["idle_since"] = None
        if target is IS.TERMINATED:
            changes["terminated_at"] = at
        elif target is IS.STOPPING:
            # Its run ends here; the caller closes its spend (``closed_usd``, the pool's).
            changes["stopped_at"] = at
            changes["run_closed"] = True
        elif target is IS.ALLOCATED:
            changes["run_closed"] = False  # a run begins (a launch, or a warm start's)
        elif self.state is IS.STOPPING and target is IS.TERMINATING:
            # The stop never took: the instance ran on after its spend was closed at the
            # stop; bill that stretch as a run of its own.
            changes["run_closed"] = False
            changes["launched_at"] = self.stopped_at
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

    def warm_start(
        self, at: float, planned_for: tuple[tuple[str, int], ...], reason: str
    ) -> Instance:
        """STOPPED -> QUEUED for waiting demand: a new attempt (its own start token) of the
        same cloud instance, which boots and registers again like a fresh launch."""
        started = self.transition(IS.QUEUED, at, reason)
        return replace(
            started,
            attempt=self.attempt + 1,
            planned_for=planned_for,
            requested_at=None,
            launched_at=None,
            registered_at=None,
            idle_since=None,
            address=None,
            consolidated_at=None,
            interruption_notice_at=None,
            redriven_at=None,
            last_error=None,
        )


def new_instance(
    instance_id: str, pool: str, offering: Offering, now: float, reason: str
) -> Instance:
    return Instance(
        id=instance_id,
        pool=pool,
        offering=offering,
        state=IS.QUEUED,
        created_at=now,
        history=(HistoryEntry(IS.QUEUED.value, now, reason),),
    )
