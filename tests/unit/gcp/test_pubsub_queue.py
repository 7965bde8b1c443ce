"""PubSubQueue with a fake publisher, and the delivery parser the handlers use."""

from __future__ import annotations

import base64
import json
from concurrent.futures import Future
from typing import Any

import pytest

from corral.adapters.gcp.pubsub_queue import (
    NotDue,
    PubSubQueue,
    SendError,
    check_due,
    parse_delivery,
)
from corral.ports.queue import Message, QueueName

NOW = 1_700_000_000.0


class FakePublisher:
    def __init__(self, fail_kinds: frozenset[str] = frozenset()) -> None:
        self.published: list[tuple[str, bytes, dict[str, str]]] = []
        self._fail = fail_kinds

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        self.published.append((topic, data, attributes))
        future: Future[str] = Future()
        if attributes.get("kind") in self._fail:
            future.set_exception(RuntimeError("publish failed"))
        else:
            future.set_result(str(len(self.published)))
        return future


def queue(publisher: FakePublisher, **kw: Any) -> PubSubQueue:
    return PubSubQueue("my-project-1", publisher=publisher, clock=lambda: NOW, **kw)


def test_messages_go_to_the_queues_topic_as_json_with_attributes() -> None:
    publisher = FakePublisher()
    queue(publisher).send(
        QueueName.SCALE_UP,
        [Message("launch_instance", {"instance_id": "inst-1", "attempt": 0}, dedupe_id="inst-1-0")],
    )
    ((topic, data, attributes),) = publisher.published
    assert topic == "projects/my-project-1/topics/corral-scale-up"
    assert json.loads(data) == {
        "kind": "launch_instance",
        "body": {"instance_id": "inst-1", "attempt": 0},
    }
    assert attributes == {
        "kind": "launch_instance",
        "dedupe_id": "inst-1-0",
        "instance_id": "inst-1",
    }


def test_a_delay_becomes_not_before() -> None:
    publisher = FakePublisher()
    queue(publisher).send(QueueName.SCALE_UP, [Message("launch_instance", {}, delay_s=30.5)])
    assert float(publisher.published[0][2]["not_before"]) == NOW + 30.5


def test_custom_topics_and_full_paths() -> None:
    publisher = FakePublisher()
    topics = {QueueName.SCHEDULE: "projects/other/topics/sched"}
    queue(publisher, topics=topics).send(QueueName.SCHEDULE, [Message("schedule")])
    assert publisher.published[0][0] == "projects/other/topics/sched"
    with pytest.raises(ValueError, match="scale-up"):
        queue(publisher, topics=topics).send(QueueName.SCALE_UP, [Message("x")])


def test_every_publish_is_awaited_and_failures_are_reported() -> None:
    publisher = FakePublisher(fail_kinds=frozenset({"bad"}))
    with pytest.raises(SendError, match="1 message"):
        queue(publisher).send(QueueName.SCHEDULE, [Message("schedule"), Message("bad")])
    assert len(publisher.published) == 2  # the good one was still sent


def _delivery(payload: Any, attributes: dict[str, str] | None = None) -> dict[str, Any]:
    data = base64.b64encode(json.dumps(payload).encode()).decode()
    return {
        "message": {"data": data, "attributes": attributes or {}, "messageId": "m-1"},
        "subscription": "projects/p/subscriptions/s",
    }


def test_a_delivery_round_trips_what_send_published() -> None:
    publisher = FakePublisher()
    message = Message(
        "launch_instance", {"instance_id": "i", "attempt": 2}, dedupe_id="i-2", delay_s=5
    )
    queue(publisher).send(QueueName.SCALE_UP, [message])
    _, data, attributes = publisher.published[0]
    delivered = parse_delivery(_delivery(json.loads(data), attributes))
    assert delivered.message == Message("launch_instance", message.body, dedupe_id="i-2")
    assert delivered.message_id == "m-1" and delivered.not_before == NOW + 5
    with pytest.raises(NotDue):
        check_due(delivered, NOW + 4)
    check_due(delivered, NOW + 5)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"message": {"data": "!!"}},
        _delivery([1]),
        _delivery({"kind": 1}),
        _delivery({"kind": "x", "body": []}),
    ],
)
def test_malformed_deliveries_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_delivery(bad)
