"""The reconciler's rules, one test each, and its safety properties."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.domain.instance import INSTANCE_MACHINE, Instance, InstanceState
from corral.domain.offerings import CapacityType
from corral.domain.policy import StaticPool
from corral.domain.reconcile_decisions import (
    Adopt,
    CancelSpotRequest,
    Decision,
    FailAllocation,
    MarkLost,
    MarkTerminated,
    ReconcilePlan,
    ReconcileSettings,
    RecordDecision,
    Requeue,
    StopCloud,
    Terminate,
    TerminateCloud,
)
from corral.domain.reconciler import reconcile
from corral.domain.records import Heartbeat
from corral.ports.cloud import CloudInstance, CloudState, SpotRequest, SpotRequestState

from .factories import (
    NOW,
    POOL,
    make_cloud_instance,
    make_heartbeat,
    make_instance,
    make_offering,
    make_pool,
    make_spot_request,
)

IS = InstanceState
S = ReconcileSettings()
GPU = make_pool(starting_deadline_s=1200.0, launch_error_retries=2)
POOLS: dict[str, StaticPool] = {POOL: GPU}
SPOT = make_offering("g5.xlarge", capacity_type=CapacityType.SPOT)


def run(
    records: Sequence[Instance],
    cloud: Sequence[CloudInstance] = (),
    spot: Sequence[SpotRequest] = (),
    heartbeats: Mapping[str, Heartbeat] | None = None,
    now: float = NOW,
) -> ReconcilePlan:
    return reconcile(POOLS, records, cloud, spot, heartbeats or {}, now, S)


def cloud_ids_to_terminate(plan: ReconcilePlan) -> set[str]:
    """Every cloud instance the plan's decisions lead the service to terminate."""
    ids = {d.cloud_id for d in plan.decisions if isinstance(d, TerminateCloud)}
    return ids | {
        d.record.cloud_id for d in plan.decisions if isinstance(d, Terminate) and d.record.cloud_id
    }


def only(plan: ReconcilePlan) -> Decision:
    assert len(plan.decisions) == 1, plan.decisions
    return plan.decisions[0]


def listed(record: Instance, state: CloudState = CloudState.RUNNING) -> CloudInstance:
    return make_cloud_instance(record, state=state)


def alive(record: Instance) -> dict[str, Heartbeat]:
    return {record.id: make_heartbeat(record, NOW)}


# ---- rule 1 --------------------------------------------------------------------------------


def test_record_whose_instance_vanished_is_marked_terminated_and_its_trials_requeued() -> None:
    busy = make_instance(IS.BUSY, trials=("t1", "t2"), entered_at=NOW - 600)
    decision = only(run([busy]))
    assert isinstance(decision, MarkTerminated)
    moved = decision.apply(NOW)
    # The trials stay allocated on the record: the service moves each off in the same write.
    assert moved.state is IS.TERMINATED and moved.trial_ids == ("t1", "t2")
    assert moved.terminated_at == NOW


def test_record_whose_instance_is_listed_terminated_is_marked_terminated() -> None:
    fresh = make_instance(IS.ALLOCATED, entered_at=NOW - 5)  # inside the listing grace
    decision = only(run([fresh], [listed(fresh, CloudState.TERMINATED)]))
    assert isinstance(decision, MarkTerminated)


def test_freshly_allocated_record_missing_from_the_listing_is_left_alone() -> None:
    fresh = make_instance(IS.ALLOCATED, entered_at=NOW - S.listing_grace_s + 1)
    assert run([fresh]).decisions == ()
    stale = make_instance(IS.ALLOCATED, entered_at=NOW - S.listing_grace_s - 1)
    assert isinstance(only(run([stale])), MarkTerminated)


# ---- rule 2 --------------------------------------------------------------------------------


def test_requested_record_without_cloud_id_adopts_its_tagged_instance() -> None:
    record = make_instance(IS.REQUESTED, entered_at=NOW - 20)
    instance = make_cloud_instance(record, cloud_id="i-new", launched_at=NOW - 15)
    decision = only(run([record], [instance]))
    assert isinstance(decision, Adopt)
    moved = decision.apply(NOW)
    assert (moved.state, moved.cloud_id, moved.launched_at) == (IS.ALLOCATED, "i-new", NOW - 15)


def test_untagged_spot_instance_is_adopted_through_its_spot_request() -> None:
    record = make_instance(IS.REQUESTED, offering=SPOT, entered_at=NOW - 20)
    request = make_spot_request(record, state=SpotRequestState.ACTIVE, status_code="fulfilled")
    instance = make_cloud_instance(
        record, cloud_id="i-spot", tagged=False, spot_request_id=request.request_id
    )
    decision = only(
        run([replace(record, spot_request_id=request.request_id)], [instance], [request])
    )
    assert isinstance(decision, Adopt) and decision.cloud.cloud_id == "i-spot"


