"""A pool removed from the config while Corral still holds instances in it is wound down,
not forgotten: its idle agents and stopped instances are terminated, a busy agent finishes
its trial first, and the reconciler still confirms what ended and ends what is left."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.instance import InstanceState, new_instance
from corral.domain.trial import TrialState
from corral.ports.cloud import LaunchRequest
from corral.services.idle_reap import run_idle_reap
from corral.services.reconcile import run_reconcile
from corral.services.schedule_pass import run_schedule_pass

from .harness import OD_1, Cluster, Script, make_pool
from .test_warm_pool import idle_agent, park_one, record_of

IS = InstanceState


def remove_the_pool(cluster: Cluster) -> None:
    """The config is redeployed with the pool renamed: its instances' pool is gone."""
    cluster.ctx.pools.clear()
    cluster.ctx.pools["renamed"] = make_pool(OD_1, name="renamed")


def test_an_idle_agent_of_a_removed_pool_is_terminated() -> None:
    cluster = Cluster(make_pool(OD_1, max_idle_s=3600.0))
    record = idle_agent(cluster)
    remove_the_pool(cluster)

    report = run_idle_reap(cluster.ctx)
    assert report.terminated == [record.id]
    found = cluster.cloud.get(record.cloud_id or "")
    assert found is not None and found.state.is_gone


def test_a_stopped_instance_of_a_removed_warm_pool_is_terminated() -> None:
    cluster = Cluster(make_pool(OD_1, warm_pool_size=1))
    parked = park_one(cluster)
    assert parked.state is IS.STOPPED
    remove_the_pool(cluster)

    report = run_idle_reap(cluster.ctx)
    assert report.terminated == [parked.id]
    assert record_of(cluster, parked.id).state in (IS.TERMINATING, IS.TERMINATED)


def test_a_busy_agent_of_a_removed_pool_finishes_its_trial_then_goes() -> None:
    cluster = Cluster(make_pool(OD_1, max_idle_s=3600.0))
    trial_id = cluster.submit_scripted(Script(duration_s=300))
    cluster.pump()
    cluster.run(90)
    (record,) = cluster.instances()
    assert record.state is IS.BUSY
    remove_the_pool(cluster)

    assert run_idle_reap(cluster.ctx).terminated == []
    assert cluster.trial(trial_id).state is TrialState.RUNNING
    cluster.run(300)
    assert cluster.trial(trial_id).state is TrialState.COMPLETED
    assert run_idle_reap(cluster.ctx).terminated == [record.id]


def test_the_reconciler_still_checks_a_removed_pool_s_records() -> None:
    # A record whose instance was terminated behind Corral's back is closed.
    cluster = Cluster(make_pool(OD_1, max_idle_s=3600.0))
    record = idle_agent(cluster)
    remove_the_pool(cluster)
    cluster.cloud.terminate([record.cloud_id or ""])
    cluster.run(120)
    run_reconcile(cluster.ctx)
    assert record_of(cluster, record.id).state is IS.TERMINATED


def test_a_launch_not_yet_attempted_for_a_removed_pool_is_cancelled() -> None:
    cluster = Cluster(make_pool(OD_1))
    cluster.submit_scripted(Script(duration_s=300))
    run_schedule_pass(cluster.ctx)  # plans a launch: a QUEUED record, its message queued
    (queued,) = cluster.instances()
    assert queued.state is IS.QUEUED
    remove_the_pool(cluster)

    run_schedule_pass(cluster.ctx)
    assert record_of(cluster, queued.id).state is IS.CANCELLED


def test_a_launch_of_a_removed_pool_that_times_out_fails_instead_of_retrying() -> None:
    cluster = Cluster(make_pool(OD_1))
    record = replace(
        new_instance("inst-r", "gpu", OD_1, cluster.clock.now() - 3600, "planned"),
        state=IS.REQUESTED,
        requested_at=cluster.clock.now() - 3600,
    )
    cluster.store.commit([record])
    remove_the_pool(cluster)

    run_reconcile(cluster.ctx)
    assert record_of(cluster, "inst-r").state is IS.ALLOCATION_FAILED


def test_an_instance_of_a_pool_no_record_names_is_never_touched() -> None:
    # Another installation sharing the ownership tags: its pool is not ours to wind down.
    cluster = Cluster(make_pool(OD_1))
    foreign = LaunchRequest(record_id="theirs-1", pool="their-pool", offering=OD_1, token="t-1")
    cloud_id = cluster.cloud.launch(foreign).cloud_id
    cluster.run(3600)

    run_reconcile(cluster.ctx)
    found = cluster.cloud.get(cloud_id)
    assert found is not None and not found.state.is_gone


def test_a_warm_start_not_yet_attempted_for_a_removed_pool_is_terminated() -> None:
    # Planned (STOPPED -> QUEUED) but the pool left the config before scale-up started it:
    # the schedule pass sends it back to the warm pool, and the reaper, with no warm pool
    # to keep it in, terminates it (its disks would bill for ever).
    cluster = Cluster(make_pool(OD_1, warm_pool_size=1))
    parked = park_one(cluster)
    cluster.submit_scripted(Script(duration_s=300), name="second")
    run_schedule_pass(cluster.ctx)  # the warm start is planned; its message is not delivered
    assert record_of(cluster, parked.id).state is IS.QUEUED
    remove_the_pool(cluster)

    run_schedule_pass(cluster.ctx)
    assert record_of(cluster, parked.id).state is IS.STOPPED
    assert run_idle_reap(cluster.ctx).terminated == [parked.id]
    found = cluster.cloud.get(parked.cloud_id or "")
    assert found is not None and found.state.is_gone
