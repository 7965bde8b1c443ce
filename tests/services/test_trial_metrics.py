"""Metric points shipped with heartbeats: stored once (a resent heartbeat changes nothing),
only for trials placed on the agent, never bumping the trial's version, and asked for again
when the write loses a race."""

from __future__ import annotations

from typing import Any

import pytest

from corral.domain.errors import ConflictError
from corral.domain.metrics import MetricKind
from corral.protocol.agent import (
    AgentTrialState,
    HeartbeatRequest,
    HeartbeatResponse,
    MetricPointIn,
    TrialMetrics,
    TrialStatus,
)
from corral.services import agents as agent_service
from tests.services.harness import Cluster, FakeAgent, Script, make_pool


def running(searcher: dict[str, Any] | None = None) -> tuple[Cluster, FakeAgent, str]:
    cluster = Cluster(make_pool())
    config: dict[str, Any] = {"searcher": searcher} if searcher else {}
    trial_id = cluster.submit(**config).trials[0].id
    cluster.scripts[trial_id] = Script(duration_s=10_000)
    cluster.pump()
    cluster.run(40)
    assert cluster.trial(trial_id).state.value == "RUNNING"
    (agent,) = [a for a in cluster.agents.values() if trial_id in a.running]
    return cluster, agent, trial_id


def point(seq: int, kind: str = "validation", **values: float) -> MetricPointIn:
    return MetricPointIn(seq=seq, kind=kind, batches=10 * seq, values=values, at=1.0 * seq)


def beat(
    cluster: Cluster, agent: FakeAgent, trial_id: str, points: list[MetricPointIn]
) -> HeartbeatResponse:
    assert agent.agent_id is not None
    request = HeartbeatRequest(
        trials=[TrialStatus(trial_id=trial_id, state=AgentTrialState.RUNNING)],
        metrics=[TrialMetrics(trial_id=trial_id, points=points)],
    )
    return agent_service.heartbeat(cluster.ctx, agent.agent_id, agent.cloud_id, request)


def test_points_are_stored_once_with_the_searchers_best() -> None:
    cluster, agent, trial_id = running({"metric": "acc", "smaller_is_better": False})
    version = cluster.trial(trial_id).version
    points = [
        point(1, acc=0.5),
        point(2, acc=0.9),
        point(3, acc=0.7),
        point(4, "training", loss=2.0),
        point(5, "test", acc=1.0),  # not a kind Corral knows: dropped
    ]
    assert beat(cluster, agent, trial_id, points).metrics_retry == []
    stored = cluster.store.metric_series(trial_id, MetricKind.VALIDATION)
    assert stored is not None and stored.revision == 1
    assert [p.seq for p in stored.points] == [1, 2, 3]
    assert stored.summary.metric == "acc" and stored.summary.best_value == 0.9
    training = cluster.store.metric_series(trial_id, MetricKind.TRAINING)
    assert training is not None and training.summary.best_value is None  # no "acc" there
    beat(cluster, agent, trial_id, points)  # the reply was lost: the same points again
    assert cluster.store.metric_series(trial_id, MetricKind.VALIDATION) == stored  # no write
    assert cluster.trial(trial_id).version == version  # metrics never touch the trial


def test_points_of_a_trial_never_placed_here_are_dropped() -> None:
    cluster, agent, _ = running()
    other = cluster.submit().trials[0].id  # pending, never placed on this agent
    assert agent.agent_id is not None
    reply = agent_service.heartbeat(
        cluster.ctx,
        agent.agent_id,
        agent.cloud_id,
        HeartbeatRequest(metrics=[TrialMetrics(trial_id=other, points=[point(1, loss=1.0)])]),
    )
    assert reply.metrics_retry == []  # dropped for good: nothing to resend
    assert cluster.store.metric_summaries([other]) == []


def test_a_lost_race_asks_for_the_points_again(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, agent, trial_id = running()

    def always_stale(series: object) -> object:
        raise ConflictError("stale metric series")

    monkeypatch.setattr(cluster.store, "put_metric_series", always_stale)
    reply = beat(cluster, agent, trial_id, [point(1, loss=1.0)])
    assert reply.metrics_retry == [trial_id]
    assert reply.start == [] and not reply.drain  # the heartbeat itself went through


def test_agents_of_either_version_understand_each_other() -> None:
    old_agent = HeartbeatRequest.model_validate({"trials": [], "gpu_metrics": []})
    assert old_agent.metrics == []
    old_plane = HeartbeatResponse.model_validate({"start": [], "stop": [], "drain": False})
    assert old_plane.metrics_retry == []
