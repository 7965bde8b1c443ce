"""Every pair of states of both machines: allowed exactly when the architecture says so."""

from __future__ import annotations

import itertools

import pytest

from corral.domain.instance import (
    HOLDS_CLOUD_INSTANCE,
    INSTANCE_MACHINE,
    LIVE_STATES,
    PARKED_STATES,
    STARTING_STATES,
    InstanceState,
    new_instance,
)
from corral.domain.offerings import CapacityType, Offering
from corral.domain.state_machine import IllegalTransition
from corral.domain.trial import ACTIVE_STATES, TRIAL_MACHINE, TrialState, new_trial

IS = InstanceState
T = TrialState

# Written from the state machines in docs/architecture.md, independently of the tables under
# test.
EXPECTED_INSTANCE_EDGES = {
    (IS.QUEUED, IS.REQUESTED),
    (IS.QUEUED, IS.CANCELLED),
    (IS.REQUESTED, IS.ALLOCATED),
    (IS.REQUESTED, IS.QUEUED),
    (IS.REQUESTED, IS.ALLOCATION_FAILED),
    (IS.REQUESTED, IS.CANCELLED),
    (IS.ALLOCATED, IS.IDLE),
    (IS.ALLOCATED, IS.TERMINATING),
    (IS.IDLE, IS.BUSY),
    (IS.BUSY, IS.IDLE),
    (IS.IDLE, IS.DRAINING),
    (IS.BUSY, IS.DRAINING),
    (IS.DRAINING, IS.IDLE),
    (IS.DRAINING, IS.TERMINATING),
    (IS.IDLE, IS.LOST),
    (IS.BUSY, IS.LOST),
    (IS.DRAINING, IS.LOST),
    (IS.LOST, IS.TERMINATING),
    (IS.TERMINATING, IS.TERMINATED),
    # any state holding an instance -> TERMINATED (the cloud says it is gone)
    (IS.REQUESTED, IS.TERMINATED),
    (IS.ALLOCATED, IS.TERMINATED),
    (IS.IDLE, IS.TERMINATED),
    (IS.BUSY, IS.TERMINATED),
    (IS.DRAINING, IS.TERMINATED),
    (IS.LOST, IS.TERMINATED),
    # the warm pool: stopped instead of terminated, started again for demand
    (IS.DRAINING, IS.STOPPING),
    (IS.STOPPING, IS.STOPPED),
    (IS.STOPPING, IS.TERMINATING),
    (IS.STOPPING, IS.TERMINATED),
    (IS.STOPPED, IS.QUEUED),
    (IS.STOPPED, IS.TERMINATING),
    (IS.STOPPED, IS.TERMINATED),
    (IS.QUEUED, IS.STOPPED),
    (IS.QUEUED, IS.TERMINATED),
    (IS.REQUESTED, IS.STOPPED),
    (IS.REQUESTED, IS.TERMINATING),
}

EXPECTED_TRIAL_EDGES = {
    (T.PENDING, T.ASSIGNED),
    (T.ASSIGNED, T.RUNNING),
    (T.RUNNING, T.COMPLETED),
    (T.RUNNING, T.FAILED),
    (T.ASSIGNED, T.PREEMPTED),
    (T.RUNNING, T.PREEMPTED),
    (T.PREEMPTED, T.PENDING),
    (T.PREEMPTED, T.COMPLETED),
    (T.RUNNING, T.PENDING),
    (T.ASSIGNED, T.PENDING),
    (T.ASSIGNED, T.FAILED),
    (T.PENDING, T.FAILED),
    (T.PENDING, T.CANCELLED),
    (T.PENDING, T.STOPPING),
    (T.ASSIGNED, T.STOPPING),
    (T.RUNNING, T.STOPPING),
    (T.PREEMPTED, T.STOPPING),
    (T.STOPPING, T.CANCELLED),
}

OFFERING = Offering("g5.xlarge", "subnet-a", CapacityType.SPOT, 1, 0.5)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(IS, IS)))
def test_instance_pair(source: InstanceState, target: InstanceState) -> None:
    expected = (source, target) in EXPECTED_INSTANCE_EDGES
    assert INSTANCE_MACHINE.allows(source, target) is expected
    record = new_instance("inst-1", "p", OFFERING, 0.0, "test")
    record = record.__class__(**{**_fields(record), "state": source})
    if expected:
        moved = record.transition(target, 10.0, "why")
        assert moved.state is target
        assert moved.history[-1].state == target.value
        assert moved.history[-1].at == 10.0
        assert moved.version == record.version  # only the store bumps versions
    else:
        with pytest.raises(IllegalTransition):
            record.transition(target, 10.0, "why")


