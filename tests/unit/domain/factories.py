"""Small builders of plausible domain records for tests.

``make_instance(state=...)`` walks the instance machine from QUEUED to ``state`` with real
transitions, so the history, ``entered_at`` and the derived fields (cloud id, launch and
registration times, ``idle_since``, ``terminated_at``) are consistent. Each step of the walk
is ``step_s`` seconds after the previous one, and the last state is entered at
``entered_at``. Any field can be overridden afterwards with keyword arguments.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from corral.domain.instance import Instance, InstanceState, new_instance
from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.domain.records import Heartbeat, PoolState, TrialReport
from corral.domain.trial import Placement, Trial, TrialState, new_trial
from corral.ports.cloud import CloudInstance, CloudState, SpotRequest, SpotRequestState

IS = InstanceState
T = TrialState

POOL = "gpu"
NOW = 1_000_000.0

_ids = itertools.count(1)

_REGISTERED = (IS.REQUESTED, IS.ALLOCATED, IS.IDLE)
INSTANCE_PATHS: dict[InstanceState, tuple[InstanceState, ...]] = {
    IS.QUEUED: (),
    IS.REQUESTED: (IS.REQUESTED,),
    IS.ALLOCATED: (IS.REQUESTED, IS.ALLOCATED),
    IS.IDLE: _REGISTERED,
    IS.BUSY: (*_REGISTERED, IS.BUSY),
    IS.DRAINING: (*_REGISTERED, IS.DRAINING),
    IS.LOST: (*_REGISTERED, IS.LOST),
    IS.TERMINATING: (*_REGISTERED, IS.DRAINING, IS.TERMINATING),
    IS.TERMINATED: (*_REGISTERED, IS.DRAINING, IS.TERMINATING, IS.TERMINATED),
    IS.CANCELLED: (IS.CANCELLED,),
    IS.ALLOCATION_FAILED: (IS.REQUESTED, IS.ALLOCATION_FAILED),
    IS.STOPPING: (*_REGISTERED, IS.DRAINING, IS.STOPPING),
    IS.STOPPED: (*_REGISTERED, IS.DRAINING, IS.STOPPING, IS.STOPPED),
}

TRIAL_PATHS: dict[TrialState, tuple[TrialState, ...]] = {
    T.PENDING: (),
    T.ASSIGNED: (T.ASSIGNED,),
    T.RUNNING: (T.ASSIGNED, T.RUNNING),
    T.COMPLETED: (T.ASSIGNED, T.RUNNING, T.COMPLETED),
    T.FAILED: (T.ASSIGNED, T.RUNNING, T.FAILED),
    T.PREEMPTED: (T.ASSIGNED, T.RUNNING, T.PREEMPTED),
    T.STOPPING: (T.ASSIGNED, T.RUNNING, T.STOPPING),
    T.CANCELLED: (T.STOPPING, T.CANCELLED),
}


def next_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


def make_offering(
    instance_type: str = "g5.xlarge",
    *,
    location: str = "us-east-1a",
    capacity_type: CapacityType = CapacityType.ON_DEMAND,
    slots: int = 1,
    hourly_price: float = 1.0,
) -> Offering:
    return Offering(instance_type, location, capacity_type, slots, hourly_price)


def make_pool(*offerings: Offering, name: str = POOL, **settings: Any) -> StaticPool:
    """A StaticPool with ``make_offering()`` when no offering is given."""
    return StaticPool(name=name, offering_list=offerings or (make_offering(),), **settings)


def make_pool_state(pool: str = POOL, **fields: Any) -> PoolState:
    return replace(PoolState(pool), **fields)


def make_instance(
    state: InstanceState = IS.IDLE,
    *,
    id: str | None = None,
    pool: str = POOL,
    offering: Offering | None = None,
    entered_at: float = NOW,
    step_s: float = 30.0,
    trials: tuple[str, ...] | None = None,
    **overrides: Any,
) -> Instance:
    """An instance record in ``state`` with a plausible history.

    A BUSY instance holds one trial on GPU 0 unless ``trials`` says otherwise (one GPU per
    trial, in order). Records past REQUESTED get a cloud id ``i-<id>``.
    """
    record_id = id or next_id("inst")
    path = INSTANCE_PATHS[state]
    at = entered_at - step_s * len(path)
    if offering is None:
        offering = make_offering(slots=max(1, len(trials or ())))
    inst = new_instance(record_id, pool, offering, at, "planned")
    for target in path:
        at += step_s
        if target is IS.REQUESTED:
            inst = replace(inst, requested_at=at)
        if target is IS.ALLOCATED:
            inst = replace(inst, cloud_id=f"i-{record_id}", launched_at=at)
        if target is IS.IDLE:
            inst = replace(inst, registered_at=at)
        if target is IS.BUSY:
            for gpu, trial_id in enumerate(trials if trials is not None else ("trial-0",)):
                inst = inst.with_allocation(trial_id, (gpu,))
        inst = inst.transition(target, at, f"test: {target.value.lower()}")
    return replace(inst, **overrides) if overrides else inst


def make_trial(
    state: TrialState = T.PENDING,
    *,
    id: str | None = None,
    experiment_id: str = "exp-1",
    pool: str = POOL,
    slots: int = 1,
    entered_at: float = NOW,
    step_s: float = 30.0,
    placement: Placement | None = None,
    **overrides: Any,
) -> Trial:
    """A trial in ``state``; assigned states get ``placement`` (default: GPUs 0.. on one
    agent ``agent-1``)."""
    trial_id = id or next_id("trial")
    path = TRIAL_PATHS[state]
    at = entered_at - step_s * len(path)
    trial = new_trial(trial_id, experiment_id, pool, slots, at)
    where = placement or Placement((("agent-1", tuple(range(slots))),))
    for target in path:
        at += step_s
        if target is T.ASSIGNED:
            trial = trial.assigned(where, at)
        else:
            trial = trial.transition(target, at, f"test: {target.value.lower()}")
    return replace(trial, **overrides) if overrides else trial


def make_heartbeat(
    instance: Instance | str, at: float = NOW, *, trials: tuple[str, ...] = ()
) -> Heartbeat:
    instance_id = instance if isinstance(instance, str) else instance.id
    reports = tuple(TrialReport(t, "running") for t in trials)
    return Heartbeat(instance_id, at, trials=reports)


def make_cloud_instance(
    record: Instance | None = None,
    *,
    cloud_id: str | None = None,
    pool: str | None = None,
    record_id: str | None = None,
    tagged: bool = True,
    state: CloudState = CloudState.RUNNING,
    launched_at: float | None = None,
    spot_request_id: str | None = None,
) -> CloudInstance:
    """The owned listing's view of ``record``'s instance, or of an instance with no record.
    ``tagged=False`` drops the record-id tag (someone stripped it, or a spot instance not
    tagged yet)."""
    offering = record.offering if record is not None else make_offering()
    return CloudInstance(
        cloud_id=cloud_id or (record.cloud_id if record and record.cloud_id else next_id("i")),
        pool=pool or (record.pool if record is not None else POOL),
        record_id=(record_id or (record.id if record is not None else None)) if tagged else None,
        instance_type=offering.instance_type,
        location=offering.location,
        is_spot=offering.is_spot,
        state=state,
        launched_at=launched_at
        if launched_at is not None
        else (record.launched_at if record and record.launched_at else NOW),
        spot_request_id=spot_request_id,
    )


def make_spot_request(
    record: Instance | None = None,
    *,
    request_id: str | None = None,
    state: SpotRequestState = SpotRequestState.OPEN,
    status_code: str = "pending-fulfillment",
    created_at: float = NOW,
    pool: str = POOL,
    instance_id: str | None = None,
) -> SpotRequest:
    return SpotRequest(
        request_id=request_id or next_id("sir"),
        pool=record.pool if record is not None else pool,
        record_id=record.id if record is not None else None,
        state=state,
        status_code=status_code,
        created_at=created_at,
        instance_id=instance_id,
    )
