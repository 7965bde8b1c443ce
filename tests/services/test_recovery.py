"""Losing instances and trials going wrong: interruptions, silent agents, user errors, kills."""

from __future__ import annotations

from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from corral.services.interruptions import NoticeKind, on_interruption_notice
from corral.services.kill import kill_experiment
from corral.services.reconcile import run_reconcile

from .harness import SPOT_4, Cluster, Script, make_pool, running_cluster


def test_an_interruption_warning_requeues_the_trial_and_plans_a_replacement() -> None:
    cluster, trial_id = running_cluster()
    (record,) = cluster.instances()
    assert record.cloud_id is not None
    assert on_interruption_notice(cluster.ctx, record.cloud_id, NoticeKind.INTERRUPTION)
    assert not on_interruption_notice(cluster.ctx, "i-not-ours", NoticeKind.INTERRUPTION)

    # It stays on the doomed agent's GPUs while that agent checkpoints and stops it: placed
    # again now, it would run twice at once, the second run from an older checkpoint.
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.PREEMPTED
    assert trial.placement is not None and trial.placement.instance_ids == (record.id,)
    assert trial.preemptions == 1 and trial.restarts == 0  # not the user's fault
    doomed = cluster.store.get_instance(record.id)
    assert doomed is not None
    assert doomed.state is InstanceState.DRAINING and doomed.interruption_notice_at is not None
    cluster.pump()  # the schedule message plans the replacement at once
    replacements = [i for i in cluster.instances() if i.id != record.id]
    assert len(replacements) == 1
    assert replacements[0].planned_for == ((trial_id, 1),)
    # The interrupted agent is told to stop the trial (which checkpoints it) ...
    agent = cluster.agents[record.cloud_id]
    agent.heartbeat()
    assert trial_id not in agent.running
    agent.heartbeat()  # ... and its report of the stop requeues it
    assert cluster.trial(trial_id).state is TrialState.PENDING
    cluster.pump()
    assert len(cluster.instances()) == 2  # the replacement already planned serves it


def test_the_trial_resumes_from_its_checkpoint_on_the_replacement() -> None:
    cluster, trial_id = running_cluster()
    (record,) = cluster.instances()
    trial = cluster.trial(trial_id)
    from corral.protocol.agent import AgentTrialState, TrialStatus
    from corral.services.agents import report_trial_status

    assert record.cloud_id
    report_trial_status(
        cluster.ctx,
        record.id,
        record.cloud_id,
        TrialStatus(
            trial_id=trial.id,
            state=AgentTrialState.RUNNING,
            latest_checkpoint="file:///ckpt/step-100",
        ),
    )
    on_interruption_notice(cluster.ctx, record.cloud_id, NoticeKind.INTERRUPTION)
    cluster.run(60)
    assert cluster.trial(trial_id).state is TrialState.RUNNING
    starts = [
        a for agent in cluster.agents.values() for a in agent.starts if a.trial_id == trial_id
    ]
    assert len(starts) == 2
    assert starts[-1].checkpoint.latest == "file:///ckpt/step-100"


def test_a_silent_agent_is_marked_lost_its_trial_requeued_and_terminated_in_one_pass() -> None:
    cluster, trial_id = running_cluster()
    (record,) = cluster.instances()
    assert record.cloud_id
    cluster.agents[record.cloud_id].alive = False  # stops heartbeating
    cluster.clock.advance(cluster.ctx.settings.reconcile.heartbeat_timeout_s + 1)
    run_reconcile(cluster.ctx)
    assert cluster.trial(trial_id).state is TrialState.PENDING
    gone = cluster.store.get_instance(record.id)
    assert gone is not None and gone.state is InstanceState.TERMINATED
    assert [h.state for h in gone.history[-3:]] == ["LOST", "TERMINATING", "TERMINATED"]
    assert record.cloud_id not in cluster.running_cloud_ids()


def test_user_errors_restart_until_max_restarts_then_fail() -> None:
    cluster = Cluster(make_pool())
    trial_id = cluster.submit_scripted(Script(duration_s=10, exit_code=3), max_restarts=1)
    cluster.pump()
    cluster.run(200)
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.FAILED
    assert trial.restarts == 1 and trial.exit_code == 3


