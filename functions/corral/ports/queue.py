"""The Queue port: the commands functions send each other (SQS on AWS, Pub/Sub on GCP).

Delivery is at least once and unordered; every consumer is idempotent. ``dedupe_id`` lets a
FIFO queue (or the in-memory one) drop an identical command sent twice in a short window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class QueueName(StrEnum):
    SCHEDULE = "schedule"
    SCALE_UP = "scale-up"
    INTERRUPTIONS = "interruptions"


@dataclass(frozen=True, slots=True)
class Message:
    kind: str  # e.g. "schedule", "launch_instance"
    body: dict[str, Any] = field(default_factory=dict)
    dedupe_id: str | None = None
    delay_s: float = 0.0


class Queue(Protocol):
    def send(self, queue: QueueName, messages: Sequence[Message]) -> None: ...
