"""The planner's rules, one case each."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import CapacityMemory
from corral.domain.planner import PoolPlan, infeasible_reason, plan_pool
from corral.domain.records import PoolState

from .factories import make_instance
from .fleet import ON_DEMAND, SPOT, agent, offering, pending, pool

ONE = offering("g.1", 1, 1.0)
FOUR = offering("g.4", 4, 3.5)
NOW = 1_000.0


def state(**kw: object) -> PoolState:
    return replace(PoolState("gpu"), **kw)  # type: ignore[arg-type]


def types(plan) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(launch.offering.instance_type for launch in plan.launches)


def test_launches_for_unplaced_demand_at_the_lowest_price_per_useful_gpu() -> None:
    three = [pending(f"t{i}") for i in range(3)]
    plan = plan_pool(pool(ONE, FOUR), three, [], state(), NOW)
    assert types(plan) == ["g.1", "g.1", "g.1"]  # $1/GPU beats $3.5 for 3 useful GPUs
    four = [pending(f"t{i}") for i in range(4)]
    plan = plan_pool(pool(ONE, FOUR), four, [], state(), NOW)
    assert types(plan) == ["g.4"]  # $0.875 per useful GPU
    assert sorted(plan.launches[0].trial_ids) == ["t0", "t1", "t2", "t3"]


def test_counts_instances_already_on_their_way() -> None:
    starting = [
        replace(agent("q", 1, state=InstanceState.QUEUED), planned_for=(("t0", 1),)),
        agent("r", 1, state=InstanceState.REQUESTED),
        agent("al", 1, state=InstanceState.ALLOCATED),
    ]
    trials = [pending(f"t{i}") for i in range(4)]
    plan = plan_pool(pool(ONE), trials, starting, state(), NOW)
    assert len(plan.launches) == 1
    assert plan.launches[0].planned_for == (("t3", 1),)
    assert plan.pending_reasons["t0"] == "waiting for q to be launched"
    assert plan.pending_reasons["t1"] == "waiting for al to boot and register"
    assert plan.pending_reasons["t3"] == "waiting for a new g.1 (spot, subnet-a)"


def test_never_above_max_instances() -> None:
    trials = [pending(f"t{i}") for i in range(3)]
    plan = plan_pool(pool(ONE, max_instances=2), trials, [], state(), NOW)
    assert len(plan.launches) == 2
    assert "max_instances (2)" in plan.pending_reasons["t2"]


def test_room_needed_is_how_far_the_waiting_demand_is_short_of_max_instances() -> None:
    # One 1-GPU trial, the pool full of busy agents: one instance short. The reaper makes
    # that room from an idle agent the plan does not count on (test_reaper).
    busy = [agent(f"b{i}", 1, used=1, state=InstanceState.BUSY) for i in range(2)]
    plan = plan_pool(pool(ONE, max_instances=2), [pending("t1")], busy, state(), NOW)
    assert plan.launches == () and plan.room_needed == 1
    # A gang of three 4-GPU instances in a pool with room for one more: two short.
    full = [agent("b0", 4, used=4, state=InstanceState.BUSY)]
    plan = plan_pool(pool(FOUR, max_instances=2), [pending("gang", 12)], full, state(), NOW)
    assert plan.room_needed == 2
    # Room under max_instances, refused for the budget: no shortage of room.
    poor = pool(ONE, max_instances=5, monthly_budget_usd=0.5)
    plan = plan_pool(poor, [pending("t1")], [], state(), NOW, month_to_date_usd=0.5)
    assert plan.launches == () and plan.room_needed == 0


def test_gang_launches_all_its_instances_or_none() -> None:
    plan = plan_pool(pool(FOUR, max_instances=2), [pending("gang", 12)], [], state(), NOW)
    assert plan.launches == ()
    assert "max_instances" in plan.pending_reasons["gang"]
    plan = plan_pool(pool(FOUR, max_instances=3), [pending("gang", 12)], [], state(), NOW)
    assert types(plan) == ["g.4", "g.4", "g.4"]


def test_a_gang_is_bought_whole_and_its_leftover_serves_smaller_trials() -> None:
    plan = plan_pool(pool(FOUR), [pending("gang", 6), pending("small", 2)], [], state(), NOW)
    assert types(plan) == ["g.4", "g.4"]
    assert [launch.planned_for for launch in plan.launches] == [
        (("gang", 4),),
        (("gang", 2), ("small", 2)),
    ]


def test_planning_the_same_demand_again_launches_nothing() -> None:
    trials = [pending("gang", 6), pending("small", 1)]
    first = plan_pool(pool(ONE, FOUR), trials, [], state(), NOW)
    queued = [
        replace(
            agent(
                f"q{n}",
                launch.offering.slots,
                state=InstanceState.QUEUED,
                instance_type=launch.offering.instance_type,
            ),
            planned_for=launch.planned_for,
        )
        for n, launch in enumerate(first.launches)
    ]
    again = plan_pool(pool(ONE, FOUR), trials, queued, state(), NOW)
    assert again.launches == ()
    assert again.surplus == ()


def test_takes_back_an_agent_drained_for_idleness_instead_of_launching() -> None:
    drained = agent("drained", 1, state=InstanceState.DRAINING)
    plan = plan_pool(pool(ONE), [pending("t1")], [drained], state(), NOW)
    assert plan.launches == ()
    assert plan.reserved == {"drained"}


def test_never_reuses_an_agent_under_interruption_notice() -> None:
    doomed = replace(agent("doomed", 1, state=InstanceState.DRAINING), interruption_notice_at=NOW)
    plan = plan_pool(pool(ONE), [pending("t1")], [doomed], state(), NOW)
    assert len(plan.launches) == 1


def test_never_reuses_an_agent_consolidation_is_emptying() -> None:
    # Its trials are on their way to other agents; taking it back would undo the move.
    emptied = replace(agent("emptied", 1, state=InstanceState.DRAINING), consolidated_at=NOW)
    plan = plan_pool(pool(ONE), [pending("t1")], [emptied], state(), NOW)
    assert len(plan.launches) == 1 and plan.reserved == frozenset()


def test_skips_offerings_the_cloud_recently_refused_and_falls_back_to_on_demand() -> None:
    spot = offering("g.1", 1, 0.4, SPOT)
    od = offering("g.1", 1, 1.0, ON_DEMAND)
    memory = CapacityMemory().marked_unavailable(spot.key, NOW, 180)
    plan = plan_pool(pool(spot, od), [pending("t1")], [], state(capacity=memory), NOW)
    assert [launch.offering for launch in plan.launches] == [od]
    # Once the memory expires, spot is preferred again.
    later = plan_pool(pool(spot, od), [pending("t1")], [], state(capacity=memory), NOW + 181)
    assert [launch.offering for launch in later.launches] == [spot]


def test_no_fallback_means_waiting_with_a_reason() -> None:
    spot = offering("g.1", 1, 0.4, SPOT)
    memory = CapacityMemory().marked_unavailable(spot.key, NOW, 180)
    plan = plan_pool(
        pool(spot, on_demand_fallback=False), [pending("t1")], [], state(capacity=memory), NOW
    )
    assert plan.launches == ()
    assert "on_demand_fallback is off" in plan.pending_reasons["t1"]


def test_tops_up_min_instances_with_the_cheapest_offering() -> None:
    plan = plan_pool(pool(ONE, FOUR, min_instances=2), [], [agent("a", 4)], state(), NOW)
    assert types(plan) == ["g.1"]
    assert "min_instances" in plan.launches[0].reason


def test_monthly_budget_caps_launches() -> None:
    plan = plan_pool(
        pool(ONE, monthly_budget_usd=100.0),
        [pending("t1")],
        [],
        state(),
        NOW,
        month_to_date_usd=99.5,
    )
    assert plan.launches == ()
    assert "monthly budget" in plan.pending_reasons["t1"]
    plan = plan_pool(
        pool(ONE, monthly_budget_usd=100.0),
        [pending("t1")],
        [],
        state(),
        NOW,
        month_to_date_usd=10.0,
    )
    assert len(plan.launches) == 1


def test_the_budget_counts_disks_of_new_and_stopped_instances() -> None:
    # 1 USD/h of compute, 0.25 USD/h of disk: one new instance's hour is 1.25.
    def plan(budget: float, instances: list[Instance]) -> PoolPlan:
        return plan_pool(
            pool(ONE, monthly_budget_usd=budget, disk_hourly_usd=0.25, warm_pool_size=1),
            [pending("t1")],
            instances,
            state(),
            NOW,
            month_to_date_usd=10.0,
        )

    assert len(plan(11.25, []).launches) == 1
    assert "monthly budget" in plan(11.2, []).pending_reasons["t1"]
    # A stopped instance of the warm pool: its disk bills on, a quarter more each hour.
    stopped = make_instance(InstanceState.STOPPED, pool="gpu", offering=ONE)
    assert stopped.is_parked and stopped.cloud_id is not None
    refused = plan(11.4, [stopped])
    assert refused.launches == ()
    assert "monthly budget" in refused.pending_reasons["t1"]
    assert len(plan(11.6, [stopped]).launches) == 1
    assert infeasible_reason(1, pool(ONE, monthly_budget_usd=1.1, disk_hourly_usd=0.25)) == (
        "needs 1 GPUs, at least $1.25 an hour in pool gpu, more than its monthly budget of $1.10"
    )


def test_a_backed_off_pool_launches_nothing_and_says_why() -> None:
    backed = state(
        backoff_until=NOW + 60, backoff_failures=1, backoff_reason="VcpuLimitExceeded in us-east-1"
    )
    plan = plan_pool(pool(ONE, min_instances=1), [pending("t1")], [], backed, NOW)
    assert plan.launches == ()
    assert "VcpuLimitExceeded in us-east-1" in plan.pending_reasons["t1"]


def test_queued_records_nobody_needs_are_surplus() -> None:
    queued = agent("q", 1, state=InstanceState.QUEUED)
    requested_spot = replace(agent("r", 1, state=InstanceState.REQUESTED), spot_request_id="sir-1")
    plan = plan_pool(pool(ONE), [], [queued, requested_spot], state(), NOW)
    assert set(plan.surplus) == {"q", "r"}
    plan = plan_pool(pool(ONE, min_instances=1), [], [queued, requested_spot], state(), NOW)
    assert len(plan.surplus) == 1


def test_infeasible_trials_are_named_at_submit_time() -> None:
    assert infeasible_reason(8, pool(FOUR, max_instances=2)) is None
    reason = infeasible_reason(9, pool(FOUR, max_instances=2))
    assert reason == "needs 9 GPUs but pool gpu holds at most 8 (2 instances x 4 GPUs)"
    assert infeasible_reason(1, pool()) == "pool gpu has no instance type to launch"


def test_one_instance_and_one_gpu_are_singular_in_the_reason() -> None:
    assert infeasible_reason(9, pool(offering("g.8", 8, 9.0), max_instances=1)) == (
        "needs 9 GPUs but pool gpu holds at most 8 (1 instance x 8 GPUs)"
    )


def test_a_gang_spans_at_most_98_instances() -> None:
    # A trial is assigned with all its agents in one commit (100 items in DynamoDB), and a
    # member's termination writes them and the pool state: 105 one-GPU instances were
    # accepted, then every schedule pass failed on the commit.
    big = pool(ONE, max_instances=150)
    assert infeasible_reason(98, big) is None
    assert infeasible_reason(105, big) == (
        "needs 105 GPUs but a trial spans at most 98 instances: 98 GPUs in pool gpu (1 GPU each)"
    )
    # A bigger shape covers it on fewer instances.
    assert infeasible_reason(105, pool(ONE, FOUR, max_instances=150)) is None


def test_a_gang_is_never_planned_on_more_than_98_instances() -> None:
    gang = pending("wide", slots=120)
    plan = plan_pool(pool(ONE, FOUR, max_instances=150), [gang], [], state(), NOW)
    assert [launch.offering.instance_type for launch in plan.launches] == ["g.4"] * 30
    alone = plan_pool(pool(ONE, max_instances=150), [gang], [], state(), NOW)
    assert len(alone.launches) <= 98


# ---- gangs on the fewest instances (distributed.yaml on examples/cluster.yaml) ------------
SMALL_SPOT = offering("g5.xlarge", 1, 0.4, SPOT, "us-east-1")
BIG_SPOT = offering("g5.12xlarge", 4, 2.25, SPOT, "us-east-1")
SMALL_OD = offering("g5.xlarge", 1, 1.006, ON_DEMAND, "us-east-1")
BIG_OD = offering("g5.12xlarge", 4, 5.672, ON_DEMAND, "us-east-1")


def example_pool(**settings: object):  # type: ignore[no-untyped-def]
    settings.setdefault("max_instances", 4)
    return pool(SMALL_SPOT, BIG_SPOT, SMALL_OD, BIG_OD, **settings)


def test_a_gang_is_planned_on_the_fewest_instances_that_fit_max_instances() -> None:
    # 8 x g5.xlarge is the cheapest per GPU but can never fit max_instances 4.
    plan = plan_pool(example_pool(), [pending("gang", 8)], [], state(), NOW)
    assert [launch.offering for launch in plan.launches] == [BIG_SPOT, BIG_SPOT]
    assert [launch.planned_for for launch in plan.launches] == [(("gang", 4),), (("gang", 4),)]
    assert plan.pending_reasons["gang"] == "waiting for a new g5.12xlarge (spot, us-east-1)"


def test_a_gang_prefers_fewest_instances_then_the_cheapest() -> None:
    # Without max_instances in the way, fewer nodes still win over a cheaper GPU-hour.
    plan = plan_pool(example_pool(max_instances=20), [pending("gang", 8)], [], state(), NOW)
    assert [launch.offering for launch in plan.launches] == [BIG_SPOT, BIG_SPOT]
    # Among equally few instances, the cheapest: spot before on-demand.
    memory = CapacityMemory().marked_unavailable(BIG_SPOT.key, NOW, 180)
    plan = plan_pool(example_pool(), [pending("gang", 8)], [], state(capacity=memory), NOW)
    assert [launch.offering for launch in plan.launches] == [BIG_OD, BIG_OD]


def test_a_gang_falls_back_to_more_instances_when_the_fewest_do_not_fit_the_budget() -> None:
    # Two g5.12xlarge on-demand ($11.34/h) exceed the budget; eight g5.xlarge spot fit.
    only = pool(SMALL_SPOT, BIG_OD, max_instances=10, monthly_budget_usd=10.0)
    plan = plan_pool(only, [pending("gang", 8)], [], state(), NOW)
    assert [launch.offering for launch in plan.launches] == [SMALL_SPOT] * 8


def test_a_gang_uses_entirely_free_agents_of_its_type_and_buys_only_the_rest() -> None:
    idle = agent("idle", 4, instance_type="g5.12xlarge", price=2.25)
    plan = plan_pool(example_pool(), [pending("gang", 8)], [idle], state(), NOW)
    assert [launch.offering for launch in plan.launches] == [BIG_SPOT]
    assert plan.reserved == {"idle"}  # the reaper must keep it for the gang
    # Planned again with the launch queued: nothing new, and the idle agent stays reserved.
    queued = replace(
        agent("q", 4, state=InstanceState.QUEUED, instance_type="g5.12xlarge"),
        planned_for=plan.launches[0].planned_for,
    )
    again = plan_pool(example_pool(), [pending("gang", 8)], [idle, queued], state(), NOW)
    assert again.launches == ()
    assert again.reserved == {"idle"}
    assert again.surplus == ()


def test_a_gang_half_registered_keeps_its_registered_agent_reserved() -> None:
    # One of the gang's two instances registered, the other still boots.
    up = agent("up", 4, instance_type="g5.12xlarge")
    booting = replace(
        agent("booting", 4, state=InstanceState.ALLOCATED, instance_type="g5.12xlarge"),
        planned_for=(("gang", 4),),
    )
    plan = plan_pool(example_pool(), [pending("gang", 8)], [up, booting], state(), NOW)
    assert plan.launches == ()
    assert plan.reserved == {"up"}
    assert plan.pending_reasons["gang"] == "waiting for booting to boot and register"


def test_a_gang_whose_other_launch_failed_gets_the_missing_instance() -> None:
    booting = replace(
        agent("booting", 4, state=InstanceState.ALLOCATED, instance_type="g5.12xlarge"),
        planned_for=(("gang", 4),),
    )
    plan = plan_pool(example_pool(), [pending("gang", 8)], [booting], state(), NOW)
    assert [launch.planned_for for launch in plan.launches] == [(("gang", 4),)]
    assert plan.launches[0].offering.instance_type == "g5.12xlarge"


def test_single_gpu_trials_are_still_bought_cheapest_per_useful_gpu() -> None:
    plan = plan_pool(example_pool(), [pending("t0"), pending("t1")], [], state(), NOW)
    assert [launch.offering for launch in plan.launches] == [SMALL_SPOT, SMALL_SPOT]


def test_infeasible_reason_counts_a_gang_that_no_budget_can_ever_pay() -> None:
    # Two g5.12xlarge on-demand for one hour cost more than the whole monthly budget.
    only_od = pool(BIG_OD, max_instances=4, monthly_budget_usd=10.0)
    assert infeasible_reason(4, only_od) is None
    reason = infeasible_reason(8, only_od)
    assert reason is not None and "monthly budget" in reason
    assert infeasible_reason(8, example_pool()) is None
    assert infeasible_reason(16, example_pool()) is None
    assert infeasible_reason(17, example_pool()) is not None
