"""The reaper's rules, one test each, and its invariants as properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.domain.instance import INSTANCE_MACHINE, Instance, InstanceState
from corral.domain.policy import StaticPool
from corral.domain.reaper import ReapPlan, plan_reaping
from corral.domain.records import Heartbeat

from .factories import NOW, make_heartbeat, make_instance, make_pool

IS = InstanceState
POOL = make_pool(max_idle_s=300.0, min_instances=0, max_instances=10)


def idle(name: str, idle_for: float, **kw: object) -> Instance:
    return make_instance(IS.IDLE, id=name, idle_since=NOW - idle_for, **kw)  # type: ignore[arg-type]


def ids(decisions: tuple[object, ...]) -> list[str]:
    return [d.instance.id for d in decisions]  # type: ignore[attr-defined]


def test_idle_past_max_idle_is_drained() -> None:
    plan = plan_reaping(POOL, [idle("a", 301)], NOW)
    assert ids(plan.drain) == ["a"]
    assert plan.drain[0].target is IS.DRAINING
    assert "idle for 301s" in plan.drain[0].reason


def test_idle_within_max_idle_is_kept() -> None:
    assert plan_reaping(POOL, [idle("a", 300)], NOW) == ReapPlan()


def test_longest_idle_is_drained_first() -> None:
    pool = make_pool(max_idle_s=300.0, min_instances=1)
    plan = plan_reaping(pool, [idle("a", 400), idle("b", 900), idle("c", 600)], NOW)
    assert ids(plan.drain) == ["b", "c"]  # "a", idle the shortest, keeps min_instances


def test_never_drains_below_min_instances() -> None:
    pool = make_pool(max_idle_s=300.0, min_instances=2)
    busy = make_instance(IS.BUSY, id="busy")
    plan = plan_reaping(pool, [busy, idle("a", 1000), idle("b", 2000)], NOW)
    assert ids(plan.drain) == ["b"]


def test_min_instances_counts_only_idle_and_busy_agents_that_stay() -> None:
    pool = make_pool(max_idle_s=300.0, min_instances=1)
    leaving = [
        make_instance(IS.DRAINING, id="d", interruption_notice_at=NOW, allocations=(("t", (0,)),)),
        make_instance(IS.LOST, id="l"),
        make_instance(IS.TERMINATING, id="t"),
        make_instance(IS.ALLOCATED, id="al"),
        make_instance(IS.BUSY, id="x", interruption_notice_at=NOW),
    ]
    plan = plan_reaping(pool, [*leaving, idle("a", 1000)], NOW)
    assert plan.drain == ()  # "a" is the only agent that stays


def test_never_drains_a_busy_agent() -> None:
    busy = make_instance(IS.BUSY, id="b", idle_since=NOW - 10_000)
    assert plan_reaping(POOL, [busy], NOW) == ReapPlan()


def test_never_drains_an_agent_with_allocations() -> None:
    odd = idle("a", 1000, allocations=(("t1", (0,)),))
    assert plan_reaping(POOL, [odd], NOW) == ReapPlan()


def test_never_drains_an_agent_whose_heartbeat_reports_trials() -> None:
    beats = {"a": make_heartbeat("a", NOW, trials=("t1",))}
    assert plan_reaping(POOL, [idle("a", 1000)], NOW, heartbeats=beats) == ReapPlan()


def test_never_drains_a_reserved_agent() -> None:
    plan = plan_reaping(POOL, [idle("a", 1000)], NOW, reserved=frozenset({"a"}))
    assert plan == ReapPlan()


def test_drained_and_confirmed_empty_is_terminated() -> None:
    drained = make_instance(IS.DRAINING, id="d")
    plan = plan_reaping(POOL, [drained], NOW, heartbeats={"d": make_heartbeat("d", NOW)})
    assert ids(plan.terminate) == ["d"]
    assert plan.terminate[0].target is IS.TERMINATING


def test_drained_whose_heartbeat_reports_trials_waits() -> None:
    drained = make_instance(IS.DRAINING, id="d")
    beats = {"d": make_heartbeat("d", NOW, trials=("t1",))}
    assert plan_reaping(POOL, [drained], NOW, heartbeats=beats) == ReapPlan()


def test_drained_for_idleness_that_got_work_is_undrained() -> None:
    drained = make_instance(IS.DRAINING, id="d", allocations=(("t1", (0,)),))
    plan = plan_reaping(POOL, [drained], NOW)
    assert ids(plan.undrain) == ["d"]
    assert plan.undrain[0].target is IS.IDLE


def test_drained_for_idleness_and_reserved_is_undrained() -> None:
    drained = make_instance(IS.DRAINING, id="d")
    plan = plan_reaping(POOL, [drained], NOW, reserved=frozenset({"d"}))
    assert ids(plan.undrain) == ["d"]


def test_drained_for_an_interruption_is_never_undrained() -> None:
    notice = NOW - 30
    with_work = make_instance(
        IS.DRAINING, id="w", interruption_notice_at=notice, allocations=(("t1", (0,)),)
    )
    reserved = make_instance(IS.DRAINING, id="r", interruption_notice_at=notice)
    empty = make_instance(IS.DRAINING, id="e", interruption_notice_at=notice)
    plan = plan_reaping(
        make_pool(min_instances=3), [with_work, reserved, empty], NOW, reserved=frozenset({"r"})
    )
    assert plan.undrain == ()
    assert ids(plan.terminate) == ["e"]  # empty: terminated; the others wait


def test_drained_for_idleness_is_taken_back_when_below_min_instances() -> None:
    pool = make_pool(min_instances=2)
    plan = plan_reaping(
        pool,
        [
            make_instance(IS.BUSY, id="b"),
            make_instance(IS.DRAINING, id="d1"),
            make_instance(IS.DRAINING, id="d2"),
        ],
        NOW,
    )
    assert ids(plan.undrain) == ["d1"]
    assert ids(plan.terminate) == ["d2"]


def test_max_instances_lowered_drains_idle_agents_at_once() -> None:
    pool = make_pool(max_idle_s=300.0, max_instances=2)
    agents = [idle("a", 10), idle("b", 50), idle("c", 20), make_instance(IS.BUSY, id="x")]
    plan = plan_reaping(pool, agents, NOW)
    assert ids(plan.drain) == ["b", "c"]  # longest idle first, though none is past max idle
    assert "above max_instances 2" in plan.drain[0].reason


def test_max_instances_lowered_never_drains_busy_agents() -> None:
    pool = make_pool(max_instances=1)
    agents = [make_instance(IS.BUSY, id=f"b{i}") for i in range(3)]
    assert plan_reaping(pool, agents, NOW) == ReapPlan()


def test_idle_agent_with_an_interruption_notice_is_drained_at_once() -> None:
    plan = plan_reaping(make_pool(min_instances=5), [idle("a", 1, interruption_notice_at=NOW)], NOW)
    assert ids(plan.drain) == ["a"]
    assert "interruption" in plan.drain[0].reason


def test_other_pools_are_ignored() -> None:
    assert plan_reaping(POOL, [idle("a", 1000, pool="other")], NOW) == ReapPlan()


def test_decisions_apply_as_allowed_transitions() -> None:
    agents = [
        idle("a", 1000),
        make_instance(IS.DRAINING, id="d"),
        make_instance(IS.DRAINING, id="u", allocations=(("t", (0,)),)),
    ]
    plan = plan_reaping(POOL, agents, NOW)
    assert len(plan.decisions) == 3
    for decision in plan.decisions:
        moved = decision.apply(NOW)
        assert moved.state is decision.target
        assert moved.history[-1].reason == decision.reason


# ---- properties ---------------------------------------------------------------------------

_STATES = [IS.IDLE, IS.BUSY, IS.DRAINING, IS.LOST, IS.ALLOCATED, IS.TERMINATING]


Fleet = tuple[list[Instance], frozenset[str], dict[str, Heartbeat], StaticPool]


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    count = draw(st.integers(0, 12))
    agents: list[Instance] = []
    beats: dict[str, Heartbeat] = {}
    for n in range(count):
        name = f"a{n}"
        state = draw(st.sampled_from(_STATES))
        fields: dict[str, object] = {}
        if state in (IS.IDLE, IS.DRAINING):
            fields["idle_since"] = NOW - draw(st.floats(0, 5000))
            if draw(st.booleans()) and draw(st.booleans()):
                fields["allocations"] = (("t", (0,)),)
        if draw(st.booleans()) and draw(st.booleans()):
            fields["interruption_notice_at"] = NOW - 10
        agents.append(make_instance(state, id=name, **fields))  # type: ignore[arg-type]
        if draw(st.booleans()):
            trials = ("t",) if draw(st.booleans()) else ()
            beats[name] = make_heartbeat(name, NOW, trials=trials)
    reserved = frozenset(draw(st.sets(st.sampled_from([f"a{n}" for n in range(12)]))))
    lo = draw(st.integers(0, 6))
    pool = make_pool(min_instances=lo, max_instances=lo + draw(st.integers(0, 6)))
    return agents, reserved, beats, pool


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_property_reaper_never_takes_busy_working_or_reserved_agents_nor_goes_below_min(
    fleet: Fleet,
) -> None:
    agents, reserved, beats, pool = fleet
    plan = plan_reaping(pool, agents, NOW, reserved=reserved, heartbeats=beats)
    removed = {d.instance.id for d in (*plan.drain, *plan.terminate)}
    for inst in agents:
        if inst.id not in removed:
            continue
        assert inst.state is not IS.BUSY
        assert not inst.allocations
        assert inst.id not in reserved
        beat = beats.get(inst.id)
        assert beat is None or not beat.trials
    for decision in plan.decisions:
        assert INSTANCE_MACHINE.allows(decision.instance.state, decision.target)
    assert len({d.instance.id for d in plan.decisions}) == len(plan.decisions)

    def staying(instances: list[Instance]) -> int:
        return sum(1 for i in instances if i.is_schedulable)

    after = {i.id: i for i in agents}
    for decision in plan.decisions:
        after[decision.instance.id] = decision.apply(NOW)
    before = staying(agents)
    assert staying(list(after.values())) >= min(before, pool.min_instances)


def test_a_drained_agent_with_a_fresh_empty_heartbeat_is_terminated_in_the_same_pass() -> None:
    fresh = {"a": Heartbeat("a", NOW - 5), "b": Heartbeat("b", NOW - 60)}
    plan = plan_reaping(
        POOL, [idle("a", 301), idle("b", 400)], NOW, heartbeats=fresh, fresh_after=NOW - 15
    )
    assert sorted(ids(plan.drain)) == ["a", "b"]
    assert plan.terminate_after_drain == frozenset({"a"})  # b's heartbeat is too old


def test_no_same_pass_termination_without_a_fresh_heartbeat_window() -> None:
    plan = plan_reaping(POOL, [idle("a", 301)], NOW, heartbeats={"a": Heartbeat("a", NOW)})
    assert plan.terminate_after_drain == frozenset()


def test_room_for_blocked_demand_is_made_from_idle_agents_at_once() -> None:
    pool = make_pool(max_idle_s=300.0, min_instances=1, max_instances=4)
    agents = [idle("a", 10), idle("b", 50), idle("c", 20), idle("r", 100)]
    plan = plan_reaping(pool, agents, NOW, reserved=frozenset({"r"}), room_needed=2)
    assert ids(plan.drain) == ["b", "c"]  # longest idle first; the reserved one stays
    assert "making room" in plan.drain[0].reason


def test_making_room_never_goes_below_min_instances() -> None:
    pool = make_pool(max_idle_s=300.0, min_instances=2, max_instances=2)
    plan = plan_reaping(pool, [idle("a", 10), idle("b", 50)], NOW, room_needed=2)
    assert plan.drain == ()


def test_an_agent_emptied_by_consolidation_waits_for_its_trials_and_is_never_taken_back() -> None:
    # Consolidation drained "a" and requeued its trial, which it still runs until it stops.
    # That is no new work: the agent is not taken back, nor terminated under the trial; once
    # the trial has left it is terminated, even when the pool is below min_instances.
    moving = make_instance(IS.DRAINING, id="a", allocations=(("t", (0,)),), consolidated_at=NOW)
    assert plan_reaping(POOL, [moving], NOW) == ReapPlan()
    emptied = make_instance(IS.DRAINING, id="a", consolidated_at=NOW)
    floor = make_pool(max_idle_s=300.0, min_instances=1)
    plan = plan_reaping(floor, [emptied], NOW, reserved=frozenset())
    assert (
        ids(plan.terminate) == ["a"] and plan.terminate[0].reason == "drained and confirmed empty"
    )
    # The same agent drained for idleness with work on it is taken back (unchanged).
    idle_drained = make_instance(IS.DRAINING, id="a", allocations=(("t", (0,)),))
    assert ids(plan_reaping(POOL, [idle_drained], NOW).undrain) == ["a"]