# ---- rule 3 --------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [IS.CANCELLED, IS.ALLOCATION_FAILED, IS.TERMINATED])
def test_instance_whose_record_is_terminal_is_terminated_at_once(state: InstanceState) -> None:
    record = make_instance(state)
    instance = make_cloud_instance(record, cloud_id="i-late", launched_at=NOW - 1)
    decision = only(run([record], [instance]))
    assert isinstance(decision, TerminateCloud) and decision.cloud_id == "i-late"


def test_orphan_without_record_id_is_terminated_only_after_the_orphan_grace() -> None:
    young = make_cloud_instance(launched_at=NOW - S.orphan_grace_s + 1)
    old = make_cloud_instance(launched_at=NOW - S.orphan_grace_s)
    decision = only(run([], [young, old]))
    assert isinstance(decision, TerminateCloud) and decision.cloud_id == old.cloud_id
    assert "no record id" in decision.reason


def test_orphan_naming_an_unknown_record_is_terminated_only_after_the_orphan_grace() -> None:
    young = make_cloud_instance(record_id="ghost", launched_at=NOW - 10)
    old = make_cloud_instance(record_id="ghost2", launched_at=NOW - S.orphan_grace_s - 1)
    decision = only(run([], [young, old]))
    assert isinstance(decision, TerminateCloud) and decision.cloud_id == old.cloud_id


def test_stray_instance_of_an_earlier_attempt_is_terminated_after_the_orphan_grace() -> None:
    record = make_instance(IS.IDLE)
    stray = make_cloud_instance(record, cloud_id="i-dup", launched_at=NOW - S.orphan_grace_s)
    decision = only(run([record], [listed(record), stray], heartbeats=alive(record)))
    assert isinstance(decision, TerminateCloud) and decision.cloud_id == "i-dup"
    assert "stray" in decision.reason


# ---- rule 4 --------------------------------------------------------------------------------


def test_allocated_not_registered_by_the_starting_deadline_is_terminated_as_boot_failure() -> None:
    late = make_instance(IS.ALLOCATED, entered_at=NOW - GPU.starting_deadline_s - 1)
    on_time = make_instance(IS.ALLOCATED, entered_at=NOW - GPU.starting_deadline_s + 1)
    plan = run([late, on_time], [listed(late), listed(on_time)])
    decision = only(plan)
    assert isinstance(decision, Terminate) and decision.record.id == late.id
    assert decision.boot_failure
    assert plan.boot_failures_by_pool == {POOL: 1}
    assert cloud_ids_to_terminate(plan) == {late.cloud_id}


# ---- rule 5 --------------------------------------------------------------------------------


def test_requested_with_nothing_listed_past_the_request_timeout_is_requeued() -> None:
    record = make_instance(IS.REQUESTED, entered_at=NOW - S.request_timeout_s - 1)
    assert run([make_instance(IS.REQUESTED, entered_at=NOW - 10)]).decisions == ()
    decision = only(run([record]))
    assert isinstance(decision, Requeue) and decision.counts_as_failure
    moved = decision.apply(NOW)
    assert (moved.state, moved.attempt) == (IS.QUEUED, 1)
    assert moved.launch_token != record.launch_token


def test_requested_timeout_fails_the_record_once_its_retries_are_used() -> None:
    # launch_error_retries=2: three failing attempts are made, then the record fails.
    last = make_instance(
        IS.REQUESTED, entered_at=NOW - S.request_timeout_s - 1, attempt=5, launch_failures=2
    )
    decision = only(run([last]))
    assert isinstance(decision, FailAllocation)
    assert decision.apply(NOW).state is IS.ALLOCATION_FAILED


def test_capacity_requeues_do_not_use_up_the_retries() -> None:
    # Many tokens used (attempt 5) but no counted failure: the timeout requeues again.
    record = make_instance(
        IS.REQUESTED, entered_at=NOW - S.request_timeout_s - 1, attempt=5, launch_failures=0
    )
    decision = only(run([record]))
    assert isinstance(decision, Requeue)
    moved = decision.apply(NOW)
    assert (moved.attempt, moved.launch_failures) == (6, 1)


# ---- rule 6 --------------------------------------------------------------------------------


def _spot_record(request: SpotRequest | None = None) -> Instance:
    record = make_instance(IS.REQUESTED, id="sr-rec", offering=SPOT, entered_at=NOW - 400)
    return replace(record, spot_request_id=request.request_id) if request else record


