"""The local stack reads infra/template.yaml: intrinsics, and resources created in moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.local.resources import LocalResources, create_from_template
from corral.local.template import Resolver, load_template, rate_seconds
from tests.moto_env import use_moto_env

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "infra" / "template.yaml"


def test_short_tags_and_intrinsics(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n"
        "      A: !Ref Q\n      B: !GetAtt Q.Arn\n"
        "      C: !Sub '${AWS::StackName}-${Q.Arn}-${!x}'\n"
        "      D: !If [IsOn, !Join ['-', [a, !Ref P]], other]\n"
    )
    props = load_template(path)["Resources"]["Q"]["Properties"]
    r = Resolver(
        "eu-west-1",
        "111122223333",
        "st",
        parameters={"P": "p"},
        refs={"Q": "url"},
        attrs={("Q", "Arn"): "arn"},
        conditions={"IsOn": {"Fn::Equals": [1, 1]}},
    )
    assert r.resolve(props) == {"A": "url", "B": "arn", "C": "st-arn-${x}", "D": "a-p"}
    assert r.resolve({"Ref": "Missing"}) is None and r.unresolved == ["Ref Missing"]


@pytest.mark.parametrize(
    ("expr", "seconds"),
    [("rate(1 minute)", 60), ("rate(2 minutes)", 120), ("rate(1 hour)", 3600), ("cron(0 *)", None)],
)
def test_rates(expr: str, seconds: float | None) -> None:
    assert rate_seconds(expr) == seconds


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, LocalResources]]:
    import boto3
    from moto import mock_aws

    use_moto_env(monkeypatch)
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        yield session, create_from_template(TEMPLATE, session)


def test_template_resources_in_moto(created: tuple[Any, LocalResources]) -> None:
    session, res = created
    assert not res.warnings
    tables = session.client("dynamodb").list_tables()["TableNames"]
    assert "corral-local-instances" in tables and len(tables) == len(res.tables)
    sqs = session.client("sqs")
    attrs = sqs.get_queue_attributes(
        QueueUrl=res.queue_urls["ScheduleQueue"], AttributeNames=["All"]
    )["Attributes"]
    assert attrs["FifoQueue"] == "true" and attrs["VisibilityTimeout"] == "360"
    assert json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] == 5
    consumers = {q.function.logical_id: q for q in res.queues}
    assert set(consumers) == {"ScheduleFunction", "ScaleUpFunction", "SpotReconcileFunction"}
    assert all(q.report_failures and not q.raw_events for q in res.queues)
    assert {t.function.logical_id: t.rate_s for t in res.timers} == {
        "ScheduleFunction": 60,
        "IdleReapFunction": 60,
        "SpotReconcileFunction": 120,
    }
    assert res.http is not None and res.http.handler == "corral.handlers.aws.api.handler"
    assert res.http_route == "ANY /{proxy+}"
    env = res.environment()
    assert env["CORRAL_TABLE_PREFIX"] == "corral-local-"
    assert env["CORRAL_SCALE_UP_QUEUE_URL"] == res.queue_urls["ScaleUpQueue"]


def test_spot_warning_reaches_the_interruptions_queue(created: tuple[Any, LocalResources]) -> None:
    from corral.local.faults import SPOT_WARNING, put_ec2_event

    session, res = created
    put_ec2_event(
        session,
        SPOT_WARNING,
        "i-0123456789abcdef0",
        {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"},
    )
    put_ec2_event(
        session,
        "EC2 Instance State-change Notification",
        "i-0123456789abcdef0",
        {"instance-id": "i-0123456789abcdef0", "state": "running"},
    )  # filtered out
    got = (
        session.client("sqs")
        .receive_message(QueueUrl=res.queue_urls["InterruptionsQueue"], MaxNumberOfMessages=10)
        .get("Messages", [])
    )
    assert [json.loads(m["Body"])["detail-type"] for m in got] == [SPOT_WARNING]


def test_ec2_events_reach_spot_reconcile_as_aws_sends_them(
    created: tuple[Any, LocalResources],
) -> None:
    """moto's EventBridge leaves ``account`` out of what it puts on an SQS target; the
    queue's event source mapping hands the function the event with every field AWS sends."""
    import threading

    from corral.local.faults import SPOT_WARNING, STATE_CHANGE, put_ec2_event
    from corral.local.lambda_host import FunctionHost
    from corral.local.pollers import QueuePoller

    session, res = created
    instance = "i-0123456789abcdef0"
    put_ec2_event(
        session, SPOT_WARNING, instance, {"instance-id": instance, "instance-action": "terminate"}
    )
    put_ec2_event(session, STATE_CHANGE, instance, {"instance-id": instance, "state": "terminated"})
    (source,) = [q for q in res.queues if q.eventbridge]  # only the one a rule feeds
    assert source.function.logical_id == "SpotReconcileFunction"
    received: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        received.extend(json.loads(r["body"]) for r in event["Records"])
        return {"batchItemFailures": []}

    host = FunctionHost("us-east-1", loader=lambda dotted: handler)
    poller = QueuePoller(source, session.client("sqs"), host, "us-east-1", threading.Event())
    while poller.poll_once():
        pass

    real = json.loads((ROOT / "tests" / "fixtures" / "events" / "state_change.json").read_text())
    assert sorted(e["detail-type"] for e in received) == sorted([SPOT_WARNING, STATE_CHANGE])
    for event in received:
        assert set(event) == set(real), event
        assert (event["account"], event["region"], event["version"]) == (
            "123456789012",
            "us-east-1",
            "0",
        )
        assert event["time"].endswith("Z") and event["id"]
        assert event["resources"] == [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance}"]
