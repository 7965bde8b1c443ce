"""The Cloud Functions' metrics: the same figures as the Lambda functions' EMF, printed as one
structured JSON line per run (Cloud Logging's log-based metrics read ``jsonPayload.metrics``).
The functions run through functions-framework's test client over the memory adapters."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("functions_framework", reason="functions-framework not installed")

from corral.adapters.memory.cloud_model import SimulatedCloudConfig
from corral.handlers.gcp import composition
from corral.ports.queue import QueueName
from tests.services.harness import Cluster
from tests.unit.gcp.test_gcp_handlers import deliver, launch_payload


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    out = []
    for line in capsys.readouterr().out.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "metrics" in entry:
            out.append(entry)
    return out


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    # Every launch of the g.1 offerings is refused for capacity.
    made = Cluster(cloud=SimulatedCloudConfig(capacity_error_rate={"g.1": 1.0}))
    monkeypatch.setattr(composition, "build_context", lambda: made.ctx)
    return made


def test_schedule_pass_logs_the_gauges_and_its_latency(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.submit(name="one", resources={"slots_per_trial": 1})
    capsys.readouterr()

    assert deliver("schedule", {"kind": "schedule", "body": {}}) == 200

    (entry,) = _lines(capsys)
    assert entry["severity"] == "INFO"
    assert entry["service"] == "schedule"
    metrics = entry["metrics"]
    assert metrics["PendingTrials"] == 1
    assert metrics["IdleInstances"] == 0
    assert metrics["LaunchesPlanned"] == 1
    assert metrics["PoolsBreakerOpen"] == 0
    assert metrics["PoolsBudgetReached"] == 0
    assert metrics["DecisionLatency"] >= 0
    assert entry["breaker_open"] == []


def test_scale_up_logs_capacity_errors(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.submit(name="one", resources={"slots_per_trial": 1})
    deliver("schedule", {"kind": "schedule", "body": {}})
    (launch, *_) = cluster.queue.drain(QueueName.SCALE_UP)
    capsys.readouterr()

    assert deliver("scale_up", launch_payload(launch)) == 200

    (entry,) = _lines(capsys)
    assert entry["service"] == "scale_up"
    assert entry["metrics"]["CapacityErrors"] == 1
    assert entry["metrics"]["LaunchErrors"] == 1
    assert entry["metrics"]["LaunchesDeferred"] == 1


def test_timers_log_terminations(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    deliver("idle_reap", {"kind": "idle_reap"})
    deliver("spot_reconcile", {"kind": "reconcile"})
    reap, reconcile = _lines(capsys)
    assert (reap["service"], reap["metrics"]["Terminations"]) == ("idle_reap", 0)
    assert (reconcile["service"], reconcile["metrics"]["Terminations"]) == ("spot_reconcile", 0)
