"""Property tests: the invariants of placement and planning hold for any fleet and demand."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.domain.instance import InstanceState, new_instance
from corral.domain.placement import place_trials
from corral.domain.planner import plan_pool
from corral.domain.records import PoolState

from .fleet import agent, offering, pending, pool

SIZES = st.sampled_from([1, 2, 4, 8])
STATES = st.sampled_from(
    [
        InstanceState.IDLE,
        InstanceState.QUEUED,
        InstanceState.REQUESTED,
        InstanceState.ALLOCATED,
        InstanceState.DRAINING,
        InstanceState.LOST,
    ]
)


@st.composite
def fleets(draw: st.DrawFn) -> list:  # type: ignore[type-arg]
    agents = []
    for n in range(draw(st.integers(0, 8))):
        slots = draw(SIZES)
        used = draw(st.integers(0, slots))
        st_ = draw(STATES)
        agents.append(
            agent(
                f"a{n}",
                slots,
                used=used if st_ is InstanceState.IDLE else 0,
                state=st_,
                instance_type=f"g.{slots}",
            )
        )
    return agents


demand = st.lists(st.tuples(st.integers(0, 20), st.integers(1, 99)), max_size=15).map(
    lambda xs: [pending(f"t{i}", slots, priority=prio) for i, (slots, prio) in enumerate(xs)]
)


@settings(max_examples=200, deadline=None)
@given(fleets(), demand)
def test_never_more_gpus_used_than_an_agent_has_and_gangs_are_whole(agents, trials) -> None:  # type: ignore[no-untyped-def]
    result = place_trials(trials, agents)
    by_id = {a.id: a for a in agents}
    taken: dict[str, Counter[int]] = {a.id: Counter(a.used_gpus) for a in agents}
    for assignment in result.assignments:
        assert assignment.placement.slots == assignment.trial.slots  # all or nothing
        for agent_id, gpus in assignment.placement.parts:
            assert by_id[agent_id].is_schedulable
            assert by_id[agent_id].pool == assignment.trial.pool
            taken[agent_id].update(gpus)
    for agent_id, counts in taken.items():
        assert all(c == 1 for c in counts.values()), "a GPU was given twice"
        assert all(0 <= g < by_id[agent_id].slots for g in counts)
    placed = {a.trial.id for a in result.assignments}
    assert placed.isdisjoint(t.id for t in result.unplaced)
    assert len(placed) + len(result.unplaced) == len(trials)


@settings(max_examples=200, deadline=None)
@given(fleets(), demand, st.integers(0, 3), st.integers(1, 12))
def test_never_above_max_instances(agents, trials, min_i, max_i) -> None:  # type: ignore[no-untyped-def]
    policy = pool(
        offering("g.1", 1, 1.0),
        offering("g.4", 4, 3.5),
        offering("g.8", 8, 6.0),
        min_instances=min(min_i, max_i),
        max_instances=max_i,
    )
    result = place_trials(trials, agents)
    plan = plan_pool(
        policy, result.unplaced, agents, PoolState("gpu"), 0.0, leftover_free=result.leftover_free
    )
    live = sum(1 for a in agents if a.is_live)
    assert live + len(plan.launches) <= max(max_i, live)
    if live >= max_i:
        assert plan.launches == ()


@settings(max_examples=200, deadline=None)
@given(fleets(), demand)
def test_the_same_demand_is_never_launched_twice(agents, trials) -> None:  # type: ignore[no-untyped-def]
    policy = pool(offering("g.1", 1, 1.0), offering("g.4", 4, 3.5), max_instances=50)
    first = place_trials(trials, agents)
    plan = plan_pool(
        policy, first.unplaced, agents, PoolState("gpu"), 0.0, leftover_free=first.leftover_free
    )
    # Apply the plan as scale-up would: one QUEUED record per launch.
    queued = [
        replace(
            new_instance(f"new{n}", "gpu", launch.offering, 1.0, launch.reason),
            planned_for=launch.planned_for,
        )
        for n, launch in enumerate(plan.launches)
    ]
    again = plan_pool(
        policy,
        first.unplaced,
        agents + queued,
        PoolState("gpu"),
        2.0,
        leftover_free=first.leftover_free,
    )
    assert again.launches == ()
    # What was just planned is needed: none of it is surplus.
    assert not set(again.surplus) & {q.id for q in queued}


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 10))
def test_a_gang_is_planned_whole_or_not_at_all(slots, max_i) -> None:  # type: ignore[no-untyped-def]
    policy = pool(offering("g.4", 4, 3.5), max_instances=max_i)
    plan = plan_pool(policy, [pending("gang", slots)], [], PoolState("gpu"), 0.0)
    gpus = sum(launch.offering.slots for launch in plan.launches)
    assert gpus == 0 or gpus >= slots
    assert (gpus >= slots) == (-(-slots // 4) <= max_i)


def test_property_builders_make_valid_records() -> None:
    # Guard the generators themselves: a busy agent has its GPUs allocated.
    a = agent("a", 4, used=3)
    assert a.state is InstanceState.BUSY
    assert a.free_slots == 1
    assert replace(a, allocations=()).free_slots == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(SIZES, st.integers(0, 8)), max_size=10), st.lists(st.integers(0, 20)))
def test_the_free_slot_count_the_packer_keeps_matches_its_bins(bins, demand) -> None:  # type: ignore[no-untyped-def]
    from corral.domain.packing import Bin, BinIndex

    index = BinIndex.of(
        Bin(f"b{n}", f"g.{slots}", slots, list(range(min(used, slots), slots)))
        for n, (slots, used) in enumerate(bins)
    )
    for slots in demand:
        index.place(slots)
        expected = sum(b.slots for b in index.bins() if b.fully_free)
        assert index._fully_free_slots == expected