def test_open_spot_request_past_its_timeout_is_cancelled_and_the_record_requeued() -> None:
    request = make_spot_request(_spot_record(), created_at=NOW - S.spot_open_timeout_s - 1)
    plan = run([_spot_record(request)], spot=[request])
    cancel, requeue = plan.decisions
    assert isinstance(cancel, CancelSpotRequest) and cancel.mark_unavailable == SPOT.key
    assert isinstance(requeue, Requeue) and not requeue.counts_as_failure


def test_open_spot_request_refused_for_capacity_is_cancelled_at_once() -> None:
    request = make_spot_request(
        _spot_record(), created_at=NOW - 5, status_code="capacity-not-available"
    )
    plan = run([_spot_record(request)], spot=[request])
    assert {type(d) for d in plan.decisions} == {CancelSpotRequest, Requeue}
    young = replace(request, status_code="pending-fulfillment")
    assert run([_spot_record(young)], spot=[young]).decisions == ()


def test_open_spot_request_whose_record_is_terminal_is_cancelled() -> None:
    record = make_instance(IS.CANCELLED, id="gone")
    request = make_spot_request(record, created_at=NOW - 5)
    decision = only(run([record], spot=[request]))
    assert isinstance(decision, CancelSpotRequest) and decision.mark_unavailable is None


def test_closed_spot_request_that_left_nothing_requeues_the_record() -> None:
    request = make_spot_request(
        _spot_record(), state=SpotRequestState.CLOSED, status_code="capacity-not-available"
    )
    decision = only(run([_spot_record(request)], spot=[request]))
    assert isinstance(decision, Requeue) and decision.mark_unavailable == SPOT.key


def test_spot_request_cancelled_while_its_instance_started_gets_the_instance_terminated() -> None:
    record = make_instance(IS.CANCELLED, id="gone")
    request = make_spot_request(record, state=SpotRequestState.CANCELLED)
    instance = make_cloud_instance(record, cloud_id="i-x", spot_request_id=request.request_id)
    decision = only(run([record], [instance], [request]))
    assert isinstance(decision, TerminateCloud) and decision.cloud_id == "i-x"


# ---- rule 7 --------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [IS.IDLE, IS.BUSY, IS.DRAINING])
def test_agent_silent_past_the_heartbeat_timeout_is_marked_lost(state: InstanceState) -> None:
    record = make_instance(state, entered_at=NOW - 1000)
    stale = {record.id: make_heartbeat(record, NOW - S.heartbeat_timeout_s - 1)}
    decision = only(run([record], [listed(record)], heartbeats=stale))
    assert isinstance(decision, MarkLost)
    fresh = {record.id: make_heartbeat(record, NOW - 5)}
    assert run([record], [listed(record)], heartbeats=fresh).decisions == ()


def test_agent_without_heartbeats_is_timed_from_its_registration() -> None:
    record = make_instance(IS.IDLE, entered_at=NOW - S.heartbeat_timeout_s - 1)
    assert isinstance(only(run([record], [listed(record)])), MarkLost)


@pytest.mark.parametrize("beat", [None, "fresh", "fresh with a trial"])
def test_lost_is_terminated_at_once_whatever_it_says(beat: str | None) -> None:
    # The service terminates a LOST instance in the pass that marks it; one left LOST (that
    # pass died in between) goes on the next pass. A LOST instance is fenced: heartbeats are
    # refused, so none can bring it back (there used to be a 300 s grace and a Recover).
    record = make_instance(IS.LOST, entered_at=NOW - 1)
    trials = ("t1",) if beat == "fresh with a trial" else ()
    beats = {record.id: make_heartbeat(record, NOW, trials=trials)} if beat else {}
    decision = only(run([record], [listed(record)], heartbeats=beats))
    assert isinstance(decision, Terminate) and not decision.boot_failure


# ---- rules 8 and 9 -------------------------------------------------------------------------


@pytest.mark.parametrize("cloud_state", [CloudState.STOPPED, CloudState.STOPPING])
def test_stopped_instances_are_terminated(cloud_state: CloudState) -> None:
    record = make_instance(IS.IDLE)
    orphan = make_cloud_instance(launched_at=NOW - 1, state=cloud_state)  # even a young one
    plan = run([record], [listed(record, cloud_state), orphan], heartbeats=alive(record))
    assert all(isinstance(d, TerminateCloud) for d in plan.decisions)
    assert cloud_ids_to_terminate(plan) == {record.cloud_id, orphan.cloud_id}


def test_terminating_record_still_listed_is_terminated_again() -> None:
    record = make_instance(IS.TERMINATING)
    decision = only(run([record], [listed(record)]))
    assert isinstance(decision, TerminateCloud) and decision.cloud_id == record.cloud_id


