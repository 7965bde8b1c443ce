"""Stored records besides instances and trials: experiments, per-pool state, events,
heartbeats and log lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from corral.domain.offerings import CapacityMemory


class ExperimentState(StrEnum):
    """Derived from the experiment's trials and its kill flag, never stored on its own."""

    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


@dataclass(frozen=True, slots=True)
class Experiment:
    id: str
    name: str
    pool: str
    submitted_at: float
    config: dict[str, Any]  # the validated experiment config, as submitted (JSON-ready)
    trial_ids: tuple[str, ...]
    is_command: bool = False
    # Who submitted it: the API's principal name (``corral.domain.access``); None on
    # records written before owners were recorded (only admins may change those).
    owner: str | None = None
    killed_at: float | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the control plane remembers about one pool between invocations.

    Timers live here (and on records), never in a function's memory, so a cold start or a
    restart never resets a backoff or a breaker (one of Determined's weaknesses).
    """

    pool: str
    version: int = 0
    capacity: CapacityMemory = field(default_factory=CapacityMemory)
    # Pool-wide launch backoff after quota/permission errors.
    backoff_until: float = 0.0
    backoff_failures: int = 0
    backoff_reason: str | None = None
    # Circuit breaker: consecutive instances that never registered.
    boot_failures: int = 0
    breaker_open_since: float | None = None
    breaker_reason: str | None = None
    # Spend of instances already terminated this month (UTC), so the budget gate never has
    # to read terminal records back: month-to-date = this + live instances' cost this month.
    spend_month_start: float = 0.0
    closed_spend_usd: float = 0.0


class EventKind(StrEnum):
    LAUNCH_PLANNED = "launch_planned"
    LAUNCH_REQUESTED = "launch_requested"
    LAUNCH_FAILED = "launch_failed"
    LAUNCH_CANCELLED = "launch_cancelled"
    OFFERING_UNAVAILABLE = "offering_unavailable"
    POOL_BACKOFF = "pool_backoff"
    BREAKER_OPEN = "breaker_open"
    BREAKER_RESET = "breaker_reset"  # an admin said the cause is fixed
    BUDGET_EXHAUSTED = "budget_exhausted"
    AGENT_REGISTERED = "agent_registered"
    AGENT_LOST = "agent_lost"
    AGENT_DRAINING = "agent_draining"
    AGENT_UNDRAINED = "agent_undrained"  # taken back from draining: demand came back
    INSTANCE_TERMINATING = "instance_terminating"
    INSTANCE_TERMINATED = "instance_terminated"
    INSTANCE_STOPPED = "instance_stopped"  # into the warm pool
    INSTANCE_ADOPTED = "instance_adopted"
    ORPHAN_TERMINATED = "orphan_terminated"
    SPOT_INTERRUPTION = "spot_interruption"
    SPOT_REQUEST_CANCELLED = "spot_request_cancelled"
    TRIAL_ASSIGNED = "trial_assigned"
    TRIAL_STATE = "trial_state"
    TRIAL_REQUEUED = "trial_requeued"
    EXPERIMENT_SUBMITTED = "experiment_submitted"
    EXPERIMENT_KILLED = "experiment_killed"


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the event log: every launch, termination and pending reason explained."""

    at: float
    kind: EventKind
    message: str
    pool: str | None = None
    instance_id: str | None = None
    trial_id: str | None = None
    experiment_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TrialReport:
    """An agent's view of one trial, carried in a heartbeat."""

    trial_id: str
    state: str  # the agent's own words: starting, running, exited, checkpointing, stopped
    exit_code: int | None = None
    latest_checkpoint: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """An observation, not a transition: written without bumping the instance's version so
    it never makes a scheduler's or reaper's conditional write fail."""

    instance_id: str
    at: float
    trials: tuple[TrialReport, ...] = ()
    gpu_utilization: tuple[float, ...] = ()
    gpu_memory_used_mib: tuple[float, ...] = ()
    draining: bool = False


@dataclass(frozen=True, slots=True)
class LogLine:
    trial_id: str
    seq: int
    at: float
    line: str
    stream: str = "stdout"
