"""Consolidation through the services: the reaper empties an under-used agent by moving its
checkpointed trial onto another agent's free GPUs, the trial resumes there from its
checkpoint, and the emptied agent is terminated; nothing moves without a checkpoint."""

from __future__ import annotations

from corral.domain.consolidation import MIN_RUN_S
from corral.domain.instance import InstanceState
from corral.domain.records import EventKind
from corral.domain.trial import TrialState
from corral.protocol.agent import AgentTrialState, TrialStatus
from corral.services import agents as agent_service
from corral.services.idle_reap import run_idle_reap

from .harness import SPOT_4, Cluster, Script, make_pool

IS = InstanceState


def two_agents_one_trial_each(*, consolidate: bool = True) -> tuple[Cluster, dict[str, str]]:
    """Two 4-GPU agents, each running one long trial (agent record id -> its trial)."""
    cluster = Cluster(
        make_pool(SPOT_4, max_instances=2, max_idle_s=3600.0, consolidate=consolidate)
    )
    trials = [
        t.id
        for t in cluster.submit(
            resources={"slots_per_trial": 1},
            searcher={"name": "grid", "max_trials": 5},
            hyperparameters={"x": {"type": "categorical", "vals": [1, 2, 3, 4, 5]}},
        ).trials
    ]
    for trial_id in trials:
        cluster.scripts[trial_id] = Script(duration_s=100_000)
    cluster.pump()
    cluster.run(120)
    busy = [i for i in cluster.instances() if i.state is IS.BUSY]
    assert len(busy) == 2, [i.state for i in cluster.instances()]
    # Every trial but one per agent ends now.
    keep: dict[str, str] = {}
    for inst in busy:
        first, *rest = inst.trial_ids
        keep[inst.id] = first
        for trial_id in rest:
            cluster.scripts[trial_id] = Script(duration_s=0)
    cluster.run(30)
    assert all(len(cluster.store.get_instance(i).trial_ids) == 1 for i in keep)  # type: ignore[union-attr]
    return cluster, keep


def report_checkpoint(cluster: Cluster, trial_id: str) -> None:
    trial = cluster.trial(trial_id)
    (instance_id,) = trial.placement.instance_ids
    record = cluster.store.get_instance(instance_id)
    assert record is not None and record.cloud_id is not None
    agent = cluster.agents[record.cloud_id]
    assert agent.agent_id is not None
    status = TrialStatus(
        trial_id=trial_id, state=AgentTrialState.RUNNING, latest_checkpoint=f"s3://b/{trial_id}/1"
    )
    agent_service.report_trial_status(cluster.ctx, agent.agent_id, agent.cloud_id, status)


def test_the_emptied_agent_is_terminated_and_its_trial_resumes_on_the_other() -> None:
    cluster, keep = two_agents_one_trial_each()
    for trial_id in keep.values():
        report_checkpoint(cluster, trial_id)
    cluster.run(MIN_RUN_S + 60)

    report = run_idle_reap(cluster.ctx)
    (source,) = report.consolidated
    (target,) = [i for i in keep if i != source]
    moved = keep[source]
    assert cluster.store.get_instance(source).state is IS.DRAINING  # type: ignore[union-attr]
    assert cluster.trial(moved).state is TrialState.PREEMPTED  # its agent still runs it

    # A second pass before the agent stopped it: neither taken back nor terminated under it.
    again = run_idle_reap(cluster.ctx)
    assert again.consolidated == [] and again.undrained == [] and again.terminated == []

    cluster.run(90)  # the agent stops it (checkpointing), it is placed on the other agent
    resumed = cluster.trial(moved)
    assert resumed.state is TrialState.RUNNING
    assert resumed.placement is not None and resumed.placement.instance_ids == (target,)
    assert resumed.latest_checkpoint == f"s3://b/{moved}/1"
    assert resumed.preemptions == 1 and resumed.restarts == 0  # not the user's fault

    done = run_idle_reap(cluster.ctx)
    assert done.terminated == [source]
    assert len(cluster.running_cloud_ids()) == 1
    reasons = [e.message for e in cluster.store.events() if e.kind is EventKind.AGENT_DRAINING]
    assert any(r.startswith("consolidating: 1 of 4 GPUs in use") for r in reasons)


def test_nothing_moves_without_a_checkpoint_or_without_the_pool_setting() -> None:
    cluster, keep = two_agents_one_trial_each()
    cluster.run(MIN_RUN_S + 60)
    assert run_idle_reap(cluster.ctx).consolidated == []  # no checkpoint reported

    cluster, keep = two_agents_one_trial_each(consolidate=False)
    for trial_id in keep.values():
        report_checkpoint(cluster, trial_id)
    cluster.run(MIN_RUN_S + 60)
    assert run_idle_reap(cluster.ctx).consolidated == []


def test_nothing_moves_while_a_trial_of_the_pool_waits() -> None:
    cluster, keep = two_agents_one_trial_each()
    for trial_id in keep.values():
        report_checkpoint(cluster, trial_id)
    cluster.run(MIN_RUN_S + 60)
    # A 4-GPU trial cannot start: no agent is free and the pool is at max_instances. The
    # free GPUs are the waiting work's first; emptying an agent now would be wrong.
    big = cluster.submit(resources={"slots_per_trial": 4}).trials[0].id
    cluster.pump()
    cluster.run(10)
    assert cluster.trial(big).state is TrialState.PENDING
    assert run_idle_reap(cluster.ctx).consolidated == []
