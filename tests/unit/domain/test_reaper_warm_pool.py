"""The reaper and the warm pool: which empty agents are stopped instead of terminated, how
long an idle agent with room waits, and which stopped instances are terminated."""

from __future__ import annotations

from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import CapacityType
from corral.domain.reaper import (
    ReapPlan,
    plan_reaping,
)
from corral.domain.records import Heartbeat

from .factories import NOW, make_heartbeat, make_instance, make_offering, make_pool

IS = InstanceState
WARM = make_pool(max_idle_s=300.0, min_instances=0, max_instances=10, warm_pool_size=1)
COLD = make_pool(max_idle_s=300.0, min_instances=0, max_instances=10)
SPOT = make_offering(capacity_type=CapacityType.SPOT, hourly_price=0.4)
ON_DEMAND = make_offering(hourly_price=1.0)
SPOT_POOL = make_pool(
    SPOT, ON_DEMAND, max_idle_s=300.0, warm_pool_size=2, reap_fallback_early=False
)


def idle(name: str, idle_for: float, **kw: object) -> Instance:
    kw.setdefault("stoppable", True)  # launched while the pool had a warm pool
    return make_instance(IS.IDLE, id=name, idle_since=NOW - idle_for, **kw)  # type: ignore[arg-type]


def stopped(name: str, stopped_for: float) -> Instance:
    return make_instance(IS.STOPPED, id=name, stopped_at=NOW - stopped_for)


def empty_drained(name: str, **kw: object) -> tuple[Instance, dict[str, Heartbeat]]:
    kw.setdefault("stoppable", True)  # launched while the pool had a warm pool
    inst = make_instance(IS.DRAINING, id=name, **kw)  # type: ignore[arg-type]
    return inst, {name: make_heartbeat(name, NOW)}


def targets(plan: ReapPlan) -> dict[str, InstanceState]:
    return {d.instance.id: d.target for d in plan.terminate}


# ---- a drained agent confirmed empty: stopped or terminated --------------------------------


def test_an_empty_drained_agent_is_stopped_while_the_warm_pool_has_room() -> None:
    drained, beats = empty_drained("d")
    plan = plan_reaping(WARM, [drained], NOW, heartbeats=beats)
    assert targets(plan) == {"d": IS.STOPPING}
    assert "warm pool" in plan.terminate[0].reason
    # The decision applies as an allowed transition and stamps when it was parked.
    moved = plan.terminate[0].apply(NOW)
    assert moved.state is IS.STOPPING and moved.stopped_at == NOW


def test_without_a_warm_pool_an_empty_drained_agent_is_terminated() -> None:
    drained, beats = empty_drained("d")
    assert targets(plan_reaping(COLD, [drained], NOW, heartbeats=beats)) == {"d": IS.TERMINATING}


def test_a_full_warm_pool_terminates_the_empty_agent() -> None:
    drained, beats = empty_drained("d")
    plan = plan_reaping(WARM, [stopped("s", 60), drained], NOW, heartbeats=beats)
    assert targets(plan) == {"d": IS.TERMINATING}  # the stopped one keeps the only place


def test_a_stopping_record_counts_against_the_room_too() -> None:
    drained, beats = empty_drained("d")
    stopping = make_instance(IS.STOPPING, id="s")
    plan = plan_reaping(WARM, [stopping, drained], NOW, heartbeats=beats)
    assert targets(plan) == {"d": IS.TERMINATING}


def test_room_is_handed_out_once_per_place() -> None:
    pool = make_pool(max_idle_s=300.0, warm_pool_size=2)
    agents = [make_instance(IS.DRAINING, id=n, stoppable=True) for n in ("a", "b", "c")]
    beats = {n: make_heartbeat(n, NOW) for n in ("a", "b", "c")}
    plan = plan_reaping(pool, [stopped("s", 60), *agents], NOW, heartbeats=beats)
    found = sorted(targets(plan).values())
    assert found == sorted([IS.STOPPING, IS.TERMINATING, IS.TERMINATING])


def test_an_on_demand_fallback_agent_of_a_spot_pool_is_never_stopped() -> None:
    fallback, beats = empty_drained("od", offering=ON_DEMAND)
    spot, spot_beats = empty_drained("sp", offering=SPOT)
    plan = plan_reaping(SPOT_POOL, [fallback, spot], NOW, heartbeats={**beats, **spot_beats})
    assert targets(plan) == {"od": IS.TERMINATING, "sp": IS.STOPPING}


def test_an_agent_drained_for_an_interruption_notice_is_never_stopped() -> None:
    noticed, beats = empty_drained("n", interruption_notice_at=NOW - 30)
    assert targets(plan_reaping(WARM, [noticed], NOW, heartbeats=beats)) == {"n": IS.TERMINATING}


