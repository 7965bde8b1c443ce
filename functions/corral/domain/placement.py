"""Placement: put pending trials on the free GPUs of registered agents.

Trials go in priority order (lower number first, then first come first served). A trial that
does not fit now does not block smaller ones behind it (backfill): the planner buys capacity
for it, and the reaper keeps the idle agents the planner counted for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.domain.instance import Instance
from corral.domain.packing import Bin, BinIndex
from corral.domain.trial import Placement, Trial, TrialState, sort_key


@dataclass(frozen=True, slots=True)
class Assignment:
    trial: Trial
    placement: Placement


@dataclass(frozen=True, slots=True)
class PlacementResult:
    assignments: tuple[Assignment, ...]
    # Pending trials left over, in scheduling order.
    unplaced: tuple[Trial, ...]
    # Free GPUs left per agent after the assignments (agent id -> GPU indices).
    leftover_free: dict[str, tuple[int, ...]]


def agent_bin(agent: Instance) -> Bin:
    return Bin(
        id=agent.id,
        instance_type=agent.offering.instance_type,
        slots=agent.slots,
        free=list(agent.free_gpus),
        hourly_price=agent.offering.hourly_price,
    )


def place_trials(trials: Iterable[Trial], agents: Sequence[Instance]) -> PlacementResult:
    """Assign pending trials to schedulable agents of their own pool."""
    index_by_pool: dict[str, BinIndex] = {}
    for agent in sorted(agents, key=lambda a: a.id):
        if agent.is_schedulable:
            index_by_pool.setdefault(agent.pool, BinIndex()).add(agent_bin(agent))

    assignments: list[Assignment] = []
    unplaced: list[Trial] = []
    for trial in sorted((t for t in trials if t.state is TrialState.PENDING), key=sort_key):
        index = index_by_pool.get(trial.pool)
        parts = index.place(trial.slots) if index is not None else None
        if parts is None:
            unplaced.append(trial)
        else:
            assignments.append(Assignment(trial, Placement(parts)))

    leftover = {b.id: tuple(b.free) for index in index_by_pool.values() for b in index.bins()}
    return PlacementResult(tuple(assignments), tuple(unplaced), leftover)
