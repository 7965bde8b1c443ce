"""The trial record (one GPU job of an experiment) and its state machine."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from corral.domain.state_machine import HistoryEntry, TransitionTable, append_history


class TrialState(StrEnum):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


T = TrialState
_STOP = "a user killed the experiment or trial"

TRIAL_MACHINE: TransitionTable[TrialState] = TransitionTable.build(
    "trial",
    TrialState,
    {
        (T.PENDING, T.ASSIGNED): "the scheduler placed it on agents' free GPUs",
        (T.PENDING, T.FAILED): "no pool can ever run it any more (the config changed)",
        (T.PENDING, T.CANCELLED): "killed before it was placed: nothing to stop",
        (T.PENDING, T.STOPPING): _STOP,
        (T.ASSIGNED, T.RUNNING): "the agent started the container",
        (T.ASSIGNED, T.PREEMPTED): "the instance was lost or interrupted before it started",
        (T.ASSIGNED, T.PENDING): "the agent could not start it (image pull, ...), restarts left",
        (T.ASSIGNED, T.FAILED): "the agent could not start it, restarts exhausted",
        (T.ASSIGNED, T.STOPPING): _STOP,
        (T.RUNNING, T.COMPLETED): "the container exited 0",
        (T.RUNNING, T.FAILED): "user error and max_restarts exhausted",
        (T.RUNNING, T.PENDING): "user error with restarts left: run again from the checkpoint",
        (T.RUNNING, T.PREEMPTED): "the instance was lost or interrupted (not a user error)",
        (T.RUNNING, T.STOPPING): _STOP,
        (T.PREEMPTED, T.PENDING): "its agents stopped it (or are gone): requeued to resume",
        (T.PREEMPTED, T.COMPLETED): "it finished (exit code 0) before it was stopped",
        (T.PREEMPTED, T.STOPPING): _STOP,
        (T.STOPPING, T.CANCELLED): "the agent confirmed the containers are gone",
    },
)

ACTIVE_STATES = frozenset(TRIAL_MACHINE.states) - TRIAL_MACHINE.terminal
# States in which a trial holds GPUs on agents: the ones an agent can be told to stop.
# PREEMPTED holds the GPUs of the agents still running it (checkpointing after a spot
# notice, or the surviving ranks of a gang that lost one) until they confirm it stopped:
# placing it again before then would run it twice at once.
HOLDS_GPUS = frozenset({T.ASSIGNED, T.RUNNING, T.PREEMPTED, T.STOPPING})


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a trial runs: per agent, the GPU indices it got. Rank order = tuple order."""

    parts: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(i for i, _ in self.parts)

    @property
    def slots(self) -> int:
        return sum(len(g) for _, g in self.parts)


@dataclass(frozen=True, slots=True)
class Trial:
    id: str
    experiment_id: str
    pool: str
    slots: int
    state: TrialState
    submitted_at: float
    priority: int = 42  # Determined's convention: lower number runs first
    version: int = 0
    history: tuple[HistoryEntry, ...] = ()
    placement: Placement | None = None
    restarts: int = 0  # user-error restarts used; infrastructure loss never counts
    max_restarts: int = 5
    preemptions: int = 0
    latest_checkpoint: str | None = None
    pending_reason: str | None = None
    exit_code: int | None = None
    cost_usd: float = 0.0
    gpu_seconds: float = 0.0
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # Every agent the trial was ever placed on (logs and costs refer back to them).
    ran_on: tuple[str, ...] = ()
    # Seq of the last log line of its latest run, as its agent reported with the terminal
    # state (-1: no output; None: unknown): a reader follows the logs up to it.
    log_end_seq: int | None = None

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    def entered_at(self, state: TrialState) -> float | None:
        """When the trial last entered ``state`` (for per-state deadlines and costs)."""
        for entry in reversed(self.history):
            if entry.state == state.value:
                return entry.at
        return None

    def transition(self, target: TrialState, at: float, reason: str) -> Trial:
        TRIAL_MACHINE.check(self.state, target)
        placement = self.placement if target in HOLDS_GPUS else None
        pending_reason = self.pending_reason if target is T.PENDING else None
        return replace(
            self,
            state=target,
            placement=placement,
            pending_reason=pending_reason,
            history=append_history(self.history, HistoryEntry(target.value, at, reason)),
        )

    def assigned(self, placement: Placement, at: float) -> Trial:
        if placement.slots != self.slots:
            raise ValueError(f"placement has {placement.slots} GPUs, trial needs {self.slots}")
        moved = self.transition(T.ASSIGNED, at, f"placed on {', '.join(placement.instance_ids)}")
        seen = dict.fromkeys((*self.ran_on, *placement.instance_ids))
        return replace(moved, placement=placement, ran_on=tuple(seen))


def sort_key(trial: Trial) -> tuple[int, float, str]:
    """Scheduling order: priority (lower first), then first come first served."""
    return (trial.priority, trial.submitted_at, trial.id)


def new_trial(
    trial_id: str,
    experiment_id: str,
    pool: str,
    slots: int,
    now: float,
    priority: int = 42,
    max_restarts: int = 5,
    hyperparameters: dict[str, Any] | None = None,
) -> Trial:
    return Trial(
        id=trial_id,
        experiment_id=experiment_id,
        pool=pool,
        slots=slots,
        state=T.PENDING,
        submitted_at=now,
        priority=priority,
        max_restarts=max_restarts,
        hyperparameters=dict(hyperparameters or {}),
        history=(HistoryEntry(T.PENDING.value, now, "submitted"),),
    )
