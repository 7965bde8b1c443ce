"""On-demand fallback capacity goes back to spot by default (``move_fallback_to_spot``), also
in pools that do not consolidate: only fallback agents are ever emptied there."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.consolidation import plan_consolidation

from .factories import NOW, make_pool
from .test_consolidation import OD_4, SPOT_4, agent, by_id, running

DEFAULT = make_pool(SPOT_4, OD_4)  # consolidate off, move_fallback_to_spot on (the default)


def test_by_default_a_busy_fallback_agent_goes_back_to_spot_without_consolidate() -> None:
    on_demand = agent("od", ("t1",), offering=OD_4)
    spot = agent("spot", ("t2",))
    trials = by_id(running("t1", "od"), running("t2", "spot"))
    move = plan_consolidation(DEFAULT, [on_demand, spot], trials, NOW, waiting=False)
    assert move is not None and move.source.id == "od" and move.targets == ("spot",)


def test_by_default_a_full_fallback_agent_is_requeued_once_spot_launched_since() -> None:
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)
    full_spot = agent("spot", ("t5", "t6", "t7", "t8"))
    trials = by_id(
        *(running(t, "od") for t in ("t1", "t2", "t3", "t4")),
        *(running(t, "spot") for t in ("t5", "t6", "t7", "t8")),
    )
    newer = replace(full_spot, launched_at=(on_demand.launched_at or 0.0) + 60)
    move = plan_consolidation(DEFAULT, [on_demand, newer], trials, NOW, waiting=False)
    assert move is not None and move.source.id == "od" and move.targets == ()
    assert "spot is back" in move.reason


def test_without_consolidate_an_under_used_spot_agent_is_never_emptied() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2", "t3"))
    trials = by_id(running("t1", "a"), running("t2", "b"), running("t3", "b"))
    assert plan_consolidation(DEFAULT, [a, b], trials, NOW, waiting=False) is None


def test_turned_off_fallback_work_stays_on_demand() -> None:
    off = make_pool(SPOT_4, OD_4, move_fallback_to_spot=False)
    on_demand = agent("od", ("t1",), offering=OD_4)
    spot = agent("spot", ("t2",))
    trials = by_id(running("t1", "od"), running("t2", "spot"))
    assert plan_consolidation(off, [on_demand, spot], trials, NOW, waiting=False) is None


def test_turned_off_with_consolidate_fallback_work_is_never_requeued_for_spot() -> None:
    # Consolidation still empties it onto free GPUs; it is not sent to wait for new spot.
    pool = make_pool(SPOT_4, OD_4, consolidate=True, move_fallback_to_spot=False)
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)
    full_spot = agent("spot", ("t5", "t6", "t7", "t8"))
    trials = by_id(
        *(running(t, "od") for t in ("t1", "t2", "t3", "t4")),
        *(running(t, "spot") for t in ("t5", "t6", "t7", "t8")),
    )
    newer = replace(full_spot, launched_at=(on_demand.launched_at or 0.0) + 60)
    assert plan_consolidation(pool, [on_demand, newer], trials, NOW, waiting=False) is None


def test_fallback_work_without_a_checkpoint_or_run_time_stays() -> None:
    on_demand = agent("od", ("t1",), offering=OD_4)
    spot = agent("spot", ("t2",))
    fresh = by_id(running("t1", "od", since=NOW - 60), running("t2", "spot"))
    assert plan_consolidation(DEFAULT, [on_demand, spot], fresh, NOW, waiting=False) is None
    no_ckpt = by_id(running("t1", "od", checkpoint=None), running("t2", "spot"))
    assert plan_consolidation(DEFAULT, [on_demand, spot], no_ckpt, NOW, waiting=False) is None


def test_the_reason_says_the_fallback_agent_goes_back_to_spot() -> None:
    on_demand = agent("od", ("t1",), offering=OD_4)
    spot = agent("spot", ("t2",))
    trials = by_id(running("t1", "od"), running("t2", "spot"))
    move = plan_consolidation(DEFAULT, [on_demand, spot], trials, NOW, waiting=False)
    assert move is not None
    assert move.reason == "on-demand fallback: moving its trials to spot (spot)"


def test_onto_an_idle_spot_agent_no_spare_gpus_need_to_stay() -> None:
    # The idle agent is the reaper's to let go; keeping the on-demand one costs 3x spot.
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)
    idle_spot = agent("spot", ())
    trials = by_id(*(running(t, "od") for t in ("t1", "t2", "t3", "t4")))
    move = plan_consolidation(DEFAULT, [on_demand, idle_spot], trials, NOW, waiting=False)
    assert move is not None and move.targets == ("spot",) * 4


def test_onto_busy_spot_agents_half_an_agent_stays_free() -> None:
    # Using up the busy agents' last free GPUs would make the next arrivals wait (and, in a
    # spot outage, buy on-demand again).
    on_demand = agent("od", ("t1",), offering=OD_4)
    spot = agent("spot", ("t2", "t3", "t4"))  # one GPU free: none would stay
    trials = by_id(
        *(running(t, "od") for t in ("t1",)), *(running(t, "spot") for t in ("t2", "t3", "t4"))
    )
    assert plan_consolidation(DEFAULT, [on_demand, spot], trials, NOW, waiting=False) is None
