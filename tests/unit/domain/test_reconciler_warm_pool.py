"""Reconciler rule 10: warm-pool records (STOPPING, STOPPED) and warm starts of them are
settled from the listing, and a stopped instance a record keeps is never terminated."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from corral.domain.cost import billed_interval
from corral.domain.instance import Instance, InstanceState
from corral.domain.reconcile_decisions import (
    Adopt,
    Decision,
    MarkStopped,
    MarkTerminated,
    ReconcilePlan,
    ReconcileSettings,
    StopCloud,
    Terminate,
    TerminateCloud,
)
from corral.domain.reconciler import reconcile
from corral.ports.cloud import CloudInstance, CloudState

from .factories import NOW, POOL, make_cloud_instance, make_instance, make_pool

IS = InstanceState
CS = CloudState
S = ReconcileSettings()
POOLS = {POOL: make_pool(warm_pool_size=2)}


def run(
    records: Sequence[Instance], cloud: Sequence[CloudInstance], now: float = NOW
) -> ReconcilePlan:
    return reconcile(POOLS, records, cloud, (), {}, now, S)


def only(plan: ReconcilePlan) -> Decision:
    assert len(plan.decisions) == 1, plan.decisions
    return plan.decisions[0]


def listed(record: Instance, state: CloudState, launched_at: float | None = None) -> CloudInstance:
    return make_cloud_instance(record, state=state, launched_at=launched_at)


def warm_start(at: float = NOW, stopped_for: float = 3600.0) -> Instance:
    """A stopped record taken back to QUEUED for a trial (the schedule pass's warm start)."""
    parked = make_instance(IS.STOPPED, id="w", entered_at=at - stopped_for)
    return parked.warm_start(at, (("t1", 1),), "warm start for t1")


def requested(at: float = NOW) -> Instance:
    queued = warm_start(at)
    return replace(queued.transition(IS.REQUESTED, at, "starting again"), requested_at=at)


def terminated_ids(plan: ReconcilePlan) -> set[str]:
    return {d.cloud_id for d in plan.decisions if isinstance(d, TerminateCloud)}


# ---- STOPPING -------------------------------------------------------------------------------


def test_stopping_and_listed_stopped_is_marked_stopped() -> None:
    record = make_instance(IS.STOPPING, id="s")
    decision = only(run([record], [listed(record, CS.STOPPED)]))
    assert isinstance(decision, MarkStopped)
    assert decision.apply(NOW).state is IS.STOPPED


def test_stopping_and_still_running_is_stopped_again() -> None:
    record = make_instance(IS.STOPPING, id="s")
    decision = only(run([record], [listed(record, CS.RUNNING)]))
    assert isinstance(decision, StopCloud)
    assert (decision.cloud_id, decision.record_id) == (record.cloud_id, "s")


def test_stopping_and_listed_stopping_asks_again_and_is_never_terminated() -> None:
    record = make_instance(IS.STOPPING, id="s")
    plan = run([record], [listed(record, CS.STOPPING)])
    assert isinstance(only(plan), StopCloud)
    assert terminated_ids(plan) == set()


def test_stopping_and_gone_is_marked_terminated() -> None:
    record = make_instance(IS.STOPPING, id="s")
    assert isinstance(only(run([record], [listed(record, CS.TERMINATED)])), MarkTerminated)
    assert isinstance(only(run([record], [])), MarkTerminated)


# ---- STOPPED --------------------------------------------------------------------------------


def test_stopped_and_listed_running_is_stopped_again() -> None:
    record = make_instance(IS.STOPPED, id="s")
    decision = only(run([record], [listed(record, CS.RUNNING)]))
    assert isinstance(decision, StopCloud)
    assert "behind Corral's back" in decision.reason


def test_stopped_and_listed_pending_is_stopped_again() -> None:
    record = make_instance(IS.STOPPED, id="s")
    assert isinstance(only(run([record], [listed(record, CS.PENDING)])), StopCloud)


def test_stopped_and_listed_stopped_is_left_alone() -> None:
    record = make_instance(IS.STOPPED, id="s")
    for state in (CS.STOPPED, CS.STOPPING):
        assert run([record], [listed(record, state)]).decisions == ()


def test_stopped_and_gone_is_marked_terminated() -> None:
    record = make_instance(IS.STOPPED, id="s")
    decision = only(run([record], []))
    assert isinstance(decision, MarkTerminated)
    assert decision.apply(NOW).state is IS.TERMINATED


def test_a_stopped_owned_instance_without_a_warm_record_is_still_terminated() -> None:
    # Rule 8 is unchanged for a record that is not in the warm pool.
    record = make_instance(IS.IDLE, id="i")
    decision = only(run([record], [listed(record, CS.STOPPED)]))
    assert isinstance(decision, TerminateCloud)
    assert decision.cloud_id == record.cloud_id


def test_a_stopped_instance_whose_record_is_gone_is_still_terminated() -> None:
    record = make_instance(IS.TERMINATED, id="t")
    plan = run([record], [listed(record, CS.STOPPED)])
    assert terminated_ids(plan) == {record.cloud_id}


# ---- a warm start ---------------------------------------------------------------------------


def test_a_requested_warm_start_listed_running_is_adopted_with_its_new_launch_time() -> None:
    record = requested()
    decision = only(run([record], [listed(record, CS.RUNNING, launched_at=NOW + 5)], NOW + 10))
    assert isinstance(decision, Adopt)
    adopted = decision.apply(NOW + 10)
    assert adopted.state is IS.ALLOCATED
    assert adopted.cloud_id == record.cloud_id
    assert adopted.launched_at == NOW + 5


def test_an_adopted_warm_start_bills_its_new_run_whatever_launch_time_is_listed() -> None:
    # Compute Engine lists an instance's creationTimestamp, not its last start: the listing
    # of a started-again instance shows its first launch, from before it was stopped. The
    # adopted record must still bill the run it is in.
    record = requested()
    first_launch = record.created_at
    decision = only(run([record], [listed(record, CS.RUNNING, launched_at=first_launch)], NOW + 10))
    assert isinstance(decision, Adopt)
    adopted = decision.apply(NOW + 10)
    interval = billed_interval(adopted, NOW + 100)
    assert interval is not None
    assert interval[0] >= record.stopped_at  # type: ignore[operator]


def test_a_requested_warm_start_still_stopped_waits_within_the_request_timeout() -> None:
    record = requested()
    plan = run([record], [listed(record, CS.STOPPED)], NOW + S.request_timeout_s)
    assert plan.decisions == ()


def test_a_requested_warm_start_still_stopped_past_the_timeout_is_given_up() -> None:
    # Not asked again: a start that never takes would hold its demand for ever. Terminated,
    # so the planner launches for that demand.
    record = requested()
    at = NOW + S.request_timeout_s + 1
    decision = only(run([record], [listed(record, CS.STOPPED)], at))
    assert isinstance(decision, Terminate)
    gone = decision.apply(at)
    assert gone.state is IS.TERMINATING
    assert gone.cloud_id == record.cloud_id  # the stopped instance is the one terminated


def test_a_queued_warm_start_still_stopped_is_left_to_its_launch_message() -> None:
    record = warm_start()
    for state in (CS.STOPPED, CS.STOPPING):
        plan = run([record], [listed(record, state)], NOW + 10 * S.request_timeout_s)
        assert plan.decisions == ()


def test_a_queued_warm_start_whose_instance_is_gone_is_marked_terminated() -> None:
    record = warm_start()
    for cloud in ([], [listed(record, CS.TERMINATED)]):
        decision = only(run([record], cloud))
        assert isinstance(decision, MarkTerminated)
        assert decision.apply(NOW).state is IS.TERMINATED


def test_a_stopped_instance_held_by_a_warm_start_is_never_terminated() -> None:
    records = [warm_start(), requested()]
    for record in records:
        for state in (CS.STOPPED, CS.STOPPING):
            assert terminated_ids(run([record], [listed(record, state)], NOW + 30)) == set()


def test_a_stop_the_cloud_never_carries_out_is_given_up_in_the_end() -> None:
    # The table has STOPPING -> TERMINATING ("the cloud would not stop it"): an instance
    # the cloud keeps running (e.g. a one-time spot instance launched before the pool had a
    # warm pool: EC2 cannot stop it) must not stay STOPPING, billed at full price but out
    # of the burn and the month-to-date, for ever. A day after the stop it is terminated.
    record = make_instance(IS.STOPPING, id="s", entered_at=NOW - 86_400)
    decision = only(run([record], [listed(record, CS.RUNNING)]))
    assert isinstance(decision, Terminate), decision
    assert decision.apply(NOW).state is IS.TERMINATING