def test_killing_an_experiment_stops_running_trials_and_cancels_pending_ones() -> None:
    cluster = Cluster(make_pool(max_instances=1))
    submitted = cluster.submit(
        searcher={"name": "grid"}, hyperparameters={"lr": {"type": "categorical", "vals": [1, 2]}}
    )
    for trial in submitted.trials:
        cluster.scripts[trial.id] = Script(duration_s=10_000)
    cluster.pump()
    cluster.run(40)
    states = sorted(cluster.trial(t.id).state.value for t in submitted.trials)
    assert states == ["PENDING", "RUNNING"]
    kill_experiment(cluster.ctx, submitted.experiment.id)
    states = sorted(cluster.trial(t.id).state.value for t in submitted.trials)
    assert states == ["CANCELLED", "STOPPING"]
    cluster.run(10)  # the agent is told to stop, confirms, the GPUs are freed
    assert {cluster.trial(t.id).state for t in submitted.trials} == {TrialState.CANCELLED}
    (agent,) = [i for i in cluster.instances() if i.state is not InstanceState.TERMINATED]
    assert agent.state is InstanceState.IDLE and agent.allocations == ()


def test_a_trial_larger_than_one_instance_gets_rendezvous_settings() -> None:
    cluster = Cluster(make_pool(SPOT_4, max_instances=3))
    trial_id = cluster.submit(resources={"slots_per_trial": 8}).trials[0].id
    cluster.scripts[trial_id] = Script(duration_s=10_000)
    cluster.pump()
    assert len(cluster.instances()) == 2
    cluster.run(40)
    assert cluster.trial(trial_id).state is TrialState.RUNNING
    starts = sorted(
        (a for agent in cluster.agents.values() for a in agent.starts),
        key=lambda a: a.rendezvous.node_rank if a.rendezvous else -1,
    )
    assert [a.rendezvous.node_rank for a in starts if a.rendezvous] == [0, 1]
    master = cluster.store.get_instance(cluster.trial(trial_id).placement.parts[0][0])  # type: ignore[union-attr]
    assert master is not None
    for assignment in starts:
        assert assignment.rendezvous is not None
        assert assignment.rendezvous.world_size == 8
        assert assignment.rendezvous.nnodes == 2
        assert assignment.rendezvous.master_addr == master.address
        assert assignment.gpus == [0, 1, 2, 3]


def test_an_agent_short_of_gpus_is_refused_and_trips_the_breaker() -> None:
    cluster = Cluster(make_pool(max_instances=10), gpus_found=lambda slots: 0)
    trial_id = cluster.submit().trials[0].id
    cluster.pump()
    threshold = cluster.ctx.settings.reconcile.breaker_threshold
    for _ in range(threshold + 2):
        cluster.run(40)
        cluster.pump()
    state = cluster.store.pool_state("gpu")
    assert state.breaker_open_since is not None
    launched = len(cluster.cloud.all_instances())
    assert launched == threshold  # stops launching instead of looping
    assert "launches stopped" in (cluster.trial(trial_id).pending_reason or "")
    assert all(i.state is InstanceState.TERMINATED for i in cluster.instances())


def test_reconcile_never_touches_an_instance_without_our_tags() -> None:
    cluster, _ = running_cluster()
    foreign = cluster.cloud.add_foreign_instance(tags={"Name": "someone-elses"})
    other_cluster = cluster.cloud.add_foreign_instance(
        tags={"managed-by": "another-corral", "corral-pool": "gpu"}
    )
    cluster.clock.advance(10_000)
    run_reconcile(cluster.ctx)
    for cloud_id in (foreign, other_cluster):
        seen = cluster.cloud.get(cloud_id)
        assert seen is not None and not seen.state.is_gone
        assert cluster.store.instance_by_cloud_id(cloud_id) is None


def test_an_agent_reporting_itself_unhealthy_is_terminated_at_once() -> None:
    import pytest

    from corral.domain.errors import Unhealthy
    from corral.services.agents import register

    cluster = Cluster(make_pool())
    request = cluster.booted_instance_request(
        gpus=[], unhealthy_reason="unhealthy: GPU detection failed: nvidia-smi not found"
    )
    with pytest.raises(Unhealthy) as refused:
        register(cluster.ctx, request, request.cloud_id)
    assert "nvidia-smi not found" in str(refused.value)
    (record,) = cluster.instances()
    assert record.state is InstanceState.TERMINATED
    assert cluster.store.pool_state("gpu").boot_failures == 1


