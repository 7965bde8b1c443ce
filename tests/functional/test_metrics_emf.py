"""The handlers' EMF metrics against moto: what Powertools prints to stdout carries the
figures the template's dashboard and alarms read (launches, terminations, pending trials,
idle instances, capacity errors, decision latency, breakers open, budgets reached)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from corral.domain.cost import month_start_utc
from corral.handlers.aws import idle_reap, observability, scale_up, schedule
from corral.ports.queue import QueueName
from tests.functional.conftest import (
    CLUSTER_YAML,
    MAX_IDLE_S,
    TAG_KEY,
    TAG_VALUE,
    Corral,
)


def _emf(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]


def _values(blobs: list[dict[str, Any]]) -> dict[str, float]:
    """Metric name -> value summed over the blobs (EMF holds a list for repeated names)."""
    out: dict[str, float] = {}
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = blob[metric["Name"]]
                out[metric["Name"]] = out.get(metric["Name"], 0.0) + (
                    sum(value) if isinstance(value, list) else value
                )
    return out


def _printed(capsys: pytest.CaptureFixture[str]) -> dict[str, float]:
    """The metric values printed since the last read."""
    return _values(_emf(capsys))


def _units(blobs: list[dict[str, Any]]) -> dict[str, str]:
    return {
        m["Name"]: m["Unit"]
        for blob in blobs
        for directive in blob["_aws"]["CloudWatchMetrics"]
        for m in directive["Metrics"]
    }


def test_schedule_pass_reports_pending_trials_idle_instances_and_latency(
    corral: Corral, capsys: pytest.CaptureFixture[str]
) -> None:
    corral.submit(slots=1)
    corral.submit(slots=1)
    capsys.readouterr()

    corral.tick(schedule.handler)

    blobs = _emf(capsys)
    values = _values(blobs)
    assert values["PendingTrials"] == 2  # nothing registered yet: both wait for launches
    assert values["IdleInstances"] == 0
    assert values["LaunchesPlanned"] >= 1
    assert values["PoolsBreakerOpen"] == 0
    assert values["PoolsBudgetReached"] == 0
    assert values["DecisionLatency"] >= 0
    units = _units(blobs)
    assert units["DecisionLatency"] == "Milliseconds"
    assert units["PendingTrials"] == "Count"
    # The blob of the pass (not Powertools' ColdStart one): the dimension the template's
    # dashboard and alarms name, service only.
    (blob,) = [b for b in blobs if "PendingTrials" in b]
    directive = blob["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Corral"  # tests/moto_env.py, as the template sets it
    assert directive["Dimensions"] == [["service"]]
    assert blob["service"] == "schedule"


def test_breaker_open_and_budget_reached_are_counted_per_pool(
    corral: Corral, capsys: pytest.CaptureFixture[str]
) -> None:
    corral.reconfigure(
        CLUSTER_YAML.format(
            image=corral.image, subnet=corral.subnet, tag_key=TAG_KEY, tag_value=TAG_VALUE
        )
        + "      monthly_budget_usd: 10\n"
    )
    now = corral.clock.now()
    state = corral.ctx.store.pool_state("gpu")
    corral.ctx.store.commit(
        [
            replace(
                state,
                breaker_open_since=now,
                boot_failures=5,
                breaker_reason="5 instances in a row never registered",
                spend_month_start=month_start_utc(now),
                closed_spend_usd=25.0,
            )
        ]
    )
    capsys.readouterr()

    corral.tick(schedule.handler)

    values = _printed(capsys)
    assert values["PoolsBreakerOpen"] == 1
    assert values["PoolsBudgetReached"] == 1


def test_idle_agent_is_counted_then_its_termination(
    corral: Corral, capsys: pytest.CaptureFixture[str]
) -> None:
    # An agent that comes up with nothing to do: its experiment is killed before it registers.
    corral.agent(with_trial=False)
    capsys.readouterr()

    corral.tick(schedule.handler)
    gauges = _printed(capsys)
    assert gauges["IdleInstances"] == 1
    assert gauges["PendingTrials"] == 0

    corral.tick(idle_reap.handler)
    assert _printed(capsys)["Terminations"] == 0  # zeros too: 0 on a dashboard, no gap
    corral.clock.advance(MAX_IDLE_S + 1)
    corral.tick(idle_reap.handler)  # drains
    corral.tick(idle_reap.handler)  # terminates
    reaped = _printed(capsys)
    assert reaped["AgentsDrained"] == 1
    assert reaped["Terminations"] == 1


def test_launches_and_capacity_errors_from_the_scale_up_handler(
    corral: Corral, capsys: pytest.CaptureFixture[str]
) -> None:
    corral.submit(slots=1)
    corral.tick(schedule.handler)
    corral.fail_run_instances("InsufficientInstanceCapacity")
    capsys.readouterr()

    corral.deliver(QueueName.SCALE_UP, scale_up.handler)

    refused = _printed(capsys)
    assert refused["CapacityErrors"] == 1
    assert refused["LaunchErrors"] == 1
    assert refused.get("Launches", 0) == 0

    corral.stop_failing_run_instances("InsufficientInstanceCapacity")
    corral.clock.advance(600)  # past any retry delay of the record
    corral.tick(schedule.handler)  # re-drives if still queued
    capsys.readouterr()
    corral.deliver(QueueName.SCALE_UP, scale_up.handler)

    launched = _printed(capsys)
    assert launched["Launches"] == 1
    assert launched["CapacityErrors"] == 0


def test_namespace_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(observability.NAMESPACE_ENV, "Corral/staging")
    metrics = observability.make_metrics("probe")
    metrics.add_metric(name="Probe", unit="Count", value=1)
    blob = metrics.serialize_metric_set()
    metrics.clear_metrics()
    assert blob["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Corral/staging"
    monkeypatch.delenv(observability.NAMESPACE_ENV)
    assert observability.make_metrics("probe").namespace == "Corral"


def test_the_gauges_come_from_the_pass_without_reading_the_fleet_again(
    corral: Corral, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading every pending trial is what a pass costs most as the queue grows; the gauges
    # once read them (and the live instances, and each pool's state) a second time.
    from corral.adapters.aws.dynamo_store import DynamoStore

    reads: list[str] = []
    for name in ("trials", "instances"):
        original = getattr(DynamoStore, name)

        def counted(self: DynamoStore, *args: Any, _n: str = name, _f: Any = original, **kw: Any):  # type: ignore[no-untyped-def]
            reads.append(_n)
            return _f(self, *args, **kw)

        monkeypatch.setattr(DynamoStore, name, counted)
    corral.submit(slots=1)
    corral.submit(slots=1)
    capsys.readouterr()
    reads.clear()

    corral.tick(schedule.handler)

    assert reads.count("trials") == 1 and reads.count("instances") == 1
    assert _printed(capsys)["PendingTrials"] == 2
