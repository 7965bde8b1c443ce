"""EventBridge events (as SQS bodies) parse into typed values; bad input names the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.aws.events import (
    EventParseError,
    InstanceStateChange,
    RebalanceRecommendation,
    ScheduledTick,
    SpotInterruptionWarning,
    UnsupportedEvent,
    parse_event,
    parse_sqs_batch,
    parse_sqs_record,
)
from corral.domain.cloud_view import CloudState

FIXTURES = Path(__file__).parents[2] / "fixtures" / "events"


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def test_spot_interruption_warning() -> None:
    event = parse_event(load("spot_interruption_warning"))
    assert isinstance(event, SpotInterruptionWarning)
    assert (event.instance_id, event.instance_action) == ("i-1234567890abcdef0", "terminate")
    assert (event.region, event.account) == ("us-east-1", "123456789012")
    assert event.time.isoformat() == "2024-05-14T12:00:00+00:00"


def test_rebalance_recommendation() -> None:
    event = parse_event(load("rebalance_recommendation"))
    assert isinstance(event, RebalanceRecommendation)
    assert event.instance_id == "i-1234567890abcdef0"


def test_state_change_maps_to_the_cloud_state() -> None:
    event = parse_event(load("state_change"))
    assert isinstance(event, InstanceStateChange)
    assert (event.instance_id, event.state) == ("i-1234567890abcdef0", CloudState.TERMINATING)


def test_scheduled_event() -> None:
    event = parse_event(json.dumps(load("scheduled_event")))
    assert isinstance(event, ScheduledTick)
    assert event.rule_arn == "arn:aws:events:us-east-1:123456789012:rule/corral-spot-reconcile"


def test_sqs_batch_wrapping_every_kind() -> None:
    batch = load("sqs_batch")
    kinds = [type(e) for e in parse_sqs_batch(batch)]
    assert kinds == [
        SpotInterruptionWarning,
        RebalanceRecommendation,
        InstanceStateChange,
        ScheduledTick,
    ]
    assert isinstance(parse_sqs_record(batch["Records"][0]), SpotInterruptionWarning)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda e: e["detail"].pop("instance-id"), "detail.instance-id"),
        (lambda e: e["detail"].update({"instance-id": "vol-1"}), "detail.instance-id"),
        (lambda e: e["detail"].update({"instance-action": "reboot"}), "detail.instance-action"),
        (lambda e: e.pop("detail"), "detail"),
        (lambda e: e.update({"time": "yesterday"}), "time"),
        (lambda e: e.update({"source": "my.app"}), "source"),
        (lambda e: e.pop("detail-type"), "detail-type"),
    ],
)
def test_malformed_events_name_the_field(change: Any, field: str) -> None:
    event = load("spot_interruption_warning")
    change(event)
    with pytest.raises(EventParseError) as caught:
        parse_event(event)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_bad_bodies_and_batches_name_the_field() -> None:
    with pytest.raises(EventParseError, match=r"^body: not JSON"):
        parse_event("{not json")
    with pytest.raises(EventParseError, match=r"^event: must be a JSON object"):
        parse_event("[1]")
    batch = load("sqs_batch")
    batch["Records"][2]["body"] = json.dumps({**load("state_change"), "detail": {}})
    with pytest.raises(EventParseError) as caught:
        parse_sqs_batch(batch)
    assert caught.value.field == "Records.2.detail.instance-id"


def test_other_event_types_are_unsupported() -> None:
    event = {**load("scheduled_event"), "detail-type": "AWS API Call via CloudTrail"}
    with pytest.raises(UnsupportedEvent, match=r"^detail-type: unsupported"):
        parse_event(event)


def test_the_parser_imports_neither_boto3_nor_botocore() -> None:
    code = (
        "import sys, corral.adapters.aws.events; "
        "print('boto3' in sys.modules, 'botocore' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["spot_interruption_warning", "state_change"])
def test_envelope_fields_corral_does_not_use_may_be_missing(name: str) -> None:
    """EventBridge always sends these, but Corral reads none of them: their absence (as in
    moto's SQS deliveries, which omit ``account``) must not make the event unreadable."""
    event = load(name)
    for key in ("version", "id", "account", "time", "region", "resources"):
        del event[key]
    parsed = parse_event(event)
    assert parsed.instance_id == "i-1234567890abcdef0"
    assert (parsed.account, parsed.id, parsed.time, parsed.resources) == (None, None, None, ())


def test_what_moto_delivers_to_sqs_parses() -> None:
    """The body moto 5's EventBridge puts on an SQS target (no ``account``)."""
    body = (
        '{"id": "b5ef0a07-8dfe-4260-b88c-a4c6bae20f52", "time": "2026-11-25T08:22:07Z", '
        '"version": "0", "detail-type": "EC2 Spot Instance Interruption Warning", '
        '"source": "aws.ec2", "region": "us-east-1", "resources": [], '
        '"detail": {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"}}'
    )
    event = parse_event(body)
    assert isinstance(event, SpotInterruptionWarning)
    assert event.instance_id == "i-0123456789abcdef0" and event.account is None
