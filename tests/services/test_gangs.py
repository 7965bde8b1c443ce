"""Gang trials through the services: planned on the fewest instances the pool may buy,
accepted at submit whenever some shape of the pool can ever run them, and explained when
they wait (examples/distributed.yaml on examples/cluster.yaml)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.api import views
from corral.domain.instance import InstanceState
from corral.domain.offerings import CapacityType, Offering
from corral.domain.trial import TrialState
from corral.services.schedule_pass import run_schedule_pass
from corral.services.submit import SubmitError

from .harness import Cluster, Script, make_pool

# The shapes and spot prices of examples/cluster.yaml's default pool.
SMALL = Offering("g5.xlarge", "us-east-1", CapacityType.SPOT, 1, 0.4)
BIG = Offering("g5.12xlarge", "us-east-1", CapacityType.SPOT, 4, 2.25)


def example_cluster(**settings: object) -> Cluster:
    settings.setdefault("max_instances", 4)
    return Cluster(make_pool(SMALL, BIG, **settings))


def test_an_eight_gpu_gang_runs_on_two_four_gpu_instances_and_completes() -> None:
    cluster = example_cluster()
    (trial,) = cluster.submit(resources={"slots_per_trial": 8}).trials
    cluster.scripts[trial.id] = Script(duration_s=60)
    cluster.pump()

    launched = cluster.instances()
    assert [i.offering.instance_type for i in launched] == ["g5.12xlarge", "g5.12xlarge"]
    assert all(i.planned_for == ((trial.id, 4),) for i in launched)

    cluster.run(60)
    running = cluster.trial(trial.id)
    assert running.state is TrialState.RUNNING
    assert running.placement is not None
    assert sorted(running.placement.instance_ids) == sorted(i.id for i in launched)
    cluster.run(120)
    assert cluster.trial(trial.id).state is TrialState.COMPLETED


@pytest.mark.parametrize("slots", [5, 8, 13, 16])
def test_every_gang_some_shape_can_run_is_accepted_and_planned(slots: int) -> None:
    cluster = example_cluster()
    (trial,) = cluster.submit(resources={"slots_per_trial": slots}).trials
    cluster.pump()
    launched = cluster.instances()
    assert launched and len(launched) <= 4
    assert sum(i.slots for i in launched) >= slots
    assert {i.offering.instance_type for i in launched} == {"g5.12xlarge"}
    assert (cluster.trial(trial.id).pending_reason or "").startswith("waiting for ")


def test_what_no_shape_can_ever_run_is_rejected_naming_the_field() -> None:
    cluster = example_cluster()
    with pytest.raises(SubmitError) as raised:
        cluster.submit(resources={"slots_per_trial": 17})
    assert raised.value.field == "resources.slots_per_trial"
    assert "holds at most 16" in raised.value.reason
    # Two g5.12xlarge for one hour cost more than this whole monthly budget.
    poor = example_cluster(monthly_budget_usd=4.0)
    with pytest.raises(SubmitError) as raised:
        poor.submit(resources={"slots_per_trial": 8})
    assert raised.value.field == "resources.slots_per_trial"
    assert "monthly budget" in raised.value.reason
    assert poor.store.trials() == []
    assert poor.submit(resources={"slots_per_trial": 4}).trials


def test_a_pool_that_cannot_serve_its_queue_says_so() -> None:
    cluster = example_cluster()
    # Four 1-GPU trials fill max_instances with g5.xlarge; the gang then cannot be bought.
    smalls = cluster.submit(
        name="smalls",
        searcher={"name": "grid"},
        hyperparameters={"lr": {"type": "categorical", "vals": [1, 2, 3, 4]}},
    ).trials
    for t in smalls:
        cluster.scripts[t.id] = Script(duration_s=3600)
    cluster.pump()
    cluster.run(60)
    assert all(cluster.trial(t.id).state is TrialState.RUNNING for t in smalls)
    (pool,) = views.list_pools(cluster.ctx).pools
    assert pool.cannot_serve is None and pool.trials_unserved == 0

    (gang,) = cluster.submit(resources={"slots_per_trial": 8}).trials
    cluster.pump()
    reason = cluster.trial(gang.id).pending_reason or ""
    assert reason.startswith("pool gpu is at max_instances (4)")
    (pool,) = views.list_pools(cluster.ctx).pools
    assert pool.trials_unserved == 1
    assert pool.cannot_serve is not None
    assert "1 pending trial(s) no launch serves" in pool.cannot_serve
    assert "at max_instances (4)" in pool.cannot_serve


def test_a_backed_off_pool_cannot_serve_trials_whose_launch_is_still_queued() -> None:
    cluster = example_cluster()
    cluster.submit()
    run_schedule_pass(cluster.ctx)  # the launch is written, its message not yet handled
    (record,) = cluster.instances()
    assert record.state is InstanceState.QUEUED and record.planned_for
    (pool,) = views.list_pools(cluster.ctx).pools
    assert pool.cannot_serve is None
    now = cluster.clock.now()
    state = cluster.store.pool_state("gpu")
    cluster.store.commit(
        [replace(state, backoff_until=now + 300, backoff_failures=1, backoff_reason="quota")]
    )
    (pool,) = views.list_pools(cluster.ctx).pools
    assert pool.trials_unserved == 1
    assert pool.cannot_serve is not None and "quota" in pool.cannot_serve


def test_a_gang_rank_that_heartbeats_late_still_gets_its_start() -> None:
    cluster = example_cluster()
    (trial,) = cluster.submit(resources={"slots_per_trial": 8}).trials
    cluster.scripts[trial.id] = Script(duration_s=60)
    cluster.pump()
    deadline = cluster.clock.now() + 600
    while cluster.trial(trial.id).state is TrialState.PENDING:
        cluster.step(5)
        assert cluster.clock.now() < deadline
    placement = cluster.trial(trial.id).placement
    assert placement is not None
    rank0 = next(a for a in cluster.agents.values() if a.agent_id == placement.instance_ids[0])
    # Rank 0's heartbeats are late by a few periods: the other rank starts and reports first.
    rank0.alive = False
    cluster.run(15)
    rank0.alive = True
    cluster.run(180)
    done = cluster.trial(trial.id)
    assert done.state is TrialState.COMPLETED
    # Nothing was lost: rank 0 was sent its start, and the trial never went back to PENDING.
    assert [h.state for h in done.history].count(TrialState.PENDING) == 1, done.history


def test_idle_agents_of_the_wrong_shape_make_room_for_a_gang_at_once() -> None:
    """The local stack's sequence: a 1-GPU grid leaves four idle g5.xlarge (max_instances 4),
    then the 8-GPU gang arrives. It must not wait for their idle period to end."""
    from corral.services.idle_reap import run_idle_reap

    cluster = example_cluster(max_idle_s=600.0)
    grid = cluster.submit(
        name="grid",
        hyperparameters={"x": {"type": "categorical", "vals": [1, 2, 3, 4]}},
        searcher={"name": "grid", "metric": "loss"},
    )
    for t in grid.trials:
        cluster.scripts[t.id] = Script(duration_s=10)
    cluster.pump()
    cluster.run(90)
    assert [i.offering.instance_type for i in cluster.instances()] == ["g5.xlarge"] * 4
    assert all(cluster.trial(t.id).state is TrialState.COMPLETED for t in grid.trials)

    (gang,) = cluster.submit(name="gang", resources={"slots_per_trial": 8}).trials
    cluster.pump()
    assert "max_instances" in (cluster.trial(gang.id).pending_reason or "")
    report = run_idle_reap(cluster.ctx)  # one timer pass, well within the idle period
    assert len(report.terminated) == 2  # the room the gang needs, no more
    cluster.pump()  # the reaper woke the scheduler: the launch is planned now
    big = [i for i in cluster.instances() if i.offering.instance_type == "g5.12xlarge"]
    assert len(big) == 2
