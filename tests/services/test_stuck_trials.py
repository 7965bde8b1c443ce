"""Work the agents never move on: submitted while agents drain, killed before it started,
or sent to an agent that never takes it. Nothing may sit in ASSIGNED or STOPPING forever,
holding GPUs that are billed and count against max_instances."""

from __future__ import annotations

from corral.domain.instance import InstanceState
from corral.domain.records import EventKind
from corral.domain.trial import TrialState
from corral.services.idle_reap import run_idle_reap
from corral.services.kill import kill_experiment
from corral.services.reconcile import run_reconcile

from .harness import Cluster, FakeAgent, Script, make_pool, running_cluster


def _one_idle_agent(cluster: Cluster) -> str:
    first = cluster.submit(name="first")
    cluster.scripts[first.trials[0].id] = Script(duration_s=20)
    cluster.pump()
    cluster.run(90)
    assert cluster.trial(first.trials[0].id).state is TrialState.COMPLETED
    (record,) = cluster.instances()
    return record.id


def test_work_submitted_while_an_agent_drains_runs_on_it() -> None:
    cluster = Cluster(make_pool(max_idle_s=60.0))
    agent_id = _one_idle_agent(cluster)
    cluster.run(65)
    cluster.clock.advance(20)  # its last heartbeat is too old to confirm it empty at once
    run_idle_reap(cluster.ctx)
    assert cluster.store.get_instance(agent_id).state is InstanceState.DRAINING  # type: ignore[union-attr]

    second = cluster.submit(name="second")
    trial_id = second.trials[0].id
    cluster.pump()  # the schedule pass takes the drained agent back at once
    assert cluster.trial(trial_id).state is TrialState.ASSIGNED
    cluster.run(10)
    assert cluster.trial(trial_id).state is TrialState.RUNNING
    assert [i.id for i in cluster.instances()] == [agent_id]  # no second launch
    kinds = [e.kind for e in cluster.store.events(since=0, limit=500) if e.instance_id == agent_id]
    assert EventKind.AGENT_UNDRAINED in kinds


def test_a_trial_killed_before_its_agent_started_it_is_cancelled_at_once() -> None:
    cluster = Cluster(make_pool(max_idle_s=600.0))
    agent_id = _one_idle_agent(cluster)
    (agent,) = cluster.agents.values()
    agent.takes_work = False  # the assignment reaches it but never starts

    second = cluster.submit(name="second")
    trial_id = second.trials[0].id
    cluster.pump()
    cluster.run(10)
    assert cluster.trial(trial_id).state is TrialState.ASSIGNED
    kill_experiment(cluster.ctx, second.experiment.id)
    assert cluster.trial(trial_id).state is TrialState.STOPPING

    cluster.run(5)  # the next heartbeat does not list the trial: nothing to stop
    assert cluster.trial(trial_id).state is TrialState.CANCELLED
    record = cluster.store.get_instance(agent_id)
    assert record is not None and record.state is InstanceState.IDLE and not record.allocations


def test_a_trial_its_agent_never_takes_is_requeued_after_the_deadline() -> None:
    cluster = Cluster(make_pool(max_idle_s=600.0, max_instances=2))
    agent_id = _one_idle_agent(cluster)
    (stuck,) = cluster.agents.values()
    stuck.takes_work = False

    second = cluster.submit(name="second")
    trial_id = second.trials[0].id
    cluster.pump()
    cluster.run(60)
    run_reconcile(cluster.ctx)
    assert cluster.trial(trial_id).state is TrialState.ASSIGNED  # within the deadline

    cluster.run(70)
    run_reconcile(cluster.ctx)
    trial = cluster.trial(trial_id)
    assert trial.state is not TrialState.ASSIGNED
    assert trial.restarts == 0 and trial.preemptions == 1  # not the user's fault
    record = cluster.store.get_instance(agent_id)
    assert record is not None and trial_id not in record.trial_ids
    requeued = [e for e in cluster.store.events(since=0, limit=500) if e.trial_id == trial_id]
    assert any(
        e.kind is EventKind.TRIAL_REQUEUED and "did not take it" in e.message for e in requeued
    )


def test_a_stop_never_confirmed_is_cancelled_after_the_deadline() -> None:
    cluster, trial_id = running_cluster(max_idle_s=600.0)
    (agent,) = cluster.agents.values()
    agent.obeys_stops = False  # heartbeats on, still reporting the trial running

    kill_experiment(cluster.ctx, cluster.trial(trial_id).experiment_id)
    cluster.run(60)
    run_reconcile(cluster.ctx)
    assert cluster.trial(trial_id).state is TrialState.STOPPING
    cluster.run(250)
    run_reconcile(cluster.ctx)
    assert cluster.trial(trial_id).state is TrialState.CANCELLED
    record = cluster.store.get_instance(agent.agent_id or "")
    assert record is not None and not record.allocations
    # The agent is still told to stop it, and the reaper does not take the agent from it.
    cluster.run(600)
    run_idle_reap(cluster.ctx)
    run_idle_reap(cluster.ctx)
    record = cluster.store.get_instance(agent.agent_id or "")
    assert record is not None and record.state is not InstanceState.TERMINATED


