"""On-demand fallback that respects spot (``on_demand_fallback_after``), with an injected
clock: the planner buys on-demand for a trial of a spot pool only once it has waited the
pool's delay for spot, and the reaper lets fallback agents go before spot ones."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.fallback import (
    allowed_offerings,
    fallback_at,
    may_fall_back,
    queued_waits_for_spot,
    waiting_since,
)
from corral.domain.instance import InstanceState
from corral.domain.offerings import CapacityMemory
from corral.domain.planner import plan_pool
from corral.domain.reaper import plan_reaping
from corral.domain.records import PoolState
from corral.domain.trial import TrialState

from .factories import make_instance
from .fleet import ON_DEMAND, SPOT, agent, offering, pending, pool

SPOT_1 = offering("g.1", 1, 0.4, SPOT)
OD_1 = offering("g.1", 1, 1.0, ON_DEMAND)
SPOT_8 = offering("g.8", 8, 3.2, SPOT)
OD_8 = offering("g.8", 8, 8.0, ON_DEMAND)
SUBMITTED = 1_000_000.0  # 13:46:40 UTC
DELAY = 600.0


def refused(*offerings: object, at: float) -> PoolState:
    memory = CapacityMemory()
    for o in offerings:
        memory = memory.marked_unavailable(o.key, at, 180.0)  # type: ignore[attr-defined]
    return replace(PoolState("gpu"), capacity=memory)


def spot_pool(after: float | None = DELAY, **kw: object):  # type: ignore[no-untyped-def]
    return pool(SPOT_1, OD_1, fallback_after_s=after, **kw)


def offerings_of(plan) -> list[object]:  # type: ignore[no-untyped-def]
    return [launch.offering for launch in plan.launches]


def test_a_trial_that_waited_less_than_the_delay_gets_no_on_demand() -> None:
    now = SUBMITTED + DELAY - 1
    plan = plan_pool(spot_pool(), [pending("t1", at=SUBMITTED)], [], refused(SPOT_1, at=now), now)
    assert plan.launches == ()
    reason = plan.pending_reasons["t1"]
    assert reason.startswith("waiting for spot capacity in pool gpu (the cloud refused spot")
    # The absolute time on-demand will be bought: submission + 10 minutes.
    assert "on-demand will be bought at 13:56:40 UTC" in reason
    assert plan.unserved == {"t1"}


def test_a_trial_that_waited_the_delay_gets_on_demand() -> None:
    now = SUBMITTED + DELAY
    plan = plan_pool(spot_pool(), [pending("t1", at=SUBMITTED)], [], refused(SPOT_1, at=now), now)
    assert offerings_of(plan) == [OD_1]
    assert plan.pending_reasons["t1"] == "waiting for a new g.1 (on-demand, subnet-a)"


def test_spot_is_still_bought_at_once_when_some_spot_offering_is_available() -> None:
    spot_b = offering("g.1", 1, 0.45, SPOT, location="subnet-b")
    plan = plan_pool(
        pool(SPOT_1, spot_b, OD_1, fallback_after_s=DELAY),
        [pending("t1", at=SUBMITTED)],
        [],
        refused(SPOT_1, at=SUBMITTED),
        SUBMITTED,
    )
    assert offerings_of(plan) == [spot_b]


def test_zero_delay_falls_back_at_once() -> None:
    plan = plan_pool(
        spot_pool(0.0),
        [pending("t1", at=SUBMITTED)],
        [],
        refused(SPOT_1, at=SUBMITTED),
        SUBMITTED,
    )
    assert offerings_of(plan) == [OD_1]


def test_never_falls_back_however_long_the_trial_waited() -> None:
    now = SUBMITTED + 30 * 86400
    plan = plan_pool(
        spot_pool(None), [pending("t1", at=SUBMITTED)], [], refused(SPOT_1, at=now), now
    )
    assert plan.launches == ()
    assert "on_demand_fallback_after is never" in plan.pending_reasons["t1"]


def test_on_demand_fallback_off_wins_over_a_delay() -> None:
    off = spot_pool(0.0, on_demand_fallback=False)
    assert off.on_demand_fallback_after_s is None
    now = SUBMITTED + 9999
    plan = plan_pool(off, [pending("t1", at=SUBMITTED)], [], refused(SPOT_1, at=now), now)
    assert plan.launches == ()
    assert "on_demand_fallback is off" in plan.pending_reasons["t1"]


def test_the_oldest_waiting_trial_decides_and_the_rest_shares_its_instance() -> None:
    now = SUBMITTED + DELAY
    trials = [pending("old", at=SUBMITTED), *(pending(f"new{i}", at=now) for i in range(7))]
    plan = plan_pool(
        pool(SPOT_8, OD_8, fallback_after_s=DELAY), trials, [], refused(SPOT_8, at=now), now
    )
    # The old trial may have on-demand; the young ones fill the rest of its instance.
    assert offerings_of(plan) == [OD_8]
    assert sorted(plan.launches[0].trial_ids) == sorted(t.id for t in trials)


def test_young_trials_alone_wait_even_when_several_need_an_instance() -> None:
    now = SUBMITTED + DELAY - 60
    trials = [pending(f"t{i}", at=SUBMITTED) for i in range(8)]
    plan = plan_pool(
        pool(SPOT_8, OD_8, fallback_after_s=DELAY), trials, [], refused(SPOT_8, at=now), now
    )
    assert plan.launches == ()
    assert set(plan.unserved) == {t.id for t in trials}


def test_a_gang_respects_spot_too() -> None:
    now = SUBMITTED + 60
    gang = pending("gang", 16, at=SUBMITTED)
    young = plan_pool(
        pool(SPOT_8, OD_8, fallback_after_s=DELAY), [gang], [], refused(SPOT_8, at=now), now
    )
    assert young.launches == ()
    assert young.pending_reasons["gang"].startswith("waiting for spot capacity")
    later = SUBMITTED + DELAY
    old = plan_pool(
        pool(SPOT_8, OD_8, fallback_after_s=DELAY), [gang], [], refused(SPOT_8, at=later), later
    )
    assert offerings_of(old) == [OD_8, OD_8]


def test_min_instances_waits_for_spot_unless_the_delay_is_zero() -> None:
    state = refused(SPOT_1, at=SUBMITTED)
    held = plan_pool(spot_pool(min_instances=1), [], [], state, SUBMITTED + 60)
    assert held.launches == ()
    at_once = plan_pool(spot_pool(0.0, min_instances=1), [], [], state, SUBMITTED)
    assert offerings_of(at_once) == [OD_1]


def test_a_queued_spot_launch_the_cloud_refused_says_when_on_demand_comes() -> None:
    now = SUBMITTED + 120
    queued = replace(
        agent("q", 1, state=InstanceState.QUEUED, at=SUBMITTED),
        offering=SPOT_1,
        planned_for=(("t1", 1),),
        attempt=1,  # the cloud refused its first attempt for capacity
    )
    plan = plan_pool(
        spot_pool(), [pending("t1", at=SUBMITTED)], [queued], refused(SPOT_1, at=now), now
    )
    assert plan.launches == ()
    assert "on-demand will be bought at 13:56:40 UTC" in plan.pending_reasons["t1"]
    # Once the delay has passed the launch itself may switch (scale-up swaps the offering).
    later = SUBMITTED + DELAY
    again = plan_pool(
        spot_pool(), [pending("t1", at=SUBMITTED)], [queued], refused(SPOT_1, at=later), later
    )
    assert again.pending_reasons["t1"] == "waiting for q to be launched"


def test_the_wait_counts_from_the_current_waiting_stretch() -> None:
    trial = pending("t1", at=SUBMITTED)
    preempted_at = SUBMITTED + 7200
    trial = trial.transition(TrialState.ASSIGNED, SUBMITTED + 10, "placed")
    trial = trial.transition(TrialState.RUNNING, SUBMITTED + 20, "ran")
    trial = trial.transition(TrialState.PREEMPTED, preempted_at, "interrupted")
    trial = trial.transition(TrialState.PENDING, preempted_at + 30, "requeued")
    assert waiting_since(trial) == preempted_at
    p = spot_pool()
    assert fallback_at(p, trial) == preempted_at + DELAY
    assert not may_fall_back(p, [trial], preempted_at + DELAY - 1)
    assert may_fall_back(p, [trial], preempted_at + DELAY)


def test_only_fallback_offerings_are_held_back() -> None:
    p = spot_pool()
    young = pending("t1", at=SUBMITTED)
    assert allowed_offerings(p, [SPOT_1, OD_1], [young], SUBMITTED) == [SPOT_1]
    # An on-demand pool has nothing to fall back from: its offerings are never held back.
    od_pool = pool(OD_1, fallback_after_s=DELAY)
    assert allowed_offerings(od_pool, [OD_1], [young], SUBMITTED) == [OD_1]
    assert queued_waits_for_spot(p, SPOT_1, True, young, SUBMITTED)
    assert not queued_waits_for_spot(p, SPOT_1, False, young, SUBMITTED)  # never refused
    assert not queued_waits_for_spot(p, OD_1, True, young, SUBMITTED)


# --- the reaper: fallback capacity goes first -------------------------------------------


def idle_agent(name: str, off: object, idle_for: float) -> object:
    return make_instance(
        InstanceState.IDLE,
        id=name,
        offering=off,  # type: ignore[arg-type]
        idle_since=SUBMITTED - idle_for,
        entered_at=SUBMITTED - idle_for,
    )


def test_making_room_drains_an_idle_fallback_agent_before_a_longer_idle_spot_one() -> None:
    p = spot_pool(max_instances=2, max_idle_s=1200.0, reap_fallback_early=False)
    spot = idle_agent("spot", SPOT_1, idle_for=500)
    od = idle_agent("od", OD_1, idle_for=100)
    plan = plan_reaping(p, [spot, od], SUBMITTED, room_needed=1)  # type: ignore[list-item]
    assert [d.instance.id for d in plan.drain] == ["od"]


def test_with_min_instances_the_spot_agent_is_the_one_kept() -> None:
    p = spot_pool(min_instances=1, max_idle_s=300.0, reap_fallback_early=False)
    spot = idle_agent("spot", SPOT_1, idle_for=900)
    od = idle_agent("od", OD_1, idle_for=400)
    plan = plan_reaping(p, [spot, od], SUBMITTED)  # type: ignore[list-item]
    assert [d.instance.id for d in plan.drain] == ["od"]


def test_busy_fallback_agents_are_never_drained_to_go_back_to_spot() -> None:
    p = spot_pool(max_instances=1, max_idle_s=300.0)
    busy = make_instance(InstanceState.BUSY, id="od", offering=OD_1, trials=("t",))
    spot = idle_agent("spot", SPOT_1, idle_for=10)
    plan = plan_reaping(p, [busy, spot], SUBMITTED, room_needed=1)  # type: ignore[list-item]
    assert [d.instance.id for d in plan.drain] == ["spot"]