def test_a_drained_agent_that_still_reports_work_is_not_stopped() -> None:
    drained = make_instance(IS.DRAINING, id="d")
    beats = {"d": make_heartbeat("d", NOW, trials=("t1",))}
    assert plan_reaping(WARM, [drained], NOW, heartbeats=beats) == ReapPlan()


# ---- stopped instances: expired, or over a lowered size -----------------------------------


def test_a_stopped_instance_past_max_stopped_period_is_terminated() -> None:
    pool = make_pool(warm_pool_size=1, max_stopped_s=3600.0)
    plan = plan_reaping(pool, [stopped("old", 3601)], NOW)
    assert targets(plan) == {"old": IS.TERMINATING}
    assert "max_stopped_period" in plan.terminate[0].reason
    assert plan.terminate[0].apply(NOW).state is IS.TERMINATING


def test_a_stopped_instance_within_max_stopped_period_is_kept() -> None:
    pool = make_pool(warm_pool_size=1, max_stopped_s=3600.0)
    assert plan_reaping(pool, [stopped("s", 3600)], NOW) == ReapPlan()


def test_an_expired_stopped_instance_frees_its_place_for_a_drained_agent() -> None:
    pool = make_pool(warm_pool_size=1, max_stopped_s=3600.0)
    drained, beats = empty_drained("d")
    plan = plan_reaping(pool, [stopped("old", 4000), drained], NOW, heartbeats=beats)
    assert targets(plan) == {"old": IS.TERMINATING, "d": IS.STOPPING}


def test_a_lowered_warm_pool_size_terminates_the_oldest_stopped_first() -> None:
    pool = make_pool(warm_pool_size=1)
    records = [stopped("newest", 60), stopped("oldest", 600), stopped("middle", 300)]
    plan = plan_reaping(pool, records, NOW)
    assert targets(plan) == {"oldest": IS.TERMINATING, "middle": IS.TERMINATING}
    assert "keeps 1 stopped" in plan.terminate[0].reason


def test_a_warm_pool_turned_off_terminates_every_stopped_instance() -> None:
    plan = plan_reaping(COLD, [stopped("a", 60), stopped("b", 120)], NOW)
    assert targets(plan) == {"a": IS.TERMINATING, "b": IS.TERMINATING}


def test_a_stopping_record_is_left_to_settle_when_over_the_size() -> None:
    # Two parked, room for one: the STOPPING one is not terminated (it settles first); the
    # STOPPED one goes, though it is the newer.
    pool = make_pool(warm_pool_size=1)
    stopping = make_instance(IS.STOPPING, id="stopping", stopped_at=NOW - 900)
    plan = plan_reaping(pool, [stopping, stopped("s", 60)], NOW)
    assert targets(plan) == {"s": IS.TERMINATING}


# ---- an idle agent and the warm pool's room -------------------------------------------------


def test_an_idle_agent_with_warm_room_still_waits_for_max_idle() -> None:
    # The warm pool changes what happens to an agent past max_idle_agent_period (stopped
    # instead of terminated), not when: stopping sooner made arrivals wait for starts.
    assert plan_reaping(WARM, [idle("a", 299, step_s=200.0)], NOW) == ReapPlan()
    plan = plan_reaping(WARM, [idle("a", 301, step_s=200.0)], NOW)
    assert [d.instance.id for d in plan.drain] == ["a"]


def test_an_idle_agent_without_warm_room_waits_for_max_idle() -> None:
    agent = idle("a", 201, step_s=200.0)
    assert plan_reaping(WARM, [stopped("s", 60), agent], NOW) == ReapPlan()
    assert plan_reaping(COLD, [agent], NOW) == ReapPlan()


# ---- drained and confirmed in the same pass ------------------------------------------------


def test_a_fresh_drain_with_room_is_stopped_in_the_same_pass() -> None:
    beats = {"a": Heartbeat("a", NOW - 5)}
    plan = plan_reaping(WARM, [idle("a", 301)], NOW, heartbeats=beats, fresh_after=NOW - 15)
    assert plan.terminate_after_drain == frozenset({"a"})
    assert plan.park_after_drain == frozenset({"a"})


def test_only_as_many_fresh_drains_as_there_is_room_for_are_stopped() -> None:
    beats = {n: Heartbeat(n, NOW - 5) for n in ("a", "b")}
    agents = [idle("a", 400), idle("b", 900)]
    plan = plan_reaping(WARM, agents, NOW, heartbeats=beats, fresh_after=NOW - 15)
    assert plan.terminate_after_drain == frozenset({"a", "b"})
    assert len(plan.park_after_drain) == 1


def test_no_same_pass_stop_without_room() -> None:
    beats = {"a": Heartbeat("a", NOW - 5)}
    agents = [stopped("s", 60), idle("a", 301)]
    plan = plan_reaping(WARM, agents, NOW, heartbeats=beats, fresh_after=NOW - 15)
    assert plan.terminate_after_drain == frozenset({"a"})
    assert plan.park_after_drain == frozenset()


