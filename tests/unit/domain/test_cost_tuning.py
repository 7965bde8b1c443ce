"""Corral's cost tuning: burst-aware offering choice, cost-aware best fit, and early
release of idle on-demand fallback agents (``reap_fallback_early``)."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.instance import InstanceState
from corral.domain.packing import Bin, BinIndex
from corral.domain.planner import PRESSURE_WINDOW_S, plan_pool, under_pressure
from corral.domain.reaper import drain_deadline, idle_limit_s, plan_reaping
from corral.domain.records import PoolState

from .factories import NOW, make_instance, make_offering
from .factories import make_pool as make_static_pool
from .fleet import ON_DEMAND, SPOT, agent, offering, pending, pool

# V100-like shapes: the 4- and 8-GPU instances cost the same per GPU, a bit less than 1-GPU.
P1 = offering("p1", 1, 0.92)
P4 = offering("p4", 4, 3.67)
P8 = offering("p8", 8, 7.34)


def launched_for_demand(at: float) -> object:
    """An agent launched at ``at`` for a trial that now runs on it (no room left)."""
    return replace(agent("recent", 1, used=1, at=at), planned_for=(("x", 1),))


def test_right_sizes_when_no_burst_is_going_on() -> None:
    plan = plan_pool(pool(P1, P4, P8), [pending("t")], [], PoolState("gpu"), 10_000.0)
    assert [launch.offering.instance_type for launch in plan.launches] == ["p1"]


def test_buys_the_biggest_equally_cheap_shape_under_arrival_pressure() -> None:
    now = 10_000.0
    recent = launched_for_demand(now - 60)
    assert under_pressure([recent], now)  # type: ignore[list-item]
    plan = plan_pool(pool(P1, P4, P8), [pending("t")], [recent], PoolState("gpu"), now)  # type: ignore[list-item]
    assert [launch.offering.instance_type for launch in plan.launches] == ["p8"]


def test_pressure_fades_and_never_buys_dearer_gpus() -> None:
    now = 100_000.0
    old = launched_for_demand(now - PRESSURE_WINDOW_S - 1)
    assert not under_pressure([old], now)  # type: ignore[list-item]
    # g5-like prices: the 8-GPU shape costs twice as much per GPU; pressure does not matter.
    small, big = offering("s", 1, 0.40), offering("b", 8, 6.50)
    recent = launched_for_demand(now - 60)
    plan = plan_pool(pool(small, big), [pending("t")], [recent], PoolState("gpu"), now)  # type: ignore[list-item]
    assert [launch.offering.instance_type for launch in plan.launches] == ["s"]


def test_best_fit_fills_cheap_agents_before_expensive_ones() -> None:
    index = BinIndex.of(
        [
            Bin("on-demand", "p4", 4, [3], hourly_price=12.24),  # one GPU free: tightest
            Bin("spot", "p4", 4, [2, 3], hourly_price=3.67),
        ]
    )
    assert index.place(1) == (("spot", (2,)),)
    # Only the expensive agent has room: it is used rather than nothing.
    only = BinIndex.of([Bin("on-demand", "p4", 4, [3], hourly_price=12.24)])
    assert only.place(1) == (("on-demand", (3,)),)


def test_equally_priced_agents_keep_tightest_fit() -> None:
    index = BinIndex.of(
        [
            Bin("loose", "p8", 8, list(range(8)), hourly_price=7.34),
            Bin("tight", "p4", 4, [3], hourly_price=3.67),
        ]
    )
    assert index.place(1) == (("tight", (3,)),)


SPOT_1 = make_offering("g.1", capacity_type=SPOT, hourly_price=0.4)
OD_1 = make_offering("g.1", capacity_type=ON_DEMAND, hourly_price=1.0)


def idle_od(idle_for: float, boot_s: float = 30.0) -> object:
    # factories: launched, then registered step_s later; idle since NOW - idle_for.
    return make_instance(
        InstanceState.IDLE, id="od", offering=OD_1, step_s=boot_s, idle_since=NOW - idle_for
    )


def test_idle_on_demand_fallback_is_released_after_its_boot_time() -> None:
    spot_pool = make_static_pool(SPOT_1, OD_1, max_idle_s=1200.0)
    inst = idle_od(idle_for=31.0, boot_s=30.0)
    assert idle_limit_s(spot_pool, inst) == 30.0  # type: ignore[arg-type]
    assert drain_deadline(spot_pool, inst) == NOW - 31.0 + 30.0  # type: ignore[arg-type]
    plan = plan_reaping(spot_pool, [inst], NOW)  # type: ignore[list-item]
    assert [d.instance.id for d in plan.drain] == ["od"]
    assert "on-demand fallback" in plan.drain[0].reason


def test_the_setting_turns_early_release_off() -> None:
    spot_pool = make_static_pool(SPOT_1, OD_1, max_idle_s=1200.0, reap_fallback_early=False)
    inst = idle_od(idle_for=600.0)
    assert idle_limit_s(spot_pool, inst) == 1200.0  # type: ignore[arg-type]
    assert plan_reaping(spot_pool, [inst], NOW).drain == ()  # type: ignore[list-item]


def test_spot_agents_and_on_demand_pools_keep_max_idle() -> None:
    spot_pool = make_static_pool(SPOT_1, OD_1, max_idle_s=1200.0)
    spot = make_instance(InstanceState.IDLE, id="s", offering=SPOT_1, idle_since=NOW - 600)
    assert idle_limit_s(spot_pool, spot) == 1200.0
    od_pool = make_static_pool(OD_1, max_idle_s=1200.0)
    assert idle_limit_s(od_pool, idle_od(600.0)) == 1200.0  # type: ignore[arg-type]


def test_never_later_than_max_idle_agent_period() -> None:
    spot_pool = make_static_pool(SPOT_1, OD_1, max_idle_s=60.0)
    assert idle_limit_s(spot_pool, idle_od(10.0, boot_s=600.0)) == 60.0  # type: ignore[arg-type]
