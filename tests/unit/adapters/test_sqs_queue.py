"""SqsQueue under moto: batching, FIFO ids, delays, resending failed entries, body parsing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.adapters.aws.sqs_queue import SendError, SqsQueue, group_id, parse_sqs_body
from corral.ports.queue import Message, QueueName
from tests.moto_env import moto_environ

moto = pytest.importorskip("moto")


@pytest.fixture
def sqs() -> Iterator[Any]:
    import boto3

    with moto_environ(), moto.mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def queue(sqs: Any) -> SqsQueue:
    urls = {
        QueueName.SCALE_UP: sqs.create_queue(QueueName="scale-up")["QueueUrl"],
        QueueName.SCHEDULE: sqs.create_queue(
            QueueName="schedule.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"],
    }
    return SqsQueue(urls, sqs, sleep=lambda _: None)


def sent_batches(sqs: Any) -> list[list[dict[str, Any]]]:
    """The entries of every SendMessageBatch call from now on."""
    batches: list[list[dict[str, Any]]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch",
        lambda params, **_: batches.append([dict(e) for e in params["Entries"]]),
    )
    return batches


def receive_all(sqs: Any, url: str) -> list[Message]:
    got: list[Message] = []
    while True:
        reply = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        if not reply.get("Messages"):
            return got
        got += [parse_sqs_body(m["Body"]) for m in reply["Messages"]]


def test_sends_in_batches_of_ten_and_bodies_parse_back(queue: SqsQueue, sqs: Any) -> None:
    batches = sent_batches(sqs)
    messages = [
        Message("launch_instance", {"instance_id": f"i{n}", "attempt": 0}) for n in range(23)
    ]
    queue.send(QueueName.SCALE_UP, messages)
    assert [len(b) for b in batches] == [10, 10, 3]
    url = queue._urls[QueueName.SCALE_UP]
    got = receive_all(sqs, url)
    assert sorted(m.body["instance_id"] for m in got) == sorted(f"i{n}" for n in range(23))
    assert all(m.kind == "launch_instance" for m in got)


def test_big_messages_split_batches_by_size(queue: SqsQueue, sqs: Any) -> None:
    batches = sent_batches(sqs)
    queue.send(QueueName.SCALE_UP, [Message("big", {"pad": "x" * 100_000})] * 5)
    assert [len(b) for b in batches] == [2, 2, 1]


def test_standard_queue_delays_rounded_up_and_capped(queue: SqsQueue, sqs: Any) -> None:
    batches = sent_batches(sqs)
    queue.send(
        QueueName.SCALE_UP,
        [Message("a", delay_s=0.0), Message("b", delay_s=2.5), Message("c", delay_s=3600.0)],
    )
    assert [e.get("DelaySeconds") for e in batches[0]] == [None, 3, 900]
    assert all("MessageDeduplicationId" not in e for e in batches[0])


def test_fifo_queue_dedupes_and_groups(queue: SqsQueue, sqs: Any) -> None:
    batches = sent_batches(sqs)
    launch = Message("launch_instance", {"instance_id": "i1", "attempt": 0}, dedupe_id="i1-0")
    queue.send(QueueName.SCHEDULE, [launch, Message("schedule"), Message("schedule")])
    queue.send(QueueName.SCHEDULE, [launch])  # a repeat within 5 minutes: dropped by SQS
    first = batches[0]
    assert first[0]["MessageDeduplicationId"] == "i1-0"
    assert first[0]["MessageGroupId"] == "launch_instance:i1"
    assert first[1]["MessageGroupId"] == "schedule"
    # No dedupe_id: no dedupe, so two identical schedule messages both arrive.
    assert first[1]["MessageDeduplicationId"] != first[2]["MessageDeduplicationId"]
    got = receive_all(sqs, queue._urls[QueueName.SCHEDULE])
    assert [m.kind for m in got] == ["launch_instance", "schedule", "schedule"]


def test_fifo_queue_refuses_a_delay(queue: SqsQueue) -> None:
    with pytest.raises(ValueError, match="standard queue"):
        queue.send(QueueName.SCHEDULE, [Message("schedule", delay_s=5.0)])


def test_long_or_odd_ids_are_hashed() -> None:
    assert len(group_id(Message("k", {"instance_id": "é" * 200}))) == 64


def test_failed_entries_are_resent_then_reported(queue: SqsQueue, sqs: Any) -> None:
    from botocore.awsrequest import AWSResponse

    replies: list[dict[str, Any]] = [
        {"Successful": [{"Id": "0", "MessageId": "m", "MD5OfMessageBody": "x"}],
         "Failed": [{"Id": "1", "SenderFault": False, "Code": "InternalError"}]},
    ]  # fmt: skip
    batches = sent_batches(sqs)

    def handler(**_: Any) -> Any:
        if not replies:
            return None
        return AWSResponse("https://sqs", 200, {}, None), replies.pop(0)

    sqs.meta.events.register("before-call.sqs.SendMessageBatch", handler)
    queue.send(QueueName.SCALE_UP, [Message("a"), Message("b")])
    # Only the failed entry is sent again.
    assert [[e["Id"] for e in b] for b in batches] == [["0", "1"], ["1"]]
    assert [m.kind for m in receive_all(sqs, queue._urls[QueueName.SCALE_UP])] == ["b"]
    replies.append({"Failed": [{"Id": "0", "SenderFault": True, "Code": "InvalidParameter"}]})
    with pytest.raises(SendError, match="InvalidParameter"):
        queue.send(QueueName.SCALE_UP, [Message("a")])


def test_unknown_queue_is_a_clear_error(queue: SqsQueue) -> None:
    with pytest.raises(ValueError, match="interruptions"):
        queue.send(QueueName.INTERRUPTIONS, [Message("x")])


@pytest.mark.parametrize("body", ["not json", "[]", '{"kind": 1}', '{"kind": "k", "body": []}'])
def test_parse_refuses_malformed_bodies(body: str) -> None:
    with pytest.raises(ValueError):
        parse_sqs_body(body)


def test_parse_defaults_an_absent_body() -> None:
    assert parse_sqs_body('{"kind": "schedule"}') == Message("schedule")
