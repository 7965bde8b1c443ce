"""Queue adapters for the contract suite (registered in conftest.py): the memory queue, and
SqsQueue on moto with the queues as infra/template.yaml declares them.

The Queue port is producer-only (``send``); what consumes a queue in production is a Lambda
event source mapping (SQS) or a push subscription (Pub/Sub). Each harness adds a test-only
consumer side speaking the same terms as ``InMemoryQueue``: ``receive`` (hide for a
visibility timeout, hand out a receipt), ``delete`` (acknowledge by receipt) and
``advance`` (time passes; no harness sleeps: moto's SQS clock is patched to a FakeClock).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.adapters.memory import FakeClock, InMemoryQueue
from corral.adapters.memory.queue import MAX_DELAY_S, MAX_MESSAGE_BYTES
from corral.local.template import parse_template
from corral.ports.queue import Message, Queue, QueueName
from tests.moto_sqs import sqs_on_a_fake_clock

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "template.yaml"
TEMPLATE_QUEUES = {
    QueueName.SCHEDULE: "ScheduleQueue",
    QueueName.SCALE_UP: "ScaleUpQueue",
    QueueName.INTERRUPTIONS: "InterruptionsQueue",
}


@dataclass(frozen=True)
class Got:
    """One delivery, as a consumer sees it."""

    receipt: str
    message: Message
    receive_count: int | None  # None where the backend does not count (Pub/Sub, no DLQ)


@dataclass
class QueueHarness:
    queue: Queue  # the adapter under test (the port)
    fifo: frozenset[QueueName]  # queues that drop a repeated dedupe_id and keep send order
    # receive(queue, max_messages, visibility_timeout_s): at most 10 deliveries.
    receive: Callable[[QueueName, int, float], list[Got]]
    delete: Callable[[QueueName, str], None]  # acknowledge; never raises for a stale receipt
    advance: Callable[[float], None]  # time passes for the queue and its consumer
    max_message_bytes: int | None  # the adapter refuses a bigger message (ValueError)
    max_delay_s: float | None  # longer delays are cut to this (SQS: 900 s)
    # Contract cases the backend is known to fail (case name -> why): expected failures.
    known_gaps: dict[str, str] | None = None


def template_queues() -> dict[QueueName, dict[str, Any]]:
    """The Properties of each queue resource in infra/template.yaml."""
    resources = parse_template(TEMPLATE.read_text())["Resources"]
    return {name: dict(resources[res]["Properties"]) for name, res in TEMPLATE_QUEUES.items()}


def template_fifo() -> frozenset[QueueName]:
    return frozenset(n for n, props in template_queues().items() if props.get("FifoQueue"))


# ---- memory ---------------------------------------------------------------------------------


def _memory_harness(clock: FakeClock, queue: InMemoryQueue, **limits: Any) -> QueueHarness:
    def receive(name: QueueName, max_messages: int, visibility_timeout_s: float) -> list[Got]:
        got = queue.receive(name, min(max_messages, 10), visibility_timeout_s)
        return [Got(r.receipt, r.message, r.receive_count) for r in got]

    def delete(name: QueueName, receipt: str) -> None:
        queue.delete(name, receipt)

    fifo = frozenset(n for n in QueueName if queue.is_fifo(n))
    return QueueHarness(queue, fifo, receive, delete, clock.advance, **limits)


@contextmanager
def memory_queue() -> Iterator[QueueHarness]:
    """The defaults: the template's SQS queues."""
    clock = FakeClock()
    yield _memory_harness(
        clock,
        InMemoryQueue(clock),
        max_message_bytes=MAX_MESSAGE_BYTES,
        max_delay_s=MAX_DELAY_S,
    )


@contextmanager
def memory_queue_as_pubsub() -> Iterator[QueueHarness]:
    """Configured as Pub/Sub topics: nothing dedupes, 10 MB messages, any delay."""
    from corral.adapters.gcp.pubsub_queue import MAX_MESSAGE_BYTES as PUBSUB_MAX

    clock = FakeClock()
    queue = InMemoryQueue(clock, fifo=(), max_message_bytes=PUBSUB_MAX, max_delay_s=None)
    yield _memory_harness(clock, queue, max_message_bytes=PUBSUB_MAX, max_delay_s=None)


# ---- SQS on moto ------------------------------------------------------------------------------


@contextmanager
def sqs_on_moto() -> Iterator[QueueHarness]:
    """SqsQueue against moto in-process, one queue per template queue (FIFO where the
    template says so, with its visibility timeout); moto's SQS clock is a FakeClock."""
    from corral.adapters.aws.sqs_queue import MAX_DELAY_S as SQS_MAX_DELAY
    from corral.adapters.aws.sqs_queue import SqsQueue, parse_sqs_body

    clock = FakeClock()
    with sqs_on_a_fake_clock(clock) as sqs:
        urls: dict[QueueName, str] = {}
        for name, props in template_queues().items():
            attributes = {"VisibilityTimeout": str(props["VisibilityTimeout"])}
            queue_name = f"corral-{name.value}"
            if props.get("FifoQueue"):
                attributes["FifoQueue"] = "true"
                queue_name += ".fifo"  # SQS requires the suffix
            urls[name] = sqs.create_queue(QueueName=queue_name, Attributes=attributes)["QueueUrl"]

        def receive(name: QueueName, max_messages: int, visibility_timeout_s: float) -> list[Got]:
            reply = sqs.receive_message(
                QueueUrl=urls[name],
                MaxNumberOfMessages=min(max_messages, 10),
                VisibilityTimeout=math.ceil(visibility_timeout_s),
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
            return [
                Got(
                    m["ReceiptHandle"],
                    parse_sqs_body(m["Body"]),  # the parser the handlers use
                    int(m["Attributes"]["ApproximateReceiveCount"]),
                )
                for m in reply.get("Messages", [])
            ]

        def delete(name: QueueName, receipt: str) -> None:
            sqs.delete_message(QueueUrl=urls[name], ReceiptHandle=receipt)

        yield QueueHarness(
            queue=SqsQueue(urls, client=sqs, sleep=lambda s: None),
            fifo=frozenset(n for n, url in urls.items() if url.endswith(".fifo")),
            receive=receive,
            delete=delete,
            advance=clock.advance,
            max_message_bytes=MAX_MESSAGE_BYTES,
            max_delay_s=float(SQS_MAX_DELAY),
            known_gaps={
                "dedupe_outlives_consumption": (
                    "moto dedupes only against messages still in the queue; SQS remembers "
                    "a deduplication id for 5 minutes even after the message was deleted"
                )
            },
        )
