"""Consolidation's rules, one test each: which agent is emptied, when, and where its trials go."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.consolidation import MIN_RUN_S, plan_consolidation
from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import CapacityType, Offering
from corral.domain.trial import Placement, Trial, TrialState

from .factories import NOW, make_instance, make_offering, make_pool, make_trial

IS = InstanceState
SPOT_4 = make_offering("p.4", capacity_type=CapacityType.SPOT, slots=4, hourly_price=4.0)
OD_4 = make_offering("p.4", capacity_type=CapacityType.ON_DEMAND, slots=4, hourly_price=12.0)
POOL = make_pool(SPOT_4, OD_4, consolidate=True)
LONG_AGO = NOW - MIN_RUN_S - 60


def agent(name: str, trials: tuple[str, ...], offering: Offering = SPOT_4) -> Instance:
    state = IS.BUSY if trials else IS.IDLE
    return make_instance(state, id=name, offering=offering, trials=trials)


def running(
    trial_id: str,
    on: str,
    *,
    since: float = LONG_AGO,
    checkpoint: str | None = "ckpt",
    gpus: int = 1,
) -> Trial:
    placement = Placement(((on, tuple(range(gpus))),))
    return make_trial(
        TrialState.RUNNING,
        id=trial_id,
        entered_at=since,
        slots=gpus,
        placement=placement,
        latest_checkpoint=checkpoint,
    )


def by_id(*trials: Trial) -> dict[str, Trial]:
    return {t.id: t for t in trials}


def test_the_emptiest_agent_moves_its_checkpointed_trials_onto_a_busy_agent() -> None:
    # 4-GPU agents: "a" runs one trial, "b" two, "c" three. Emptying "a" saves a whole agent,
    # and after the move two GPUs are still free (b's), half an agent, for the next arrivals.
    a = agent("a", ("t1",))
    b = agent("b", ("t2", "t3"))
    c = agent("c", ("t4", "t5", "t6"))
    trials = by_id(
        running("t1", "a"),
        running("t2", "b"),
        running("t3", "b"),
        running("t4", "c"),
        running("t5", "c"),
        running("t6", "c"),
    )
    move = plan_consolidation(POOL, [a, b, c], trials, NOW, waiting=False)
    assert move is not None
    assert move.source.id == "a"
    assert [t.id for t in move.trials] == ["t1"]
    assert move.targets == ("c",)  # best fit: the fullest agent that holds it
    assert move.reason.startswith("consolidating: 1 of 4 GPUs in use")


def test_nothing_moves_unless_the_pool_opts_in() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    trials = by_id(running("t1", "a"), running("t2", "b"))
    off = make_pool(SPOT_4, OD_4)
    assert plan_consolidation(off, [a, b], trials, NOW, waiting=False) is None
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=False) is not None


def test_nothing_moves_while_a_trial_of_the_pool_waits() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    trials = by_id(running("t1", "a"), running("t2", "b"))
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=True) is None


def test_a_trial_without_a_checkpoint_is_never_moved() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    trials = by_id(running("t1", "a", checkpoint=None), running("t2", "b", checkpoint=None))
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=False) is None


def test_a_trial_placed_or_moved_recently_stays_put() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    fresh = NOW - MIN_RUN_S + 30
    trials = by_id(running("t1", "a", since=fresh), running("t2", "b", since=fresh))
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=False) is None


def test_an_agent_with_a_trial_that_is_not_running_is_left_alone() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    starting = make_trial(TrialState.ASSIGNED, id="t1", placement=Placement((("a", (0,)),)))
    trials = {"t1": starting, "t2": running("t2", "b")}
    move = plan_consolidation(POOL, [a, b], trials, NOW, waiting=False)
    assert move is not None and move.source.id == "b"  # b's trial may go to a, not a's to b


def test_gang_members_are_never_moved() -> None:
    a, b = agent("a", ("g",)), agent("b", ("g",))
    gang = make_trial(
        TrialState.RUNNING,
        id="g",
        slots=2,
        entered_at=LONG_AGO,
        placement=Placement((("a", (0,)), ("b", (0,)))),
        latest_checkpoint="ckpt",
    )
    # A third, idle agent leaves spare room: only the gang rule can refuse the move.
    spare = agent("idle", ())
    assert plan_consolidation(POOL, [a, b, spare], {"g": gang}, NOW, waiting=False) is None


def test_no_move_when_the_trials_do_not_fit_elsewhere() -> None:
    a = agent("a", ("t1", "t2"))
    b = agent("b", ("t3", "t4", "t5"))
    trials = by_id(
        *(running(t, "a") for t in ("t1", "t2")), *(running(t, "b") for t in ["t3", "t4", "t5"])
    )
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=False) is None


def test_a_move_keeps_half_an_agent_of_spare_gpus_for_the_next_arrivals() -> None:
    # a's one trial fits on b's last free GPU, but then no free GPU is left in the pool.
    a = agent("a", ("t1",))
    b = agent("b", ("t2", "t3", "t4"))
    trials = by_id(running("t1", "a"), *(running(t, "b") for t in ("t2", "t3", "t4")))
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=False) is None
    # With an idle agent's GPUs spare, the same move is made.
    spare = agent("idle", ())
    move = plan_consolidation(POOL, [a, b, spare], trials, NOW, waiting=False)
    assert move is not None and move.source.id == "a" and move.targets == ("b",)


def test_fallback_capacity_is_emptied_first_and_may_go_back_to_idle_spot() -> None:
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)  # full, 3x the price
    spot_idle = agent("spot", ())
    spot_busy = agent("busy", ("t5",))
    trials = by_id(*(running(t, "od") for t in ("t1", "t2", "t3", "t4")), running("t5", "busy"))
    move = plan_consolidation(POOL, [on_demand, spot_idle, spot_busy], trials, NOW, waiting=False)
    assert move is not None and move.source.id == "od"
    assert sorted(move.targets) == ["busy", "busy", "busy", "spot"]


def test_work_is_never_moved_onto_fallback_capacity() -> None:
    spot = agent("spot", ("t1",))
    on_demand = agent("od", ("t2",), offering=OD_4)
    trials = by_id(running("t1", "spot"), running("t2", "od"))
    move = plan_consolidation(POOL, [spot, on_demand], trials, NOW, waiting=False)
    # The on-demand agent's trial may go to the spot agent; never the other way round.
    assert move is not None and move.source.id == "od" and move.targets == ("spot",)


def test_agents_on_their_way_out_are_neither_sources_nor_targets() -> None:
    a = agent("a", ("t1",))
    noticed = make_instance(
        IS.BUSY, id="n", offering=SPOT_4, trials=("t2",), interruption_notice_at=NOW
    )
    trials = by_id(running("t1", "a"), running("t2", "n"))
    assert plan_consolidation(POOL, [a, noticed], trials, NOW, waiting=False) is None


def test_fallback_work_goes_back_to_spot_once_a_spot_launch_succeeded_since() -> None:
    # The on-demand agent is full and no spot agent has room: its trials move only when spot
    # capacity is known to be back (a spot instance launched after the fallback agent).
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)
    full_spot = agent("spot", ("t5", "t6", "t7", "t8"))
    trials = by_id(
        *(running(t, "od") for t in ("t1", "t2", "t3", "t4")),
        *(running(t, "spot") for t in ("t5", "t6", "t7", "t8")),
    )
    older = replace(full_spot, launched_at=(on_demand.launched_at or 0.0) - 60)
    assert plan_consolidation(POOL, [on_demand, older], trials, NOW, waiting=False) is None
    newer = replace(full_spot, launched_at=(on_demand.launched_at or 0.0) + 60)
    move = plan_consolidation(POOL, [on_demand, newer], trials, NOW, waiting=False)
    assert move is not None and move.source.id == "od" and move.targets == ()
    assert "spot is back (spot launched since)" in move.reason
    # A spot agent is never moved for want of room: only fallback capacity goes back.
    spot_only = by_id(*(running(t, "spot") for t in ("t5", "t6", "t7", "t8")))
    assert plan_consolidation(POOL, [newer], spot_only, NOW, waiting=False) is None


def test_no_move_that_would_leave_the_pool_below_min_instances() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    trials = by_id(running("t1", "a"), running("t2", "b"))
    floor = make_pool(SPOT_4, OD_4, consolidate=True, min_instances=2)
    assert plan_consolidation(floor, [a, b], trials, NOW, waiting=False) is None
    spare = make_pool(SPOT_4, OD_4, consolidate=True, min_instances=1)
    assert plan_consolidation(spare, [a, b], trials, NOW, waiting=False) is not None


def test_no_move_back_to_spot_while_another_fallback_agent_has_room() -> None:
    # The trials would land on the other on-demand agent's free GPUs, not on spot (the
    # simulator showed such moves repeating every 10 minutes).
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)
    other = agent("od2", ("t9",), offering=OD_4)
    spot = replace(
        agent("spot", ("t5", "t6", "t7", "t8")), launched_at=(on_demand.launched_at or 0.0) + 60
    )
    trials = by_id(
        *(running(t, "od") for t in ("t1", "t2", "t3", "t4")),
        *(running(t, "spot") for t in ("t5", "t6", "t7", "t8")),
        running("t9", "od2"),
    )
    move = plan_consolidation(POOL, [on_demand, other, spot], trials, NOW, waiting=False)
    # The emptier "od2" goes back to spot first (no other fallback agent has room for its
    # trial); "od" is not moved while "od2" has free GPUs that would take its trials.
    assert move is not None and move.source.id == "od2"
    without_od2 = by_id(*(t for t in trials.values() if t.id != "t9"))
    only_od = plan_consolidation(POOL, [on_demand, other, spot], without_od2, NOW, waiting=False)
    assert only_od is None


def test_fallback_agents_are_emptied_before_emptier_spot_agents() -> None:
    spot = agent("a-spot", ("t1",))  # one trial: the emptiest
    on_demand = agent("z-od", ("t2", "t3"), offering=OD_4)
    room = agent("room", ("t4",))
    spare = agent("spare", ())
    trials = by_id(running("t1", "a-spot"), running("t2", "z-od"), running("t3", "z-od"))
    trials |= by_id(running("t4", "room"))
    agents = [spot, on_demand, room, spare]
    move = plan_consolidation(POOL, agents, trials, NOW, waiting=False)
    assert move is not None and move.source.id == "z-od"


def test_spot_work_never_moves_onto_free_gpus_of_a_fallback_agent() -> None:
    spot = agent("spot", ("t1",))
    on_demand = agent("od", ("t2",), offering=OD_4)  # free GPUs, but on-demand
    other = agent("spot2", ("t3", "t4", "t5", "t6"))  # full: nowhere else to go
    trials = by_id(running("t1", "spot"), *(running(t, "spot2") for t in ("t3", "t4", "t5", "t6")))
    spare = agent("spare", ())  # idle spot: room for arrivals, not a target for spot work
    # The on-demand agent's own trial is unknown (not running yet): only "spot" could move.
    agents = [spot, on_demand, other, spare]
    assert plan_consolidation(POOL, agents, trials, NOW, waiting=False) is None


def test_a_trial_moved_recently_stays_put_however_long_it_ran_before() -> None:
    a, b = agent("a", ("t1",)), agent("b", ("t2",))
    old_run = running("t1", "a", since=LONG_AGO - 3600)
    # Moved (or preempted) 5 minutes ago: its latest run is young.
    resumed = (
        old_run.transition(TrialState.PREEMPTED, NOW - 400, "moved")
        .transition(TrialState.PENDING, NOW - 390, "requeued")
        .assigned(Placement((("a", (0,)),)), NOW - 310)
        .transition(TrialState.RUNNING, NOW - 300, "running")
    )
    trials = by_id(replace(resumed, latest_checkpoint="ckpt"), running("t2", "b", since=NOW - 60))
    assert plan_consolidation(POOL, [a, b], trials, NOW, waiting=False) is None


def test_fallback_gpus_are_no_spare_room() -> None:
    # a's trial fits on b; the only other free GPUs are on an on-demand agent, which does not
    # count as room for the next arrivals.
    a, b = agent("a", ("t1",)), agent("b", ("t2", "t3", "t4"))
    on_demand = agent("od", (), offering=OD_4)
    trials = by_id(running("t1", "a"), *(running(t, "b") for t in ("t2", "t3", "t4")))
    assert plan_consolidation(POOL, [a, b, on_demand], trials, NOW, waiting=False) is None


def test_back_to_spot_needs_a_newer_spot_launch_not_any_newer_launch() -> None:
    on_demand = agent("od", ("t1", "t2", "t3", "t4"), offering=OD_4)
    newer_od = replace(
        agent("od2", ("t5", "t6", "t7", "t8"), offering=OD_4),
        launched_at=(on_demand.launched_at or 0.0) + 60,
    )
    trials = by_id(
        *(running(t, "od") for t in ("t1", "t2", "t3", "t4")),
        *(running(t, "od2") for t in ("t5", "t6", "t7", "t8")),
    )
    assert plan_consolidation(POOL, [on_demand, newer_od], trials, NOW, waiting=False) is None


def test_fallback_work_goes_to_idle_spot_agents_never_to_idle_on_demand_ones() -> None:
    on_demand = agent("od", ("t1",), offering=OD_4)
    idle_od = agent("od-idle", (), offering=OD_4)
    trials = by_id(running("t1", "od"))
    assert plan_consolidation(POOL, [on_demand, idle_od], trials, NOW, waiting=False) is None
    idle_spot = agent("spot-idle", ())
    move = plan_consolidation(POOL, [on_demand, idle_od, idle_spot], trials, NOW, waiting=False)
    assert move is not None and move.targets == ("spot-idle",)
