"""A pool removed from the config while Corral still holds instances in it is wound down,
not forgotten: its idle agents and stopped instances are terminated, a busy agent finishes
its trial first, and the reconciler still confirms what ended and ends what is left."""

from __future__ import annotations

from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from corral.services.idle_reap import run_idle_reap
from corral.services.reconcile import run_reconcile

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


def test_the_reconciler_sees_a_removed_pool_s_instances() -> None:
    # A record whose instance was terminated behind Corral's back is closed, and an instance
    # of the removed pool that no record accounts for is terminated after the orphan grace.
    cluster = Cluster(make_pool(OD_1, max_idle_s=3600.0))
    record = idle_agent(cluster)
    remove_the_pool(cluster)
    cluster.cloud.terminate([record.cloud_id or ""])
    cluster.run(120)
    run_reconcile(cluster.ctx)
    assert record_of(cluster, record.id).state is IS.TERMINATED
