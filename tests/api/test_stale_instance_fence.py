"""The stale-instance fence (``corral.domain.agent_fence``), route by route through the real
resolver: an instance's credentials outlive it (an instance profile's keys by hours), so a
write from an instance that is LOST, TERMINATING or TERMINATED is refused with 409, one about
a trial that has ended with 410, and nothing at all is written (``snapshot``). A DRAINING
agent still runs its trials and is heard.

Each refusal below was a 200 before the fence (the issue: a terminated instance's agent
appended a log line to a COMPLETED trial, and ``trial logs`` showed it first)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from corral.domain.instance import Instance, InstanceState
from corral.domain.metrics import MetricKind
from corral.domain.records import EventKind
from corral.ports.store import commit_one
from corral.services.shared.instance_removal import mark_terminated, take_away, terminate
from tests.services.harness import Cluster

from .conftest import ApiClient, snapshot
from .events import agent_arn

AgentFactory = Callable[[], tuple[str, str]]
IS = InstanceState


def _running(api: ApiClient, cluster: Cluster, agent: AgentFactory) -> tuple[str, str, str]:
    """An agent running one trial: (cloud id, agent id, trial id)."""
    cloud_id, agent_id = agent()
    cluster.pump()
    reply = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=agent_arn(cloud_id))
    (start,) = reply.json["start"]
    trial_id = start["trial_id"]
    running = {"trial_id": trial_id, "state": "running"}
    path = f"/agents/{agent_id}/trials/{trial_id}/status"
    assert api.post(path, running, caller=agent_arn(cloud_id)).json["applied"] is True
    return cloud_id, agent_id, trial_id


def _record(cluster: Cluster, agent_id: str) -> Instance:
    record = cluster.store.get_instance(agent_id)
    assert record is not None
    return record


def _fence(cluster: Cluster, agent_id: str, state: InstanceState) -> None:
    """Move the agent's instance to ``state`` the way the control plane does: silent past
    the heartbeat timeout -> LOST (its trial requeued), then terminated."""
    now = cluster.clock.now()
    take_away(cluster.ctx, _record(cluster, agent_id).transition(IS.LOST, now, "silent"), "silent")
    if state is IS.LOST:
        return
    going = commit_one(
        cluster.store, _record(cluster, agent_id).transition(IS.TERMINATING, now, "lost")
    )
    if state is IS.TERMINATED:
        mark_terminated(cluster.ctx, going.transition(IS.TERMINATED, now, "gone"))
    assert _record(cluster, agent_id).state is state


def _writes(agent_id: str, trial_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every agent write route, each as an agent that still runs the trial would send it."""
    base = f"/agents/{agent_id}/trials/{trial_id}"
    point = {"seq": 1, "kind": "validation", "batches": 10, "values": {"loss": 0.5}, "at": 1.0}
    running = {"trial_id": trial_id, "state": "running", "latest_checkpoint": "s3://b/ckpt-9"}
    return [
        (
            f"/agents/{agent_id}/heartbeat",
            {"trials": [running], "metrics": [{"trial_id": trial_id, "points": [point]}]},
        ),
        (f"{base}/status", running),  # a checkpoint report
        (f"{base}/status", {"trial_id": trial_id, "state": "exited", "exit_code": 0}),
        (f"{base}/logs", {"lines": [{"seq": 0, "at": 1.0, "line": "forged"}]}),
    ]


@pytest.mark.parametrize("state", [IS.LOST, IS.TERMINATING, IS.TERMINATED])
@pytest.mark.parametrize("route", range(4), ids=["heartbeat", "checkpoint", "status", "logs"])
def test_no_write_is_taken_from_a_fenced_instance(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory, state: IS, route: int
) -> None:
    cloud_id, agent_id, trial_id = _running(api, cluster, running_agent)
    _fence(cluster, agent_id, state)
    path, body = _writes(agent_id, trial_id)[route]
    before = snapshot(cluster)
    reply = api.post(path, body, caller=agent_arn(cloud_id))
    assert reply.status == 409, reply.text
    assert reply.json["message"] == f"instance {cloud_id} is {state.value}: its writes are refused"
    assert snapshot(cluster) == before


