"""PubSubQueue: the Queue port on Pub/Sub, and the parser the GCP handlers use on a delivery.

- One topic per ``QueueName`` (``corral-schedule``, ``corral-scale-up``,
  ``corral-interruptions`` by default). The data is the same JSON as on SQS,
  ``{"kind": ..., "body": ...}``; attributes carry ``kind``, ``dedupe_id`` and
  ``not_before`` so a consumer (or a subscription filter) can read them without parsing.
- ``send`` publishes every message and waits for every publish future before returning: a
  Cloud Function's CPU is throttled once it has answered, so nothing may be left in the
  client's background batch. A failed publish raises ``SendError`` naming what was lost.
  Every message is encoded and checked first, so a body that is not JSON (TypeError) or is
  over Pub/Sub's 10 MB (ValueError) refuses the whole send before anything is published.
- Dedupe: Pub/Sub has no publish-side deduplication (exactly-once delivery only stops
  redelivery of one published message). ``dedupe_id`` travels as an attribute for logs and
  tracing; correctness rests where it does on SQS standard queues: every consumer is
  idempotent (a launch moves QUEUED -> REQUESTED with a conditional write first).
- No ordering keys: with ordering on, a message that is nacked (see delays) holds back every
  later message with the same key, turning one deferred retry into a stalled pool.
- Delays: Pub/Sub cannot delay one message. ``delay_s`` becomes the attribute
  ``not_before`` (epoch seconds); the consumer checks it and, when the message is early,
  fails the delivery (``NotDue``) so Pub/Sub redelivers it under the subscription's retry
  policy (exponential backoff, 10 s to 600 s; deploy.sh sets it). A delayed message is
  therefore handled at or after its time, up to one backoff step late, which the services
  tolerate (they re-check their own deadlines). Cloud Tasks would give exact delays at the
  cost of a second messaging service; see docs/gcp.md.

``google-cloud-pubsub`` is imported on the first send.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.ports.queue import Message, QueueName

DEFAULT_TOPICS: Mapping[QueueName, str] = {q: f"corral-{q.value}" for q in QueueName}
NOT_BEFORE = "not_before"
PUBLISH_TIMEOUT_S = 30.0
MAX_MESSAGE_BYTES = 10_000_000  # Pub/Sub's limit on a message (data and attributes)


class SendError(Exception):
    """Some messages could not be published."""


class NotDue(Exception):
    """A delayed message arrived early: fail the delivery so Pub/Sub redelivers it later."""

    def __init__(self, not_before: float, now: float) -> None:
        super().__init__(f"message not due for {not_before - now:.0f} s")
        self.not_before = not_before


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message as a push subscription / Eventarc trigger hands it over."""

    message: Message
    message_id: str
    not_before: float = 0.0
    attempt: int | None = None  # Eventarc / push delivery attempt, when the subscription says


def topic_path(project: str, topic: str) -> str:
    return topic if topic.startswith("projects/") else f"projects/{project}/topics/{topic}"


def encode(message: Message, now: float) -> tuple[bytes, dict[str, str]]:
    data = json.dumps({"kind": message.kind, "body": message.body}, separators=(",", ":"))
    attributes = {"kind": message.kind}
    if message.dedupe_id is not None:
        attributes["dedupe_id"] = message.dedupe_id
    if message.delay_s > 0:
        attributes[NOT_BEFORE] = repr(now + message.delay_s)
    instance_id = message.body.get("instance_id")
    if isinstance(instance_id, str) and instance_id:
        attributes["instance_id"] = instance_id
    return data.encode(), attributes


class PubSubQueue:
    """Implements ``corral.ports.queue.Queue``.

    ``topics``: QueueName -> topic id or full path (ids are completed with ``project``).
    ``publisher``: a ``pubsub_v1.PublisherClient`` (created on first send when omitted).
    """

    def __init__(
        self,
        project: str,
        topics: Mapping[QueueName, str] | None = None,
        publisher: Any | None = None,
        *,
        clock: Callable[[], float] = time.time,
        timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        given = DEFAULT_TOPICS if topics is None else topics
        self._topics = {name: topic_path(project, t) for name, t in given.items()}
        self._publisher = publisher
        self._clock = clock
        self._timeout_s = timeout_s

    @property
    def publisher(self) -> Any:
        if self._publisher is None:
            from google.cloud import pubsub_v1  # type: ignore[attr-defined]  # lazily: ~1 s

            self._publisher = pubsub_v1.PublisherClient()
        return self._publisher

    def send(self, queue: QueueName, messages: Sequence[Message]) -> None:
        try:
            topic = self._topics[queue]
        except KeyError:
            raise ValueError(f"no Pub/Sub topic configured for {queue.value!r}") from None
        now = self._clock()
        encoded = [(message, *encode(message, now)) for message in messages]
        for message, data, attributes in encoded:
            size = len(data) + sum(len(k) + len(v.encode()) for k, v in attributes.items())
            if size > MAX_MESSAGE_BYTES:
                raise ValueError(
                    f"{message.kind}: {size} bytes is over Pub/Sub's "
                    f"{MAX_MESSAGE_BYTES}-byte message limit"
                )
        futures = []
        for message, data, attributes in encoded:
            futures.append((message, self.publisher.publish(topic, data, **attributes)))
        failed = []
        for message, future in futures:
            try:
                future.result(timeout=self._timeout_s)
            except Exception as error:  # every publish is awaited before reporting
                failed.append(f"{message.kind}: {type(error).__name__}: {error}")
        if failed:
            raise SendError(f"{len(failed)} message(s) not published to {topic}: {failed}")


def parse_delivery(data: Mapping[str, Any]) -> Delivery:
    """The message in a Pub/Sub CloudEvent's data (or a push request's JSON body):
    ``{"message": {"data": <base64>, "attributes": {...}, "messageId": ...}, ...}``."""
    envelope = data.get("message")
    if not isinstance(envelope, Mapping):
        raise ValueError("not a Pub/Sub delivery: no 'message'")
    try:
        payload = json.loads(base64.b64decode(envelope.get("data") or b""))
    except (ValueError, TypeError) as error:
        raise ValueError(f"Pub/Sub data is not base64 JSON: {error}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("kind"), str):
        raise ValueError("Pub/Sub data must be an object with a string 'kind'")
    body = payload.get("body", {})
    if not isinstance(body, dict):
        raise ValueError("Pub/Sub data's 'body' must be an object")
    attributes = envelope.get("attributes") or {}
    try:
        not_before = float(attributes.get(NOT_BEFORE) or 0.0)
    except (TypeError, ValueError):
        not_before = 0.0
    attempt = data.get("deliveryAttempt")
    return Delivery(
        message=Message(kind=payload["kind"], body=body, dedupe_id=attributes.get("dedupe_id")),
        message_id=str(envelope.get("messageId") or envelope.get("message_id") or ""),
        not_before=not_before,
        attempt=int(attempt) if isinstance(attempt, int) else None,
    )


def check_due(delivery: Delivery, now: float) -> None:
    """Raise ``NotDue`` when a delayed message came early (the handler fails the delivery)."""
    if delivery.not_before > now:
        raise NotDue(delivery.not_before, now)


__all__ = [
    "DEFAULT_TOPICS",
    "Delivery",
    "NotDue",
    "PubSubQueue",
    "SendError",
    "check_due",
    "encode",
    "parse_delivery",
]
