"""The template's alarms and dashboard against what the handlers emit: every dead-letter
queue has an alarm, the breaker and budget alarms read metrics the schedule pass publishes,
and every Corral metric on the dashboard is one some handler publishes (a renamed metric
would leave an alarm that never fires, or an empty graph)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from corral.domain.errors import LaunchErrorClass
from corral.handlers.aws.metrics import (
    launch_figures,
    reap_figures,
    reconcile_figures,
    schedule_figures,
)
from corral.local.template import parse_template
from corral.services.idle_reap import ReapReport
from corral.services.reconcile import ReconcileReport
from corral.services.scale_up import LaunchOutcome
from corral.services.schedule_pass import PassReport
from tests.infra.test_template import TEMPLATE

# Metric names per service dimension, as the handlers publish them (corral.handlers.aws).
EMITTED: dict[str, set[str]] = {
    "schedule": {f.name for f in schedule_figures(PassReport(), 0.0, 0)},
    "idle_reap": {f.name for f in reap_figures(ReapReport())},
    "spot_reconcile": {f.name for f in reconcile_figures(ReconcileReport())},
    "scale_up": {
        f.name for o in LaunchOutcome for f in launch_figures(o, Counter[LaunchErrorClass]())
    },
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return parse_template(TEMPLATE.read_text())


def _alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        k: v["Properties"]
        for k, v in template["Resources"].items()
        if v["Type"] == "AWS::CloudWatch::Alarm"
    }


def test_every_dead_letter_queue_has_an_alarm(template: dict[str, Any]) -> None:
    dlqs = {
        q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for q in template["Resources"].values()
        if q["Type"] == "AWS::SQS::Queue" and "RedrivePolicy" in q["Properties"]
    }
    assert len(dlqs) == 3
    watched = set()
    for props in _alarms(template).values():
        if props["Namespace"] != "AWS/SQS":
            continue
        assert props["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert (props["ComparisonOperator"], props["Threshold"]) == ("GreaterThanThreshold", 0)
        (dim,) = props["Dimensions"]
        assert dim["Name"] == "QueueName"
        watched.add(dim["Value"]["Fn::GetAtt"][0])
    assert watched == dlqs


@pytest.mark.parametrize("metric", ["PoolsBreakerOpen", "PoolsBudgetReached"])
def test_breaker_and_budget_alarms_read_what_the_schedule_pass_publishes(
    template: dict[str, Any], metric: str
) -> None:
    (props,) = [p for p in _alarms(template).values() if p["MetricName"] == metric]
    assert props["Namespace"] == {"Ref": "MetricsNamespace"}
    assert props["Dimensions"] == [{"Name": "service", "Value": "schedule"}]
    assert metric in EMITTED["schedule"]
    assert (props["ComparisonOperator"], props["Threshold"]) == (
        "GreaterThanOrEqualToThreshold",
        1,
    )


def test_alarms_notify_the_optional_topic(template: dict[str, Any]) -> None:
    for name, props in _alarms(template).items():
        assert props["AlarmActions"] == {
            "Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
        }, name
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""


def test_functions_publish_in_the_namespace_parameter(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == {"Ref": "MetricsNamespace"}


def test_dashboard_shows_only_published_metrics(template: dict[str, Any]) -> None:
    body = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    # ${...} are Fn::Sub's; fill them in to read the JSON.
    dashboard = json.loads(re.sub(r"\$\{([^}]+)\}", r"sub:\1", body))
    shown: set[tuple[str, str]] = set()
    for widget in dashboard["widgets"]:
        for row in widget["properties"].get("metrics", []):
            namespace, name, dim, value = row[:4]
            if namespace == "sub:MetricsNamespace":
                assert dim == "service"
                shown.add((value, name))
    missing = {(s, n) for s, n in shown if n not in EMITTED.get(s, set())}
    assert not missing, f"on the dashboard but never published: {missing}"
    wanted = {
        ("scale_up", "Launches"),
        ("idle_reap", "Terminations"),
        ("spot_reconcile", "Terminations"),
        ("schedule", "PendingTrials"),
        ("schedule", "IdleInstances"),
        ("scale_up", "CapacityErrors"),
        ("schedule", "DecisionLatency"),
    }
    assert wanted <= shown
