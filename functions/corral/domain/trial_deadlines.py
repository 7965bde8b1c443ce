"""Deadlines of the trial states an agent must move on: ASSIGNED and STOPPING.

The scheduler decides and the agent acts; if the agent never acts (it never got the order,
refused it, or runs an old version that ignores it), a trial must not sit in ASSIGNED or
STOPPING, holding GPUs that are billed and counted against ``max_instances``, forever:

1. ASSIGNED and not reported by the latest heartbeat of one of its agents, taken well after
   the assignment (``ack_s``): that agent never took the trial -> requeue it.
2. ASSIGNED for longer than ``start_s`` (the image pull and start of the container) ->
   requeue it, whatever the agents say.
3. STOPPING for longer than ``stop_s`` (the agent's stop grace and a few heartbeats) ->
   cancel it: the user asked for it to end, and its GPUs are given back. PREEMPTED (its
   agents checkpoint and stop it after a spot notice or a lost gang member) for longer ->
   requeue it. An agent that
   still reports the container is told to stop it on every heartbeat, and the reaper does
   not terminate an agent that still reports a trial.

Requeued trials resume from their last checkpoint and do not use up ``max_restarts``: the
failure was the infrastructure's. Agents whose heartbeats stopped are the reconciler's
(LOST, then terminated), which also moves their trials.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from corral.domain.records import Heartbeat
from corral.domain.trial import Trial, TrialState


@dataclass(frozen=True, slots=True)
class TrialDeadlines:
    """Seconds. Agents heartbeat every 5 s and stop a container within 30 s by default."""

    ack_s: float = 120.0
    start_s: float = 1800.0
    stop_s: float = 300.0


class OverdueAction(StrEnum):
    REQUEUE = "requeue"
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Overdue:
    trial: Trial
    action: OverdueAction
    reason: str


def overdue_trials(
    trials: Iterable[Trial],
    heartbeats: Mapping[str, Heartbeat],
    now: float,
    deadlines: TrialDeadlines,
) -> list[Overdue]:
    """The ASSIGNED and STOPPING trials past their deadline, with what to do about each.
    ``heartbeats`` holds the latest heartbeat per instance record id."""
    out: list[Overdue] = []
    for trial in trials:
        entered = trial.entered_at(trial.state)
        since = trial.submitted_at if entered is None else entered  # 0.0 is a real time
        age = now - since
        if trial.state is TrialState.ASSIGNED:
            if age > deadlines.start_s:
                reason = f"not started within {deadlines.start_s:.0f}s of its assignment"
                out.append(Overdue(trial, OverdueAction.REQUEUE, reason))
            elif age > deadlines.ack_s:
                refuser = _agent_not_taking(trial, heartbeats, since + deadlines.ack_s / 2)
                if refuser is not None:
                    reason = f"{refuser} did not take it within {deadlines.ack_s:.0f}s"
                    out.append(Overdue(trial, OverdueAction.REQUEUE, reason))
        elif trial.state is TrialState.STOPPING and age > deadlines.stop_s:
            reason = f"stop not confirmed within {deadlines.stop_s:.0f}s; cancelled"
            out.append(Overdue(trial, OverdueAction.CANCEL, reason))
        elif trial.state is TrialState.PREEMPTED and age > deadlines.stop_s:
            reason = f"stop not confirmed within {deadlines.stop_s:.0f}s; requeued"
            out.append(Overdue(trial, OverdueAction.REQUEUE, reason))
    return out


def _agent_not_taking(
    trial: Trial, heartbeats: Mapping[str, Heartbeat], after: float
) -> str | None:
    """An agent of the trial whose heartbeat, taken after ``after``, does not list it."""
    for instance_id in trial.placement.instance_ids if trial.placement else ():
        beat = heartbeats.get(instance_id)
        if beat is None or beat.at < after:
            continue  # silent agents are the reconciler's (LOST)
        if all(report.trial_id != trial.id for report in beat.trials):
            return instance_id
    return None
