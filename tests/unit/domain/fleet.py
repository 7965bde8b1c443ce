"""Builders for scheduler and planner tests: agents with GPUs in use, pending trials, pools."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.instance import Instance, InstanceState, new_instance
from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.domain.trial import Trial, new_trial

SPOT = CapacityType.SPOT
ON_DEMAND = CapacityType.ON_DEMAND

_PATH_TO = {
    InstanceState.QUEUED: (),
    InstanceState.REQUESTED: (InstanceState.REQUESTED,),
    InstanceState.ALLOCATED: (InstanceState.REQUESTED, InstanceState.ALLOCATED),
    InstanceState.IDLE: (InstanceState.REQUESTED, InstanceState.ALLOCATED, InstanceState.IDLE),
}


def offering(
    instance_type: str = "g5.xlarge",
    slots: int = 1,
    price: float = 1.0,
    capacity: CapacityType = SPOT,
    location: str = "subnet-a",
) -> Offering:
    return Offering(instance_type, location, capacity, slots, price)


def agent(
    agent_id: str,
    slots: int = 4,
    *,
    used: int = 0,
    pool: str = "gpu",
    state: InstanceState = InstanceState.IDLE,
    instance_type: str | None = None,
    price: float | None = None,
    at: float = 0.0,
) -> Instance:
    """A record in ``state`` (QUEUED..IDLE, or BUSY with ``used`` GPUs taken)."""
    off = offering(instance_type or f"gpu{slots}", slots, price if price is not None else slots)
    inst = new_instance(agent_id, pool, off, at, "planned")
    for step in _PATH_TO.get(state, _PATH_TO[InstanceState.IDLE]):
        inst = inst.transition(step, at, "test")
    if state is InstanceState.REQUESTED:
        inst = replace(inst, attempt=1)
    if used:
        inst = inst.with_allocation(f"busy-{agent_id}", tuple(range(used)))
        inst = inst.transition(InstanceState.BUSY, at, "work")
    if state not in _PATH_TO and state is not InstanceState.BUSY:
        inst = inst.transition(state, at, "test")
    return inst


def pending(
    trial_id: str, slots: int = 1, *, pool: str = "gpu", priority: int = 42, at: float = 0.0
) -> Trial:
    return new_trial(trial_id, "exp-1", pool, slots, at, priority=priority)


def pool(*offerings: Offering, name: str = "gpu", **settings: object) -> StaticPool:
    return StaticPool(name=name, offering_list=tuple(offerings), **settings)  # type: ignore[arg-type]
