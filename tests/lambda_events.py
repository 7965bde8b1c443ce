"""What AWS hands the Lambda functions, shared by the functional and chaos tests: Lambda's
context object, SQS event records as the event source mapping delivers them, and the
EventBridge timer and EC2 events."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from corral.local import timers
from corral.ports.commands import CommandKind
from tests.moto_env import ACCOUNT, REGION

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
STATE_CHANGE = "EC2 Instance State-change Notification"


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"


@dataclass
class LambdaContext:
    """What Powertools reads from Lambda's context object."""

    function_name: str = "corral"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = function_arn("corral")
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def sqs_record(
    queue_arn: str,
    body: str,
    message_id: str,
    *,
    sent_ms: str,
    receive_count: int = 1,
    receipt_handle: str | None = None,
    sequence_number: str = "1",
) -> dict[str, Any]:
    """One record of a Lambda SQS event, as the event source mapping delivers it."""
    attributes = {
        "ApproximateReceiveCount": str(receive_count),
        "SentTimestamp": sent_ms,
        "SenderId": "AIDAEXAMPLE",
        "ApproximateFirstReceiveTimestamp": sent_ms,
    }
    if queue_arn.endswith(".fifo"):
        attributes |= {
            "MessageGroupId": CommandKind.SCHEDULE.value,  # the only FIFO queue's kind
            "MessageDeduplicationId": message_id,
            "SequenceNumber": sequence_number,
        }
    return {
        "messageId": message_id,
        "receiptHandle": receipt_handle or f"rh-{message_id}",
        "body": body,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


def scheduled_event(rule: str, time: str) -> dict[str, Any]:
    """An EventBridge schedule rule's event; ``time`` as ``2025-01-01T00:00:00Z``."""
    return timers.scheduled_event(
        f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule}", REGION, ACCOUNT, time
    )


def ec2_event(detail_type: str, instance_id: str, time: str, **detail: str) -> dict[str, Any]:
    """An EC2 event as EventBridge routes it (a spot warning, a state change, ...)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": ACCOUNT,
        "time": time,
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, **detail},
    }
