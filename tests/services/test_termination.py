"""Terminating an instance agrees with the TERMINATING -> TERMINATED edge: the record says
TERMINATED only once the cloud confirms the instance is on its way out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from corral.adapters.memory.cloud import SimulatedCloud
from corral.domain.instance import Instance, InstanceState
from corral.domain.records import EventKind
from corral.ports.store import commit_one
from corral.services.reconcile import run_reconcile
from corral.services.shared.instance_removal import terminate

from .harness import Cluster, Script, make_pool


class LaggingCloud:
    """The real simulated cloud, except that ``terminate`` does not yet see the instances
    it is asked about (EC2's describe lags a fresh launch): nothing terminated, nothing
    confirmed."""

    def __init__(self, cloud: SimulatedCloud) -> None:
        self._cloud = cloud

    def __getattr__(self, name: str) -> object:
        return getattr(self._cloud, name)

    def terminate(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        return frozenset()


def drained_agent() -> tuple[Cluster, Instance]:
    cluster = Cluster(make_pool())
    cluster.submit_scripted(Script(duration_s=20), name="one")
    cluster.pump()
    cluster.run(90)
    (idle,) = cluster.instances()
    assert idle.state is InstanceState.IDLE
    drained = idle.transition(InstanceState.DRAINING, cluster.clock.now(), "idle")
    return cluster, commit_one(cluster.store, drained)


def going(cluster: Cluster, record: Instance) -> Instance:
    return record.transition(InstanceState.TERMINATING, cluster.clock.now(), "drained")


def test_an_unconfirmed_termination_stays_terminating_until_the_cloud_lets_it_go() -> None:
    cluster, record = drained_agent()
    lagging = replace(cluster.ctx, cloud=LaggingCloud(cluster.cloud))

    assert terminate(lagging, going(cluster, record), EventKind.INSTANCE_TERMINATING)
    held = cluster.store.get_instance(record.id)
    assert held is not None and held.state is InstanceState.TERMINATING
    assert cluster.running_cloud_ids() == [record.cloud_id]  # still billed: not TERMINATED

    run_reconcile(cluster.ctx)  # still listed: terminated again, through the real cloud
    cluster.clock.advance(120)
    run_reconcile(cluster.ctx)  # gone from the cloud: now TERMINATED
    gone = cluster.store.get_instance(record.id)
    assert gone is not None and gone.state is InstanceState.TERMINATED
    assert cluster.running_cloud_ids() == []


def test_a_confirmed_termination_is_recorded_at_once() -> None:
    cluster, record = drained_agent()
    assert terminate(cluster.ctx, going(cluster, record), EventKind.INSTANCE_TERMINATING)
    gone = cluster.store.get_instance(record.id)
    assert gone is not None and gone.state is InstanceState.TERMINATED
    # Twice (a retried message): the second call stops at the lost race, nothing changes.
    assert not terminate(cluster.ctx, going(cluster, record), EventKind.INSTANCE_TERMINATING)
    again = cluster.store.get_instance(record.id)
    assert again is not None and again.version == gone.version