def test_checkpoints_reported_every_heartbeat_do_not_flood_the_event_log() -> None:
    cluster = Cluster(make_pool(max_idle_s=600.0))
    trial_id = cluster.submit_scripted(Script(duration_s=10_000), name="ckpt")
    cluster.pump()
    cluster.run(40)
    (agent,) = cluster.agents.values()
    from corral.protocol.agent import AgentTrialState, HeartbeatRequest, TrialStatus
    from corral.services import agents as agent_service

    for step in range(20):
        cluster.clock.advance(5)
        agent_service.heartbeat(
            cluster.ctx,
            agent.agent_id or "",
            agent.cloud_id,
            HeartbeatRequest(
                trials=[
                    TrialStatus(
                        trial_id=trial_id,
                        state=AgentTrialState.RUNNING,
                        latest_checkpoint=f"s3://b/ckpt-{step}",
                    )
                ]
            ),
        )
    assert cluster.trial(trial_id).latest_checkpoint == "s3://b/ckpt-19"
    states = [
        e
        for e in cluster.store.events(since=0, limit=500)
        if e.trial_id == trial_id and e.kind is EventKind.TRIAL_STATE
    ]
    assert len(states) == 1  # ASSIGNED -> RUNNING; checkpoints are not transitions


def test_a_running_trial_its_restarted_agent_lost_is_requeued() -> None:
    cluster, trial_id = running_cluster(max_idle_s=600.0)
    (agent,) = cluster.agents.values()
    agent.running.clear()  # systemd restarted the agent; its container was cleaned up
    agent.register()  # the new process registers again: same record

    cluster.run(5)  # its first heartbeat does not list the trial
    trial = cluster.trial(trial_id)
    assert trial.preemptions == 1 and trial.restarts == 0
    cluster.run(10)
    assert cluster.trial(trial_id).state is TrialState.RUNNING  # started again, same agent
    assert len(agent.starts) == 2


def test_only_rank_0_missing_a_running_gang_trial_requeues_it() -> None:
    from .harness import SPOT_1

    cluster, trial_id = running_cluster(SPOT_1, slots=2, max_idle_s=600.0, max_instances=2)
    trial = cluster.trial(trial_id)
    assert trial.placement is not None
    rank0, rank1 = trial.placement.instance_ids
    by_record = {a.agent_id: a for a in cluster.agents.values()}
    by_record[rank1].running.clear()  # rank 1's part ended and was acknowledged
    cluster.run(10)
    assert cluster.trial(trial_id).state is TrialState.RUNNING
    by_record[rank0].running.clear()
    cluster.run(5)
    assert cluster.trial(trial_id).preemptions == 1


def test_an_agent_draining_of_its_own_accord_gets_no_new_work() -> None:
    from corral.protocol.agent import HeartbeatRequest
    from corral.services import agents as agent_service

    cluster = Cluster(make_pool(max_idle_s=600.0, max_instances=2))
    agent_id = _one_idle_agent(cluster)
    (agent,) = cluster.agents.values()
    # SIGTERM or a rebalance recommendation: the agent says it drains
    agent_service.heartbeat(cluster.ctx, agent_id, agent.cloud_id, HeartbeatRequest(draining=True))
    record = cluster.store.get_instance(agent_id)
    assert record is not None and record.state is InstanceState.DRAINING
    assert record.interruption_notice_at is not None  # the reaper will not take it back

    second = cluster.submit(name="second")
    cluster.pump()
    run_idle_reap(cluster.ctx)
    trial = cluster.trial(second.trials[0].id)
    assert trial.placement is None or agent_id not in trial.placement.instance_ids
    assert len(cluster.instances()) == 2  # a replacement was launched instead


def test_a_registration_that_keeps_losing_races_asks_the_agent_to_retry() -> None:
    """409 at registration makes an agent shut its instance down: a record that kept
    changing must answer 'retry later' (503) instead."""
    import pytest

    from corral.domain.errors import ConflictError, RetryLater

    cluster = Cluster(make_pool(max_idle_s=600.0))
    cluster.submit(name="one")
    cluster.pump()
    cluster.clock.advance(40)
    (cloud,) = cluster.cloud.list_owned()
    agent = FakeAgent(cluster, cloud.cloud_id, 1)

    def always_conflict(records: object) -> object:
        raise ConflictError("lost the race")

    cluster.store.commit = always_conflict  # type: ignore[method-assign,assignment]
    with pytest.raises(RetryLater):
        agent.register()