@pytest.mark.parametrize(("source", "target"), list(itertools.product(T, T)))
def test_trial_pair(source: TrialState, target: TrialState) -> None:
    expected = (source, target) in EXPECTED_TRIAL_EDGES
    assert TRIAL_MACHINE.allows(source, target) is expected
    trial = new_trial("t-1", "e-1", "p", 1, 0.0)
    trial = trial.__class__(**{**_fields(trial), "state": source})
    if expected:
        assert trial.transition(target, 5.0, "why").state is target
    else:
        with pytest.raises(IllegalTransition):
            trial.transition(target, 5.0, "why")


def test_every_edge_has_a_reason() -> None:
    for machine in (INSTANCE_MACHINE, TRIAL_MACHINE):
        assert all(reason.strip() for reason in machine.edges.values())


def test_derived_instance_sets() -> None:
    assert INSTANCE_MACHINE.terminal == {IS.TERMINATED, IS.CANCELLED, IS.ALLOCATION_FAILED}
    assert {IS.QUEUED, IS.REQUESTED, IS.ALLOCATED} == STARTING_STATES
    assert set(IS) - {IS.TERMINATED, IS.CANCELLED, IS.ALLOCATION_FAILED} == LIVE_STATES
    # QUEUED holds one when it is a warm start (the stopped instance it starts again).
    assert {
        IS.QUEUED,
        IS.REQUESTED,
        IS.ALLOCATED,
        IS.IDLE,
        IS.BUSY,
        IS.DRAINING,
        IS.LOST,
        IS.TERMINATING,
        IS.STOPPING,
        IS.STOPPED,
    } == HOLDS_CLOUD_INSTANCE
    assert {IS.STOPPING, IS.STOPPED} == PARKED_STATES


def test_derived_trial_sets() -> None:
    assert TRIAL_MACHINE.terminal == {T.COMPLETED, T.FAILED, T.CANCELLED}
    assert set(T) - {T.COMPLETED, T.FAILED, T.CANCELLED} == ACTIVE_STATES


def test_idle_since_follows_transitions() -> None:
    rec = new_instance("inst-1", "p", OFFERING, 0.0, "planned")
    rec = rec.transition(IS.REQUESTED, 1, "a").transition(IS.ALLOCATED, 2, "b")
    idle = rec.transition(IS.IDLE, 3, "registered")
    assert idle.idle_since == 3
    busy = idle.transition(IS.BUSY, 4, "work")
    assert busy.idle_since is None
    assert busy.transition(IS.IDLE, 9, "done").idle_since == 9
    assert busy.entered_at(IS.ALLOCATED) == 2


def test_leaving_a_gpu_state_drops_the_placement_and_pending_reason() -> None:
    from corral.domain.trial import Placement

    trial = new_trial("t-1", "e-1", "p", 2, 0.0)
    assigned = trial.assigned(Placement((("i-1", (0, 1)),)), 1.0)
    assert assigned.placement is not None
    pre = assigned.transition(T.RUNNING, 2, "up").transition(T.PREEMPTED, 3, "lost")
    assert pre.placement == assigned.placement  # held until its agents stopped it
    assert pre.transition(T.PENDING, 4, "stopped").placement is None
    with pytest.raises(ValueError, match="needs 2"):
        trial.assigned(Placement((("i-1", (0,)),)), 1.0)


def test_history_is_bounded_but_keeps_creation() -> None:
    rec = new_instance("inst-1", "p", OFFERING, 0.0, "planned")
    rec = rec.transition(IS.REQUESTED, 1, "a").transition(IS.ALLOCATED, 2, "b")
    rec = rec.transition(IS.IDLE, 3, "c")
    for n in range(50):
        rec = rec.transition(IS.BUSY, 10 + n, "w").transition(IS.IDLE, 10.5 + n, "d")
    assert len(rec.history) == 20
    assert rec.history[0].state == IS.QUEUED.value
    assert rec.history[-1].at == 59.5


def _fields(obj: object) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