def test_a_gang_that_lost_a_member_is_placed_again_only_once_the_survivors_stopped() -> None:
    from corral.domain.offerings import CapacityType, Offering

    big = Offering("g.4", "zone-a", CapacityType.SPOT, 4, 1.5)
    cluster, trial_id = running_cluster(big, slots=8, run_s=60, max_instances=4, max_idle_s=600.0)
    trial = cluster.trial(trial_id)
    assert trial.placement is not None
    lost_id, survivor_id = trial.placement.instance_ids
    by_record = {a.agent_id: a for a in cluster.agents.values()}
    by_record[lost_id].alive = False
    survivor = by_record[survivor_id]
    survivor.obeys_stops = False  # still stopping (checkpointing) for a while
    cluster.run(cluster.ctx.settings.reconcile.heartbeat_timeout_s + 5)
    run_reconcile(cluster.ctx)  # the silent member is LOST

    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.PREEMPTED
    assert trial.placement is not None and trial.placement.instance_ids == (survivor_id,)
    cluster.run(30)
    assert cluster.trial(trial_id).state is TrialState.PREEMPTED  # never placed twice
    survivor.obeys_stops = True
    cluster.run(10)  # told to stop, it stops and says so
    trial = cluster.trial(trial_id)
    assert trial.state in (TrialState.PENDING, TrialState.ASSIGNED, TrialState.RUNNING)
    assert trial.preemptions == 1


def test_a_gang_that_lost_one_member_buys_one_replacement_not_a_whole_gang() -> None:
    # An 8-GPU trial on two 4-GPU instances: one interrupted, the survivor counted busy,
    # and the planner bought two new instances; one of them was never used, only billed.
    from corral.domain.offerings import CapacityType, Offering

    big = Offering("g.4", "zone-a", CapacityType.SPOT, 4, 1.5)
    cluster, trial_id = running_cluster(big, slots=8, run_s=60, max_instances=6, max_idle_s=600.0)
    lost_id, survivor_id = cluster.trial(trial_id).placement.instance_ids  # type: ignore[union-attr]
    before = {i.id for i in cluster.instances()}
    lost = cluster.store.get_instance(lost_id)
    assert lost is not None
    on_interruption_notice(cluster.ctx, lost.cloud_id, NoticeKind.INTERRUPTION)
    cluster.run(120, step=3.0)

    new = [i for i in cluster.instances() if i.id not in before]
    assert len(new) == 1
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.RUNNING
    assert trial.placement is not None
    assert set(trial.placement.instance_ids) == {survivor_id, new[0].id}


def test_a_gang_whose_member_went_silent_buys_one_replacement() -> None:
    # A LOST member is cut from the placement at once: the survivor, still stopping the
    # trial, was counted busy and a whole new gang was bought.
    from corral.domain.offerings import CapacityType, Offering

    big = Offering("g.4", "zone-a", CapacityType.SPOT, 4, 1.5)
    cluster, trial_id = running_cluster(big, slots=8, run_s=60, max_instances=6, max_idle_s=600.0)
    lost_id, survivor_id = cluster.trial(trial_id).placement.instance_ids  # type: ignore[union-attr]
    before = {i.id for i in cluster.instances()}
    by_record = {a.agent_id: a for a in cluster.agents.values()}
    by_record[lost_id].alive = False
    survivor = by_record[survivor_id]
    survivor.obeys_stops = False  # checkpointing for a while
    cluster.run(cluster.ctx.settings.reconcile.heartbeat_timeout_s + 5, step=3.0)
    run_reconcile(cluster.ctx)
    cluster.run(30, step=3.0)
    survivor.obeys_stops = True
    cluster.run(120, step=3.0)

    new = [i for i in cluster.instances() if i.id not in before]
    assert len(new) == 1, [(i.id, i.state.value) for i in new]
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.RUNNING
    assert trial.placement is not None
    assert set(trial.placement.instance_ids) == {survivor_id, new[0].id}
