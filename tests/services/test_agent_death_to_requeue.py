"""Agent death to requeue, on an injected clock (docs/reliability.md, "Agent death to
requeue"): a dead agent's trial is requeued, and its instance terminated, at the first idle
reap pass after the heartbeat timeout (the reaper runs every minute; it used to wait for the
two-minute reconcile pass, then 300 s more of "lost grace" before terminating); never before
the timeout, because only then has the agent's own fence stopped the trial.
``benchmarks/agent_death.py`` prints the figures over every phase of the timers."""

from __future__ import annotations

import pytest

from agent_runtime.config import AgentConfig
from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from corral.services.idle_reap import run_idle_reap
from corral.services.reconcile import run_reconcile
from corral.services.shared.service_context import AGENT_STOP_GRACE_S, ServiceSettings
from tests.services.harness import running_cluster

REAP_PERIOD_S = 60.0  # infra/template.yaml: IdleReapFunction, rate(1 minute)


def test_the_requeue_waits_exactly_the_fence_the_stop_grace_and_a_margin() -> None:
    settings = ServiceSettings()
    assert AgentConfig.model_fields["stop_grace_s"].default == AGENT_STOP_GRACE_S
    margin = 2 * settings.heartbeat_interval_s
    budget = settings.fence_after_s + AGENT_STOP_GRACE_S + margin
    assert settings.reconcile.heartbeat_timeout_s == budget == 90.0
    assert settings.fence_after_s == 50.0


@pytest.mark.parametrize("phase_s", [0.0, 25.0, 55.0])
def test_a_dead_agents_trial_is_requeued_and_its_instance_terminated_by_the_next_reap_pass(
    phase_s: float,
) -> None:
    cluster, trial_id = running_cluster(max_idle_s=3600.0)
    timeout = cluster.ctx.settings.reconcile.heartbeat_timeout_s
    (record,) = cluster.instances()
    assert record.cloud_id is not None
    epoch = cluster.clock.now()  # the reaper's cadence: epoch + k * REAP_PERIOD_S
    cluster.run(phase_s, step=5.0)
    died = cluster.clock.now()  # right after its last heartbeat
    cluster.agents[record.cloud_id].alive = False
    requeued_at = None
    while requeued_at is None and cluster.clock.now() - died < timeout + 2 * REAP_PERIOD_S:
        cluster.step(1.0)
        if (cluster.clock.now() - epoch) % REAP_PERIOD_S == 0:
            run_idle_reap(cluster.ctx)  # the only timer: no reconcile pass at all
            if cluster.trial(trial_id).state is not TrialState.RUNNING:
                requeued_at = cluster.clock.now()
    assert requeued_at is not None, "never requeued"
    assert timeout < requeued_at - died <= timeout + REAP_PERIOD_S
    assert cluster.trial(trial_id).state is TrialState.PENDING  # no placement yet: it waits
    gone = cluster.store.get_instance(record.id)
    assert gone is not None and gone.state is InstanceState.TERMINATED
    assert gone.entered_at(InstanceState.LOST) == requeued_at  # declared and terminated
    assert gone.entered_at(InstanceState.TERMINATING) == requeued_at  # in the same pass


def test_the_reaper_and_the_reconciler_declaring_the_same_agent_lost_act_once() -> None:
    cluster, trial_id = running_cluster(max_idle_s=3600.0)
    (record,) = cluster.instances()
    assert record.cloud_id is not None
    cluster.agents[record.cloud_id].alive = False
    cluster.clock.advance(cluster.ctx.settings.reconcile.heartbeat_timeout_s + 1)
    assert run_idle_reap(cluster.ctx).lost == [record.id]
    after_reap = cluster.store.get_instance(record.id)
    report = run_reconcile(cluster.ctx)
    assert "MarkLost" not in report.counts and report.conflicts == 0
    assert cluster.store.get_instance(record.id) == after_reap
    assert run_idle_reap(cluster.ctx).lost == []
    requeues = [h for h in cluster.trial(trial_id).history if h.state == "PENDING"]
    assert len(requeues) == 2  # submitted, then requeued once
