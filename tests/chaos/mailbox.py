"""SQS event source mappings on the soak's clock: every visible message is taken off moto's
queue into the mailbox, held until it is due (its send delay, plus lateness injected here),
maybe duplicated, and handed to the real handler as one Lambda SQS batch (at most 10).

As Lambda and SQS do: a handler that raises (or dies) fails the whole batch; the records in
``batchItemFailures`` fail alone; a failed record comes back after the queue's visibility
timeout and goes to the dead-letter queue on its fifth failed receive. Dead letters whose
every failure was an injected crash are "explained"; any other is a finding.
"""

from __future__ import annotations

import json
import random
import traceback
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.adapters.aws.sqs_queue import encode_body
from corral.adapters.memory import FakeClock
from corral.ports.queue import Message, QueueName
from tests.chaos.aws import World
from tests.chaos.ports import Crashes, SimulatedCrash
from tests.lambda_events import sqs_record
from tests.moto_env import ACCOUNT, REGION

VISIBILITY_S = {
    QueueName.SCHEDULE: 360.0,
    QueueName.SCALE_UP: 360.0,
    QueueName.INTERRUPTIONS: 720.0,
}
MAX_RECEIVES = 5
BATCH = 10


@dataclass
class Delivery:
    message_id: str
    body: str
    due: float
    receives: int = 0
    failures: list[str] = field(default_factory=list)  # why each receive failed


@dataclass
class DeadLetter:
    queue: QueueName
    delivery: Delivery

    @property
    def explained(self) -> bool:
        return all(f.startswith("crash:") for f in self.delivery.failures)


class Mailbox:
    def __init__(
        self,
        world: World,
        clock: FakeClock,
        crashes: Crashes,
        rng: random.Random,
        *,
        dup: float = 0.0,
        late: float = 0.0,
        late_max_s: float = 90.0,
    ) -> None:
        self.world, self.clock, self.crashes, self.rng = world, clock, crashes, rng
        self.dup, self.late, self.late_max_s = dup, late, late_max_s
        self.held: dict[QueueName, list[Delivery]] = {q: [] for q in QueueName}
        self.delays: dict[tuple[QueueName, str], deque[float]] = {}
        self.dead: list[DeadLetter] = []
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # handler exceptions that were not crashes
        self._ids = 0

    def on_send(self, queue: QueueName, message: Message) -> None:
        key = (queue, encode_body(message))
        self.delays.setdefault(key, deque()).append(self.clock.now() + message.delay_s)

    def put_event(self, queue: QueueName, event: dict[str, Any]) -> None:
        """EventBridge delivering an EC2 event to its target queue."""
        self.world.sqs.send_message(
            QueueUrl=self.world.queue_urls[queue], MessageBody=json.dumps(event)
        )

    def pull(self) -> None:
        sqs = self.world.sqs
        for queue, url in self.world.queue_urls.items():
            while True:
                reply = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
                messages = reply.get("Messages", [])
                if not messages:
                    break
                for m in messages:
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                    self._hold(queue, m["Body"])

    def _hold(self, queue: QueueName, body: str) -> None:
        now = self.clock.now()
        pending = self.delays.get((queue, body))
        due = pending.popleft() if pending else now
        copies = 2 if self.dup and self.rng.random() < self.dup else 1
        self.counts["duplicated"] += copies - 1
        for _ in range(copies):
            extra = 0.0
            if self.late and self.rng.random() < self.late:
                extra = self.rng.uniform(5.0, self.late_max_s)
                self.counts["delayed"] += 1
            self._ids += 1
            self.held[queue].append(Delivery(f"msg-{self._ids:07d}", body, due + extra))

    def deliver(self, queue: QueueName, function: str, handler: Callable[..., Any]) -> int:
        """Run ``handler`` on every due message of ``queue``, in batches; returns how many."""
        done = 0
        while True:
            now = self.clock.now()
            due = sorted((d for d in self.held[queue] if d.due <= now), key=lambda d: d.due)
            batch = due[:BATCH]
            if not batch:
                return done
            for d in batch:
                self.held[queue].remove(d)
                d.receives += 1
            failed = self._invoke(queue, function, handler, batch)
            for d in batch:
                if d.message_id in failed:
                    d.failures.append(failed[d.message_id])
                    self._retry(queue, d)
            done += len(batch)

    def _invoke(
        self, queue: QueueName, function: str, handler: Callable[..., Any], batch: list[Delivery]
    ) -> dict[str, str]:
        from tests.chaos.lambdas import FakeLambdaContext

        event = {"Records": [self._record(queue, d) for d in batch]}
        try:
            with self.crashes.invocation(function):
                result = handler(event, FakeLambdaContext(function))
        except SimulatedCrash as crash:
            return {d.message_id: f"crash: {crash}" for d in batch}
        except Exception as exc:
            self.errors[f"{function}: {type(exc).__name__}: {exc}"[:200]] += 1
            tail = traceback.format_exc(limit=3).strip().splitlines()[-1]
            return {d.message_id: f"error: {tail}" for d in batch}
        failures = (result or {}).get("batchItemFailures") or []
        ids = {str(f.get("itemIdentifier")) for f in failures}
        return dict.fromkeys(ids, "batch item failure")

    def _retry(self, queue: QueueName, d: Delivery) -> None:
        if d.receives >= MAX_RECEIVES:
            self.dead.append(DeadLetter(queue, d))
            return
        d.due = self.clock.now() + VISIBILITY_S[queue]
        self.held[queue].append(d)

    def _record(self, queue: QueueName, d: Delivery) -> dict[str, Any]:
        name = self.world.queue_urls[queue].rsplit("/", 1)[-1]
        return sqs_record(
            f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
            d.body,
            d.message_id,
            sent_ms=str(int(self.clock.now() * 1000)),
            receive_count=d.receives,
            receipt_handle=f"rh-{d.message_id}-{d.receives}",
            sequence_number=str(self._ids),
        )

    def pending(self) -> int:
        return sum(len(v) for v in self.held.values())