@pytest.mark.parametrize("state", [IS.LOST, IS.TERMINATING, IS.TERMINATED])
def test_a_fenced_instance_may_not_register_back(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory, state: IS
) -> None:
    # LOST used to register back to IDLE; its trials were requeued and it is terminated.
    cloud_id, agent_id, _ = _running(api, cluster, running_agent)
    _fence(cluster, agent_id, state)
    before = snapshot(cluster)
    reply = api.register(cloud_id)
    assert reply.status == 409, reply.text
    assert reply.json["message"] == f"instance {cloud_id} is {state.value}: its writes are refused"
    assert snapshot(cluster) == before


def test_the_issue_a_drained_and_terminated_agent_cannot_log_into_its_completed_trial(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, trial_id = _running(api, cluster, running_agent)
    me = agent_arn(cloud_id)
    base = f"/agents/{agent_id}/trials/{trial_id}"
    api.post(f"{base}/logs", {"lines": [{"seq": 5, "at": 1.0, "line": "epoch 1"}]}, caller=me)
    end = {"trial_id": trial_id, "state": "exited", "exit_code": 0, "log_end_seq": 5}
    assert api.post(f"{base}/status", end, caller=me).json["trial_state"] == "COMPLETED"
    # Drained and terminated, as the idle reaper does it.
    now = cluster.clock.now()
    draining = commit_one(
        cluster.store, _record(cluster, agent_id).transition(IS.DRAINING, now, "idle")
    )
    assert terminate(
        cluster.ctx,
        draining.transition(IS.TERMINATING, now, "idle"),
        EventKind.INSTANCE_TERMINATING,
    )
    assert _record(cluster, agent_id).state is IS.TERMINATED

    before = snapshot(cluster)
    forged = {"lines": [{"seq": 0, "at": 0.5, "line": "written after the end"}]}
    reply = api.post(f"{base}/logs", forged, caller=me)
    assert reply.status == 409
    assert reply.json["message"] == f"instance {cloud_id} is TERMINATED: its writes are refused"
    assert snapshot(cluster) == before
    shown = api.get(f"/trials/{trial_id}/logs").json["lines"]
    assert [x["line"] for x in shown] == ["epoch 1"]


# ---- a live agent, a trial that has ended ----------------------------------------------------
def _ended(api: ApiClient, cluster: Cluster, agent: AgentFactory) -> tuple[str, str, str]:
    cloud_id, agent_id, trial_id = _running(api, cluster, agent)
    end = {"trial_id": trial_id, "state": "exited", "exit_code": 0, "log_end_seq": 7}
    reply = api.post(
        f"/agents/{agent_id}/trials/{trial_id}/status", end, caller=agent_arn(cloud_id)
    )
    assert reply.json["trial_state"] == "COMPLETED"
    assert _record(cluster, agent_id).state is IS.IDLE  # live: only the trial has ended
    return cloud_id, agent_id, trial_id


@pytest.mark.parametrize("route", [1, 2], ids=["checkpoint", "status"])
def test_a_status_about_an_ended_trial_is_refused(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory, route: int
) -> None:
    cloud_id, agent_id, trial_id = _ended(api, cluster, running_agent)
    path, body = _writes(agent_id, trial_id)[route]
    before = snapshot(cluster)
    reply = api.post(path, body, caller=agent_arn(cloud_id))
    assert reply.status == 410, reply.text
    expected = f"trial {trial_id} has ended (COMPLETED): its writes are refused"
    assert reply.json["message"] == expected
    assert snapshot(cluster) == before


def test_log_lines_past_an_ended_trials_announced_end_are_refused(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, trial_id = _ended(api, cluster, running_agent)
    path = f"/agents/{agent_id}/trials/{trial_id}/logs"
    me = agent_arn(cloud_id)
    before = snapshot(cluster)
    beyond = {"lines": [{"seq": 7, "at": 1.0, "line": "last"}, {"seq": 8, "at": 2.0, "line": "x"}]}
    reply = api.post(path, beyond, caller=me)
    assert reply.status == 410, reply.text
    assert "its output ends at seq 7" in reply.json["message"]
    assert snapshot(cluster) == before  # refused whole: not even the line up to the end
    # The status overtook its last batch (a failed flush): the lines up to the end it
    # announced are still taken (docs/api.md, logs_complete).
    late = {"lines": [{"seq": 6, "at": 1.0, "line": "late"}, {"seq": 7, "at": 2.0, "line": "end"}]}
    assert api.post(path, late, caller=me).json == {"accepted": 2}
    page = api.get(f"/trials/{trial_id}/logs").json
    assert [x["line"] for x in page["lines"]] == ["late", "end"] and page["logs_complete"]


def test_log_lines_for_an_ended_trial_with_no_announced_end_are_refused(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, trial_id = _running(api, cluster, running_agent)
    me = agent_arn(cloud_id)
    end = {"trial_id": trial_id, "state": "exited", "exit_code": 0}  # an older agent
    api.post(f"/agents/{agent_id}/trials/{trial_id}/status", end, caller=me)
    before = snapshot(cluster)
    lines = {"lines": [{"seq": 0, "at": 1.0, "line": "after the end"}]}
    reply = api.post(f"/agents/{agent_id}/trials/{trial_id}/logs", lines, caller=me)
    assert reply.status == 410 and "no more output" in reply.json["message"]
    assert snapshot(cluster) == before


def test_metric_points_for_an_ended_trial_are_dropped_and_not_asked_for_again(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    # Metrics ride on heartbeats, which are answered: the points are not stored, and the
    # reply does not ask for them again (metrics_retry).
    cloud_id, agent_id, trial_id = _ended(api, cluster, running_agent)
    path, body = _writes(agent_id, trial_id)[0]
    reply = api.post(path, body, caller=agent_arn(cloud_id))
    assert reply.status == 200, reply.text
    assert reply.json["metrics_retry"] == []
    assert reply.json["stop"] == [trial_id]  # the run the agent reports is told to stop
    assert cluster.store.metric_series(trial_id, MetricKind.VALIDATION) is None
    assert cluster.store.get_trial(trial_id).latest_checkpoint is None  # type: ignore[union-attr]


# ---- DRAINING still reports -------------------------------------------------------------------
def test_a_draining_agent_still_reports_its_trials(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, trial_id = _running(api, cluster, running_agent)
    record = _record(cluster, agent_id)
    draining = record.transition(IS.DRAINING, cluster.clock.now(), "interruption notice")
    commit_one(cluster.store, replace(draining, interruption_notice_at=cluster.clock.now()))
    me = agent_arn(cloud_id)
    heartbeat, checkpoint, done, logs = _writes(agent_id, trial_id)
    assert api.post(*heartbeat, caller=me).status == 200
    assert api.post(*logs, caller=me).json == {"accepted": 1}
    assert api.post(*checkpoint, caller=me).json["applied"] is True
    assert api.post(*done, caller=me).json["trial_state"] == "COMPLETED"
    trial = cluster.store.get_trial(trial_id)
    assert trial is not None and trial.latest_checkpoint == "s3://b/ckpt-9"
    assert cluster.store.metric_series(trial_id, MetricKind.VALIDATION) is not None


def test_an_agent_being_stopped_into_the_warm_pool_beats_until_it_stops(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    # STOPPING: empty, its machine stopping. Its last beats are heard, not answered 409 (at
    # which the agent would shut the machine down: terminated, with "terminate" as its
    # shutdown behaviour, instead of parked). STOPPED: nothing runs there to write.
    cloud_id, agent_id, _ = _ended(api, cluster, running_agent)
    now = cluster.clock.now()
    draining = commit_one(
        cluster.store, _record(cluster, agent_id).transition(IS.DRAINING, now, "idle")
    )
    stopping = commit_one(cluster.store, draining.transition(IS.STOPPING, now, "parked"))
    me = agent_arn(cloud_id)
    assert api.post(f"/agents/{agent_id}/heartbeat", {}, caller=me).status == 200
    commit_one(cluster.store, stopping.transition(IS.STOPPED, now, "stopped"))
    before = snapshot(cluster)
    reply = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=me)
    assert reply.status == 409
    assert reply.json["message"] == f"instance {cloud_id} is STOPPED: its writes are refused"
    assert snapshot(cluster) == before
