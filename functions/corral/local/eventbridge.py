"""EventBridge events as AWS delivers them, from what moto's EventBridge delivers.

moto 5 builds what a rule sends to its targets from a template that leaves out ``account``
(and would leave out any other envelope field it does not know). Real EventBridge always
sends ``version``, ``id``, ``detail-type``, ``source``, ``account``, ``time``, ``region``,
``resources`` and ``detail``; so the local stack's event source mappings fill in what is
missing before a handler sees the event, from what AWS would have put there: the queue's
account and region, EventBridge's fixed ``version`` "0", an id that stays the same when the
message is received again, and the time SQS received the message.

Only fields that are *missing* are filled in: a field moto sends is passed on as it is, and a
body that is not an EventBridge event (no ``detail-type`` and ``source``) is left alone.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

# The order EventBridge writes them in (a reader of the logs expects it).
ENVELOPE = (
    "version",
    "id",
    "detail-type",
    "source",
    "account",
    "time",
    "region",
    "resources",
    "detail",
)
_ID_NAMESPACE = uuid.UUID("5f0c6a52-3d1e-4b7a-9a57-6c6f72616c21")  # "corral" ids, local only


def account_of(arn: str) -> str:
    """The account field of an ARN (``arn:aws:sqs:REGION:ACCOUNT:name``), or ""."""
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 else ""


def iso_time(epoch_s: float) -> str:
    """EventBridge's ``time``: UTC, whole seconds, ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def complete_event(
    event: dict[str, Any],
    *,
    account: str,
    region: str,
    message_id: str,
    sent_at: float | None = None,
) -> dict[str, Any]:
    """``event`` with every envelope field AWS sends; ``event`` itself if none was missing.

    ``message_id`` (the SQS message's) makes the filled-in ``id``, so a retried message keeps
    its event id; ``sent_at`` (epoch seconds SQS received it) is the ``time`` if there is none.
    """
    if not isinstance(event.get("detail-type"), str) or not isinstance(event.get("source"), str):
        return event
    defaults: dict[str, Any] = {
        "version": "0",
        "id": str(uuid.uuid5(_ID_NAMESPACE, message_id)),
        "account": account,
        "time": iso_time(time.time() if sent_at is None else sent_at),
        "region": region,
        "resources": [],
    }
    missing = [key for key in defaults if key not in event]
    if not missing:
        return event
    filled = {**event, **{key: defaults[key] for key in missing}}
    ordered = {key: filled[key] for key in ENVELOPE if key in filled}
    return {**ordered, **filled}


def complete_message(message: dict[str, Any], *, account: str, region: str) -> dict[str, Any]:
    """An SQS ``ReceiveMessage`` result whose body is an EventBridge event, completed
    (``complete_event``); any other message is returned unchanged."""
    body = message.get("Body")
    if not isinstance(body, str):
        return message
    try:
        event = json.loads(body)
    except ValueError:
        return message
    if not isinstance(event, dict):
        return message
    sent_ms = str((message.get("Attributes") or {}).get("SentTimestamp") or "")
    sent_at = int(sent_ms) / 1000 if sent_ms.isdigit() else None
    completed = complete_event(
        event,
        account=account,
        region=region,
        message_id=str(message.get("MessageId") or body),
        sent_at=sent_at,
    )
    if completed is event:
        return message
    new_body = json.dumps(completed)
    return {**message, "Body": new_body, "MD5OfBody": hashlib.md5(new_body.encode()).hexdigest()}
