"""Fallback that respects spot, through the services: a spot launch the cloud refuses waits
for spot (the trial's pending reason says when on-demand will be bought), and only once the
trial has waited ``on_demand_fallback_after`` does scale-up buy on-demand."""

from __future__ import annotations

from corral.domain.fallback import clock_time
from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from corral.ports.queue import QueueName
from corral.services.scale_up import launch_instance
from corral.services.schedule_pass import run_schedule_pass

from .harness import OD_1, SPOT_1, Cluster, Script, make_pool

DELAY = 600.0


def spot_short_cluster(after: float | None) -> Cluster:
    cluster = Cluster(make_pool(SPOT_1, OD_1, fallback_after_s=after))
    cluster.cloud.set_unavailable(SPOT_1.key)
    return cluster


def submit_long(cluster: Cluster) -> str:
    """One long trial submitted and its launch planned (and refused); its id."""
    trial_id: str = cluster.submit().trials[0].id
    cluster.scripts[trial_id] = Script(duration_s=10_000)
    cluster.pump()
    return trial_id


def launched_offerings(cluster: Cluster) -> list[str]:
    return [i.offering.key for i in cluster.instances() if i.cloud_id is not None]


def test_a_refused_spot_launch_waits_then_falls_back_after_the_delay() -> None:
    cluster = spot_short_cluster(DELAY)
    submitted = cluster.clock.now()
    trial_id = submit_long(cluster)

    cluster.run(DELAY - 60)
    assert launched_offerings(cluster) == []  # no on-demand for a trial younger than 10 min
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.PENDING
    assert f"on-demand will be bought at {clock_time(submitted + DELAY)}" in (
        trial.pending_reason or ""
    )

    cluster.run(60 + 180)  # the delay passes; the next re-drive or pass buys on-demand
    assert launched_offerings(cluster) == [OD_1.key]
    assert cluster.trial(trial_id).state is TrialState.RUNNING


def test_spot_coming_back_within_the_delay_is_bought_instead_of_on_demand() -> None:
    cluster = spot_short_cluster(DELAY)
    trial_id = cluster.submit().trials[0].id
    cluster.scripts[trial_id] = Script(duration_s=10_000)
    cluster.pump()
    cluster.run(240)
    cluster.cloud.set_unavailable(SPOT_1.key, False)
    cluster.run(300)
    assert launched_offerings(cluster) == [SPOT_1.key]
    assert cluster.trial(trial_id).state is TrialState.RUNNING


def test_zero_delay_buys_on_demand_at_the_first_refusal() -> None:
    cluster = spot_short_cluster(0.0)
    cluster.submit()
    cluster.pump()
    (record,) = cluster.instances()
    assert record.state is InstanceState.ALLOCATED
    assert record.offering == OD_1


def test_never_waits_for_spot_however_long_it_takes() -> None:
    cluster = spot_short_cluster(None)
    trial_id = cluster.submit().trials[0].id
    cluster.pump()
    cluster.run(3 * 3600, step=60.0)
    assert launched_offerings(cluster) == []
    assert "on_demand_fallback_after is never" in (cluster.trial(trial_id).pending_reason or "")


def test_on_demand_is_bought_within_seconds_of_the_time_the_reason_promised() -> None:
    # It was bought at the next redrive of the stale record instead, up to two timer
    # periods later, while the pending reason kept showing the time already past.
    delay = DELAY + 25  # between two schedule passes
    cluster = spot_short_cluster(delay)
    submitted = cluster.clock.now()
    submit_long(cluster)
    cluster.run(delay - 5)
    assert launched_offerings(cluster) == []
    while cluster.clock.now() < submitted + delay + 10:
        cluster.step(1.0)
    assert launched_offerings(cluster) == [OD_1.key]


def test_a_launch_refused_lately_is_tried_again_as_the_capacity_memory_ends() -> None:
    # The cloud refused spot; a second launch for new work is deferred by the memory, and
    # was retried only at the next redrive (minutes after the memory ended).
    cluster = spot_short_cluster(None)
    submit_long(cluster)
    cluster.cloud.set_unavailable(SPOT_1.key, False)  # spot is back, the memory is not over
    state = cluster.store.pool_state("gpu")
    until = state.capacity.unavailable_until[SPOT_1.key]
    assert until > cluster.clock.now()
    while cluster.clock.now() < until + 10:
        cluster.step(1.0)
    assert launched_offerings(cluster) == [SPOT_1.key]


def test_a_deferred_launch_has_one_retry_on_its_way_however_often_it_is_delivered() -> None:
    # Every delivery that found the launch still waiting sent another delayed copy, and
    # the pass's redrive started one more chain every two minutes.
    cluster = spot_short_cluster(DELAY)
    submit_long(cluster)
    (record,) = cluster.instances()
    assert record.state is InstanceState.QUEUED
    assert record.redriven_at is not None and record.redriven_at > cluster.clock.now()
    waiting = cluster.queue.pending(QueueName.SCALE_UP)
    for _ in range(3):  # duplicates, or the pass's redrive
        launch_instance(cluster.ctx, record.id, record.attempt)
    run_schedule_pass(cluster.ctx)
    assert cluster.queue.pending(QueueName.SCALE_UP) == waiting