def test_terminating_record_whose_instance_is_gone_is_marked_terminated() -> None:
    record = make_instance(IS.TERMINATING)
    assert isinstance(only(run([record], [listed(record, CloudState.TERMINATED)])), MarkTerminated)
    assert isinstance(only(run([record])), MarkTerminated)


# ---- ownership -----------------------------------------------------------------------------


def test_instances_requests_and_records_of_unknown_pools_are_ignored() -> None:
    foreign = make_cloud_instance(pool="not-ours", launched_at=NOW - 10_000)
    request = make_spot_request(pool="not-ours", created_at=NOW - 10_000)
    record = make_instance(IS.IDLE, pool="not-ours", entered_at=NOW - 10_000)
    assert run([record], [foreign], [request]).decisions == ()


# ---- properties ----------------------------------------------------------------------------

_RECORD_STATES = list(InstanceState)
_CLOUD_STATES = list(CloudState)


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[list[Instance], list[CloudInstance], list[SpotRequest], dict[str, Heartbeat], float]:
    records: list[Instance] = []
    cloud: list[CloudInstance] = []
    requests: list[SpotRequest] = []
    beats: dict[str, Heartbeat] = {}
    ages = st.floats(0, 5000)
    for n in range(draw(st.integers(0, 8))):
        state = draw(st.sampled_from(_RECORD_STATES))
        pool = draw(st.sampled_from([POOL, POOL, "foreign"]))
        record = make_instance(
            state,
            id=f"r{n}",
            pool=pool,
            entered_at=NOW - draw(ages),
            attempt=draw(st.integers(0, 3)),
        )
        if draw(st.booleans()):
            request = make_spot_request(
                record,
                request_id=f"sir-{n}",
                state=draw(st.sampled_from(list(SpotRequestState))),
                status_code=draw(st.sampled_from(["capacity-not-available", "pending"])),
                created_at=NOW - draw(ages),
            )
            requests.append(request)
            if draw(st.booleans()):
                record = replace(record, spot_request_id=request.request_id)
        records.append(record)
        if record.cloud_id and draw(st.booleans()):
            cloud.append(make_cloud_instance(record, state=draw(st.sampled_from(_CLOUD_STATES))))
        if draw(st.booleans()):  # a launch whose record write was lost, or a stray
            cloud.append(
                make_cloud_instance(record, cloud_id=f"i-extra-{n}", launched_at=NOW - draw(ages))
            )
        if draw(st.booleans()):
            beats[record.id] = make_heartbeat(record, NOW - draw(ages))
    for n in range(draw(st.integers(0, 4))):  # orphans, and instances of other pools
        cloud.append(
            make_cloud_instance(
                cloud_id=f"i-orphan-{n}",
                pool=draw(st.sampled_from([POOL, "foreign"])),
                record_id=draw(st.sampled_from([None, "unknown", "r0", "r1"])),
                state=draw(st.sampled_from(_CLOUD_STATES)),
                launched_at=NOW - draw(ages),
            )
        )
    return records, cloud, requests, beats, NOW


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_property_reconciler_touches_only_owned_ids_with_allowed_transitions(
    world: tuple[
        list[Instance], list[CloudInstance], list[SpotRequest], dict[str, Heartbeat], float
    ],
) -> None:
    records, cloud, requests, beats, now = world
    plan = reconcile(POOLS, records, cloud, requests, beats, now, S)
    owned_listed = {c.cloud_id for c in cloud if c.pool in POOLS}
    record_ids = {r.cloud_id for r in records if r.cloud_id}
    foreign = {c.cloud_id for c in cloud if c.pool not in POOLS}
    owned_requests = {s.request_id for s in requests if s.pool in POOLS}
    seen_records: set[str] = set()
    for decision in plan.decisions:
        if isinstance(decision, TerminateCloud | StopCloud):
            assert decision.cloud_id in owned_listed | record_ids
            assert decision.cloud_id not in foreign - owned_listed
        elif isinstance(decision, CancelSpotRequest):
            assert decision.request_id in owned_requests
        else:
            assert isinstance(decision, RecordDecision)
            record = decision.record
            assert record.pool in POOLS
            assert INSTANCE_MACHINE.allows(record.state, decision.target)
            assert record.id not in seen_records  # one record decision per record per pass
            seen_records.add(record.id)
            assert decision.apply(now).state is decision.target
            if isinstance(decision, Adopt):
                assert decision.cloud.cloud_id in owned_listed
    for cloud_id in cloud_ids_to_terminate(plan):
        assert cloud_id in owned_listed
