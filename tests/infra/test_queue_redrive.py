"""A message that always fails reaches its dead-letter queue before it expires.

SQS drops a message at the end of its retention period, counted from when it was first sent
(a standard queue's DLQ keeps that clock too), and only moves it to the DLQ on the receive after
its ``maxReceiveCount``-th. Each failed receive costs a visibility timeout (Lambda holds the
message until the function gives up), so retention must outlast ``maxReceiveCount`` visibility
timeouts plus the longest send delay, or a poison message expires silently instead.
The queues are the template's, on moto with its clock replaced (nothing sleeps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.aws.sqs_queue import MAX_DELAY_S
from corral.adapters.memory import FakeClock
from corral.local.template import parse_template
from tests.moto_sqs import sqs_on_a_fake_clock

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "template.yaml"
CONSUMED = ("ScheduleQueue", "ScaleUpQueue", "InterruptionsQueue")
POLL_LAG_S = 20.0  # Lambda long-polls: a visible message is taken within ~20 s


def _queues() -> dict[str, dict[str, Any]]:
    resources = parse_template(TEMPLATE.read_text())["Resources"]
    return {
        name: dict(res["Properties"])
        for name, res in resources.items()
        if res["Type"] == "AWS::SQS::Queue"
    }


def _redrive_path_s(props: dict[str, Any]) -> float:
    """Worst case from send to the receive that dead-letters the message."""
    delay = 0 if props.get("FifoQueue") else MAX_DELAY_S  # FIFO queues take no message delays
    cycles = props["RedrivePolicy"]["maxReceiveCount"]
    return delay + cycles * (props["VisibilityTimeout"] + POLL_LAG_S)


@pytest.mark.parametrize("queue", CONSUMED)
def test_retention_is_twice_the_redrive_path(queue: str) -> None:
    queues = _queues()
    props = queues[queue]
    assert props["MessageRetentionPeriod"] >= 2 * _redrive_path_s(props)
    dlq = queues[props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]]
    # A standard DLQ counts retention from the original send: it must keep messages longer.
    assert dlq["MessageRetentionPeriod"] >= props["MessageRetentionPeriod"]


def _poison_until_dead_lettered(props: dict[str, Any]) -> float | None:
    """Send one message and fail every delivery of it; the time it reached the DLQ, or None
    when it expired first (SQS drops expired messages; moto would still move them)."""
    clock = FakeClock()
    with sqs_on_a_fake_clock(clock) as sqs:
        fifo = bool(props.get("FifoQueue"))
        suffix, extra = (".fifo", {"FifoQueue": "true"}) if fifo else ("", {})
        dlq_url = sqs.create_queue(QueueName="dlq" + suffix, Attributes=extra)["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
        redrive = {
            "deadLetterTargetArn": dlq_arn["Attributes"]["QueueArn"],
            "maxReceiveCount": props["RedrivePolicy"]["maxReceiveCount"],
        }
        attributes = extra | {
            "VisibilityTimeout": str(props["VisibilityTimeout"]),
            "MessageRetentionPeriod": str(props["MessageRetentionPeriod"]),
            "RedrivePolicy": json.dumps(redrive),
        }
        url = sqs.create_queue(QueueName="work" + suffix, Attributes=attributes)["QueueUrl"]
        send: dict[str, Any] = {"QueueUrl": url, "MessageBody": "poison"}
        if fifo:
            send |= {"MessageGroupId": "g", "MessageDeduplicationId": "d"}
        else:
            send["DelaySeconds"] = MAX_DELAY_S
        sqs.send_message(**send)
        sent_at = clock.now()
        while clock.now() - sent_at < props["MessageRetentionPeriod"]:
            sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)  # and never delete: it fails
            if sqs.receive_message(QueueUrl=dlq_url, WaitTimeSeconds=0).get("Messages"):
                return clock.now() - sent_at
            clock.advance(POLL_LAG_S)
    return None


@pytest.mark.parametrize("queue", CONSUMED)
def test_a_poison_message_reaches_the_dlq(queue: str) -> None:
    props = _queues()[queue]
    assert _poison_until_dead_lettered(props) is not None


def test_the_old_interruptions_retention_let_a_poison_message_expire() -> None:
    # 3,600 s retention with 5 x 720 s visibility: the fifth failure ends at the retention
    # limit, so the message expires before the receive that would dead-letter it.
    old = _queues()["InterruptionsQueue"] | {"MessageRetentionPeriod": 3600}
    assert _poison_until_dead_lettered(old) is None
