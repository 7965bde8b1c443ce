"""The scheduler's placement rules, one case each."""

from __future__ import annotations

from corral.domain.instance import InstanceState
from corral.domain.placement import place_trials
from corral.domain.trial import TrialState

from .fleet import agent, pending


def placed(result, trial_id):  # type: ignore[no-untyped-def]
    return {a.trial.id: a.placement.parts for a in result.assignments}.get(trial_id)


def test_best_fit_prefers_the_tightest_agent() -> None:
    roomy = agent("a-roomy", 8)
    tight = agent("a-tight", 4, used=2)
    result = place_trials([pending("t1", 2)], [roomy, tight])
    assert placed(result, "t1") == (("a-tight", (2, 3)),)


def test_fills_partly_used_agents_before_idle_ones() -> None:
    idle = agent("a-idle", 4)
    busy = agent("a-busy", 4, used=1)
    result = place_trials([pending("t1", 1)], [idle, busy])
    assert placed(result, "t1") == (("a-busy", (1,)),)
    assert result.leftover_free["a-idle"] == (0, 1, 2, 3)


def test_priority_order_then_first_come() -> None:
    only = agent("a-1", 1)
    late_urgent = pending("urgent", 1, priority=1, at=50)
    early = pending("early", 1, priority=42, at=0)
    result = place_trials([early, late_urgent], [only])
    assert [a.trial.id for a in result.assignments] == ["urgent"]
    assert [t.id for t in result.unplaced] == ["early"]


def test_backfill_smaller_trials_past_a_big_one() -> None:
    result = place_trials(
        [pending("big", 4, priority=1), pending("small", 1, priority=2)], [agent("a-1", 2)]
    )
    assert placed(result, "big") is None
    assert placed(result, "small") == (("a-1", (0,)),)


def test_gang_places_across_fully_free_agents_all_or_nothing() -> None:
    agents = [agent("a-1", 4), agent("a-2", 4), agent("a-3", 4, used=1)]
    result = place_trials([pending("gang", 8)], agents)
    assert placed(result, "gang") == (("a-1", (0, 1, 2, 3)), ("a-2", (0, 1, 2, 3)))
    # 12 GPUs needed, only 11 free and one agent is partly used: nothing is taken.
    result = place_trials([pending("too-big", 12)], agents)
    assert placed(result, "too-big") is None
    assert result.leftover_free == {"a-1": (0, 1, 2, 3), "a-2": (0, 1, 2, 3), "a-3": (1, 2, 3)}


def test_gang_prefers_one_instance_type() -> None:
    agents = [
        agent("a-8", 8, instance_type="big"),
        agent("b-4", 4, instance_type="small"),
        agent("c-4", 4, instance_type="small"),
    ]
    result = place_trials([pending("gang", 8)], agents)
    assert placed(result, "gang") == (("a-8", tuple(range(8))),)
    result = place_trials([pending("gang", 12)], [*agents, agent("d-4", 4, instance_type="small")])
    parts = placed(result, "gang")
    assert parts is not None
    assert {p[0] for p in parts} == {"b-4", "c-4", "d-4"}


def test_only_schedulable_agents_of_the_same_pool() -> None:
    agents = [
        agent("starting", 4, state=InstanceState.ALLOCATED),
        agent("draining", 4, state=InstanceState.DRAINING),
        agent("other-pool", 4, pool="cpu"),
    ]
    result = place_trials([pending("t1", 1)], agents)
    assert result.assignments == ()


def test_zero_slot_trial_goes_on_any_agent() -> None:
    result = place_trials([pending("cpu-task", 0)], [agent("full", 2, used=2)])
    assert placed(result, "cpu-task") == (("full", ()),)


def test_ignores_trials_that_are_not_pending() -> None:
    trial = pending("t1", 1).transition(TrialState.CANCELLED, 1, "killed")
    assert place_trials([trial], [agent("a", 1)]).assignments == ()


def test_a_gang_is_never_placed_across_instance_types() -> None:
    # torch.distributed ranks assume every node runs the same number of GPUs, and the planner
    # plans uniform gangs: a mixed placement would leave what it launched unused.
    agents = [
        agent("a-4", 4, instance_type="g5.12xlarge"),
        *(agent(f"s-{n}", 1, instance_type="g5.xlarge") for n in range(4)),
    ]
    result = place_trials([pending("gang", 8)], agents)
    assert placed(result, "gang") is None
    agents.append(agent("b-4", 4, instance_type="g5.12xlarge"))
    result = place_trials([pending("gang", 8)], agents)
    assert placed(result, "gang") == (("a-4", (0, 1, 2, 3)), ("b-4", (0, 1, 2, 3)))
