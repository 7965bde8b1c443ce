"""EC2 rebalance recommendations, read from IMDS by the agent (agent_runtime/identity.py) and
acted on by its loop (agent_runtime/interruptions.py, agent.py), per ``rebalance_action``.

By default (``drain``) a recommendation stops new work from landing on the instance and
leaves running trials alone; the spot interruption notice that may follow still preempts them
within its window."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from tests.agent.conftest import FakeMetadata, assignment, ec2_values, trial_script
from tests.agent.test_agent_flow import CHECKPOINTING, _states

REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"


def _running_agent(make_agent, plane, metadata: FakeMetadata, tmp_path: Path, **overrides):  # type: ignore[no-untyped-def]
    metadata.values.update(ec2_values())
    plane.heartbeat_replies.append(
        {"start": [assignment("t-1", trial_script(tmp_path, CHECKPOINTING))]}
    )
    h = make_agent(cloud="ec2", ec2_metadata_url=metadata.url, **overrides)
    h.step_until(lambda: any(x.startswith("ready") for x in plane.log_lines("t-1")))
    metadata.values[REBALANCE] = json.dumps({"noticeTime": "2026-11-28T09:00:00Z"})
    return h


def _heartbeats_after(h, plane, ticks: int) -> dict:  # type: ignore[no-untyped-def]
    n = len(plane.posts("/heartbeat"))
    h.step_until(lambda: len(plane.posts("/heartbeat")) >= n + ticks, advance=2.0)
    return dict(plane.posts("/heartbeat")[-1].body)


def test_by_default_a_recommendation_drains_and_the_trial_runs_on(
    make_agent, plane, metadata: FakeMetadata, tmp_path: Path
) -> None:
    h = _running_agent(make_agent, plane, metadata, tmp_path)
    assert h.agent.config.rebalance_action == "drain"
    beat = _heartbeats_after(h, plane, 3)
    assert beat["draining"] is True and beat["interruption_notice"] is False
    assert h.agent.trials["t-1"].state.value == "running"
    assert "preempted" not in _states(plane, "t-1")
    # No new work lands here...
    plane.heartbeat_replies.append({"start": [assignment("t-2", ["true"])]})
    h.step_until(lambda: not plane.heartbeat_replies, advance=5.0)
    assert "t-2" not in h.agent.trials
    # ...and the interruption that may follow still preempts within its window.
    when = datetime.fromtimestamp(h.clock.time() + 120, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata.values[INSTANCE_ACTION] = json.dumps({"action": "terminate", "time": when})
    h.step_until(lambda: "preempted" in _states(plane, "t-1"), advance=0.5)
    assert plane.posts("/heartbeat")[-1].body["interruption_notice"] is True


def test_preempt_stops_every_trial_on_a_recommendation(
    make_agent, plane, metadata: FakeMetadata, tmp_path: Path
) -> None:
    h = _running_agent(make_agent, plane, metadata, tmp_path, rebalance_action="preempt")
    h.step_until(lambda: "preempted" in _states(plane, "t-1"), advance=0.5)
    final = next(s for s in plane.statuses("t-1") if s["state"] == "preempted")
    assert final["exit_code"] == 0  # it checkpointed and exited on SIGTERM


def test_ignore_neither_drains_nor_stops(
    make_agent, plane, metadata: FakeMetadata, tmp_path: Path
) -> None:
    h = _running_agent(make_agent, plane, metadata, tmp_path, rebalance_action="ignore")
    beat = _heartbeats_after(h, plane, 3)
    assert beat["draining"] is False and beat["interruption_notice"] is False
    assert h.agent.trials["t-1"].state.value == "running"
    assert not any(r.path.endswith("rebalance") for r in metadata.seen)  # never even read