def test_no_same_pass_stop_without_a_fresh_heartbeat() -> None:
    beats = {"a": Heartbeat("a", NOW - 60)}
    plan = plan_reaping(WARM, [idle("a", 301)], NOW, heartbeats=beats, fresh_after=NOW - 15)
    assert [d.instance.id for d in plan.drain] == ["a"]
    assert plan.park_after_drain == frozenset() == plan.terminate_after_drain


def test_a_fresh_drain_of_a_fallback_agent_is_terminated_not_stopped() -> None:
    beats = {"od": Heartbeat("od", NOW - 5)}
    agent = idle("od", 301, offering=ON_DEMAND)
    plan = plan_reaping(SPOT_POOL, [agent], NOW, heartbeats=beats, fresh_after=NOW - 15)
    assert plan.terminate_after_drain == frozenset({"od"})
    assert plan.park_after_drain == frozenset()


def test_a_fresh_drain_for_an_interruption_notice_is_not_stopped() -> None:
    beats = {"n": Heartbeat("n", NOW - 5)}
    agent = idle("n", 10, interruption_notice_at=NOW - 1)
    plan = plan_reaping(WARM, [agent], NOW, heartbeats=beats, fresh_after=NOW - 15)
    assert plan.terminate_after_drain == frozenset({"n"})
    assert plan.park_after_drain == frozenset()


def test_an_instance_launched_before_the_warm_pool_is_terminated_not_stopped() -> None:
    # EC2 cannot stop an instance of a one-time spot request: only one launched stoppable
    # goes to the warm pool.
    drained, beats = empty_drained("d", stoppable=False)
    assert targets(plan_reaping(WARM, [drained], NOW, heartbeats=beats)) == {"d": IS.TERMINATING}
    fresh = {"a": Heartbeat("a", NOW - 5)}
    plan = plan_reaping(
        WARM, [idle("a", 400, stoppable=False)], NOW, heartbeats=fresh, fresh_after=NOW - 60
    )
    assert plan.terminate_after_drain == {"a"} and plan.park_after_drain == frozenset()


# ---- the budget: no stopped instance it could not start again -------------------------------

# 10 USD a month; an instance of the default offering costs 1 USD an hour (the gate's hour).
BUDGETED = make_pool(max_idle_s=300.0, warm_pool_size=2, monthly_budget_usd=10.0)
SPENT = 9.5  # USD this month: no hour of any instance fits any more
DEAR = make_offering("g5.12xlarge", slots=4, hourly_price=5.0)
MIXED = make_pool(
    make_offering(), DEAR, max_idle_s=300.0, warm_pool_size=2, monthly_budget_usd=10.0
)


def test_a_spent_budget_terminates_the_empty_agent_instead_of_stopping_it() -> None:
    drained, beats = empty_drained("d")
    plan = plan_reaping(BUDGETED, [drained], NOW, heartbeats=beats, month_to_date_usd=SPENT)
    assert targets(plan) == {"d": IS.TERMINATING}
    kept = plan_reaping(BUDGETED, [drained], NOW, heartbeats=beats, month_to_date_usd=8.9)
    assert targets(kept) == {"d": IS.STOPPING}  # an hour of it still fits


def test_a_spent_budget_terminates_every_stopped_instance() -> None:
    plan = plan_reaping(BUDGETED, [stopped("s", 60)], NOW, month_to_date_usd=SPENT)
    assert targets(plan) == {"s": IS.TERMINATING}
    assert "could not start it again" in plan.terminate[0].reason
    assert targets(plan_reaping(BUDGETED, [stopped("s", 60)], NOW, month_to_date_usd=0.0)) == {}
    assert targets(plan_reaping(BUDGETED, [stopped("s", 60)], NOW)) == {}  # spend not known


def test_a_spent_budget_drains_an_idle_agent_for_termination() -> None:
    agent = idle("a", 400.0)
    beats = {"a": make_heartbeat("a", NOW)}
    plan = plan_reaping(
        BUDGETED, [agent], NOW, heartbeats=beats, fresh_after=NOW - 1, month_to_date_usd=SPENT
    )
    assert [d.instance.id for d in plan.drain] == ["a"]
    assert plan.terminate_after_drain == {"a"} and plan.park_after_drain == frozenset()


def test_only_the_stopped_instances_the_budget_could_not_start_are_terminated() -> None:
    # 5.50 USD spent: a 1-USD instance still fits the gate's hour, a 5-USD one does not.
    dear = make_instance(IS.STOPPED, id="dear", offering=DEAR, stopped_at=NOW - 60)
    plan = plan_reaping(MIXED, [stopped("cheap", 60), dear], NOW, month_to_date_usd=5.5)
    assert targets(plan) == {"dear": IS.TERMINATING}
