"""EventBridge events, as delivered to SQS, parsed into typed values.

The SQS message body is the EventBridge event JSON. Four kinds matter to Corral:
"EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation",
"EC2 Instance State-change Notification" (all ``source: aws.ec2``) and "Scheduled Event"
(``source: aws.events``, the timer rules).

Plain pydantic models, on purpose: Powertools has no models for these EC2 details (only the
generic ``EventBridgeModel``, whose import also loads botocore), and this parser runs on
the cold path of the interruption handler. This module must not import boto3 or botocore.
Malformed input raises :class:`EventParseError` naming the field (``detail.instance-id``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from corral.adapters.aws.ec2_states import EC2_STATES
from corral.domain.cloud_view import CloudState

InstanceId = Annotated[str, StringConstraints(pattern=r"^i-[0-9a-f]{8,17}$")]

SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
SCHEDULED = "Scheduled Event"


class EventParseError(ValueError):
    """The event is not what we expect; ``field`` names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class UnsupportedEvent(EventParseError):
    """A well-formed event of a kind Corral does not handle (the caller may drop it)."""


class _Model(BaseModel):
    # EventBridge adds fields over time: ignore unknown ones rather than fail on them.
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _Envelope(_Model):
    """The fields of an EventBridge event (Powertools' EventBridgeModel, minus botocore).

    Only what Corral acts on is required: ``detail-type``, ``source`` and the detail fields of
    each kind. EventBridge always sends the others too, but nothing here reads them, and an
    event must not become unreadable (and, on a queue, retried until it dead-letters) for
    lack of one: moto's EventBridge, for one, leaves ``account`` out of what it puts on SQS.
    A field that is present is still checked (a ``time`` that is not a time is an error).
    """

    version: str | None = None
    id: str | None = None
    detail_type: str = Field(alias="detail-type")
    source: str
    account: str | None = None
    time: datetime | None = None
    region: str | None = None
    resources: tuple[str, ...] = ()


class _InstanceDetail(_Model):
    instance_id: InstanceId = Field(alias="instance-id")


class _SpotDetail(_InstanceDetail):
    instance_action: Literal["terminate", "stop", "hibernate"] = Field(alias="instance-action")


class _StateDetail(_InstanceDetail):
    state: Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]


class _InstanceEvent(_Envelope):
    """An EC2 event about one instance."""

    source: Literal["aws.ec2"]
    detail: _InstanceDetail

    @property
    def instance_id(self) -> str:
        return self.detail.instance_id


class SpotInterruptionWarning(_InstanceEvent):
    """EC2 will interrupt the instance about two minutes after ``time``."""

    detail_type_name: ClassVar[str] = SPOT_INTERRUPTION
    detail: _SpotDetail

    @property
    def instance_action(self) -> str:
        return self.detail.instance_action


class RebalanceRecommendation(_InstanceEvent):
    """The instance is at elevated risk of interruption (often well before the warning)."""

    detail_type_name: ClassVar[str] = REBALANCE


class InstanceStateChange(_InstanceEvent):
    detail_type_name: ClassVar[str] = STATE_CHANGE
    detail: _StateDetail

    @property
    def state(self) -> CloudState:
        return EC2_STATES[self.detail.state]


class ScheduledTick(_Envelope):
    """A timer rule fired; ``resources`` holds the rule's ARN."""

    detail_type_name: ClassVar[str] = SCHEDULED
    source: Literal["aws.events", "aws.scheduler"]
    detail: dict[str, Any] = Field(default_factory=dict)

    @property
    def rule_arn(self) -> str | None:
        return self.resources[0] if self.resources else None


Ec2Event = SpotInterruptionWarning | RebalanceRecommendation | InstanceStateChange | ScheduledTick
_BY_DETAIL_TYPE: Mapping[str, type[Ec2Event]] = {
    m.detail_type_name: m
    for m in (SpotInterruptionWarning, RebalanceRecommendation, InstanceStateChange, ScheduledTick)
}


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "event"


def parse_event(event: str | bytes | Mapping[str, Any]) -> Ec2Event:
    """One EventBridge event (a dict, or its JSON text as found in an SQS body)."""
    if isinstance(event, str | bytes):
        try:
            event = json.loads(event)
        except ValueError as error:
            raise EventParseError("body", f"not JSON ({error})") from error
    if not isinstance(event, Mapping):
        raise EventParseError("event", f"must be a JSON object, got {type(event).__name__}")
    detail_type = event.get("detail-type")
    if not isinstance(detail_type, str):
        raise EventParseError("detail-type", "missing or not a string")
    model = _BY_DETAIL_TYPE.get(detail_type)
    if model is None:
        raise UnsupportedEvent("detail-type", f"unsupported event type {detail_type!r}")
    try:
        return model.model_validate(event)
    except ValidationError as error:
        first = error.errors()[0]
        raise EventParseError(_field(first["loc"]), first["msg"]) from error


def parse_sqs_record(record: Mapping[str, Any]) -> Ec2Event:
    """The EventBridge event inside one SQS record (Lambda's ``Records[i]``)."""
    body = record.get("body")
    if not isinstance(body, str):
        raise EventParseError("body", "missing or not a string")
    return parse_event(body)


def parse_sqs_batch(event: Mapping[str, Any]) -> list[Ec2Event]:
    """Every event of an SQS batch; the first bad record fails with its index in the field.

    Handlers that want partial batch failures call ``parse_sqs_record`` per record instead.
    """
    records = event.get("Records")
    if not isinstance(records, list):
        raise EventParseError("Records", "missing or not a list")
    parsed = []
    for i, record in enumerate(records):
        try:
            parsed.append(parse_sqs_record(record))
        except EventParseError as error:
            raise type(error)(f"Records.{i}.{error.field}", error.problem) from error
    return parsed


__all__ = [
    "REBALANCE",
    "SCHEDULED",
    "SPOT_INTERRUPTION",
    "STATE_CHANGE",
    "Ec2Event",
    "EventParseError",
    "InstanceStateChange",
    "RebalanceRecommendation",
    "ScheduledTick",
    "SpotInterruptionWarning",
    "UnsupportedEvent",
    "parse_event",
    "parse_sqs_batch",
    "parse_sqs_record",
]
