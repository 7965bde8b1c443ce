"""A trial's whole life through the services: submit, launch, register, run, finish, reap."""

from __future__ import annotations

from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from corral.services.idle_reap import run_idle_reap

from .harness import Cluster, Script, make_pool


def test_submit_launch_run_complete_and_reap() -> None:
    cluster = Cluster(make_pool(max_idle_s=60.0))
    trial_id = cluster.submit_scripted(Script(duration_s=100), name="one")
    cluster.pump()

    (record,) = cluster.instances()
    assert record.state is InstanceState.ALLOCATED
    assert record.offering.is_spot  # spot is cheaper and available
    assert record.planned_for == ((trial_id, 1),)
    assert "waiting for" in (cluster.trial(trial_id).pending_reason or "")

    cluster.run(40)  # boots in 30 s, registers, gets the trial on its next heartbeat
    assert cluster.trial(trial_id).state is TrialState.RUNNING
    assert cluster.store.get_instance(record.id).state is InstanceState.BUSY  # type: ignore[union-attr]

    cluster.run(120)
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.COMPLETED
    assert trial.exit_code == 0
    assert trial.cost_usd > 0 and trial.gpu_seconds >= 100
    idle = cluster.store.get_instance(record.id)
    assert idle is not None and idle.state is InstanceState.IDLE

    cluster.run(65)
    run_idle_reap(cluster.ctx)  # drain
    run_idle_reap(cluster.ctx)  # confirmed empty: terminate
    gone = cluster.store.get_instance(record.id)
    assert gone is not None and gone.state is InstanceState.TERMINATED
    assert cluster.running_cloud_ids() == []
