"""InMemoryQueue: the Queue port plus an SQS-like consumer side, for tests, sim and local stack.

The producer side is the port (``send``). The consumer side mimics what a Lambda event source
mapping sees from SQS, so services are exercised against the failure modes they meet in the
cloud: a message is invisible while being handled, comes back if not deleted before its
visibility timeout, and moves to a dead-letter list after ``redrive_after`` receives.

Each queue is FIFO or standard, as ``infra/template.yaml`` declares it (``FIFO_QUEUES``:
schedule is FIFO, scale-up and interruptions are standard; pass ``fifo=()`` for Pub/Sub,
which has no deduplicating topic). As on SQS:
- a FIFO queue drops a message whose ``dedupe_id`` it accepted within the last 5 minutes
  (even if that one was consumed since) and refuses a per-message ``delay_s`` (ValueError);
- a standard queue ignores ``dedupe_id`` (a re-sent command is delivered again: consumers
  are idempotent) and caps ``delay_s`` at 900 s;
- a body must be JSON (TypeError otherwise) and its encoding at most 256 KiB (ValueError);
  consumers receive the body as it comes back from JSON (tuples become lists);
- a batch is refused whole (nothing sent) when one of its messages is refused.
Time comes from the injected clock; nothing sleeps. tests/contract/test_queue_contract.py
runs this queue, SqsQueue on moto and PubSubQueue on Google's emulator through one suite.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

# The fake behaves as SQS does: its encoding and limits are SqsQueue's own (standard library
# only; importing them costs no boto3).
from corral.adapters.aws.sqs_queue import MAX_DELAY_S, MAX_MESSAGE_BYTES, encode_body
from corral.ports.clock import Clock
from corral.ports.queue import Message, QueueName

DEDUPE_WINDOW_S = 300.0  # SQS FIFO's deduplication interval
# The template's FIFO queues (infra/template.yaml); every other queue is standard.
FIFO_QUEUES: frozenset[QueueName] = frozenset({QueueName.SCHEDULE})


@dataclass(frozen=True, slots=True)
class Received:
    """One delivery of a message. Delete it with ``receipt`` once handled."""

    receipt: str
    message: Message
    receive_count: int  # 1 on first delivery (SQS ApproximateReceiveCount)
    sent_at: float


@dataclass(slots=True)
class _Entry:
    message_id: int
    message: Message
    sent_at: float
    visible_at: float
    receive_count: int = 0
    receipt: str | None = None  # the receipt of the latest delivery; older ones are stale


class InMemoryQueue:
    """Implements ``corral.ports.queue.Queue``; thread-safe."""

    def __init__(
        self,
        clock: Clock,
        *,
        redrive_after: int | None = None,
        dedupe_window_s: float = DEDUPE_WINDOW_S,
        keep_history: bool = True,
        fifo: Iterable[QueueName] = FIFO_QUEUES,
        max_message_bytes: int | None = MAX_MESSAGE_BYTES,
        max_delay_s: float | None = MAX_DELAY_S,
    ) -> None:
        if redrive_after is not None and redrive_after < 1:
            raise ValueError("redrive_after must be at least 1 (SQS maxReceiveCount)")
        self._clock = clock
        self._redrive_after = redrive_after
        self._dedupe_window_s = dedupe_window_s
        self._keep_history = keep_history  # the simulator turns it off to save memory
        self._fifo = frozenset(fifo)
        self._max_message_bytes = max_message_bytes
        self._max_delay_s = max_delay_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Insertion-ordered: FIFO by send order, and redelivery keeps a message's place.
        self._entries: dict[QueueName, dict[int, _Entry]] = defaultdict(dict)
        self._seen: dict[QueueName, dict[str, float]] = defaultdict(dict)
        self._dead: dict[QueueName, list[Message]] = defaultdict(list)
        self._history: dict[QueueName, list[Message]] = defaultdict(list)

    # ---- producer (the port) --------------------------------------------------------
    def send(self, queue: QueueName, messages: Sequence[Message]) -> None:
        fifo = queue in self._fifo
        checked = [self._checked(queue, message, fifo) for message in messages]  # all or none
        now = self._clock.now()
        with self._lock:
            seen = self._seen[queue]
            self._forget_old_dedupe_ids(seen, now)
            for original, message in zip(messages, checked, strict=True):
                if fifo and message.dedupe_id is not None:
                    if message.dedupe_id in seen:
                        continue  # a duplicate within the window: SQS accepts and drops it
                    seen[message.dedupe_id] = now
                delay_s = max(message.delay_s, 0.0)
                if self._max_delay_s is not None:
                    delay_s = min(delay_s, self._max_delay_s)
                message_id = next(self._ids)
                self._entries[queue][message_id] = _Entry(
                    message_id, message, sent_at=now, visible_at=now + delay_s
                )
                if self._keep_history:
                    self._history[queue].append(original)

    def is_fifo(self, queue: QueueName) -> bool:
        return queue in self._fifo

    def _checked(self, queue: QueueName, message: Message, fifo: bool) -> Message:
        """The message as a consumer will get it back, or the error the real queue gives."""
        if fifo and message.delay_s > 0:
            raise ValueError(
                f"{message.kind}: the FIFO queue {queue.value!r} cannot delay one message"
            )
        encoded = encode_body(message)  # as SqsQueue writes it, so sizes agree
        size = len(encoded.encode())
        if self._max_message_bytes is not None and size > self._max_message_bytes:
            raise ValueError(
                f"{message.kind}: {size} bytes is over the {self._max_message_bytes}-byte "
                f"message limit of {queue.value!r}"
            )
        body = json.loads(encoded)["body"]
        return message if body == message.body else replace(message, body=body)

    def _forget_old_dedupe_ids(self, seen: dict[str, float], now: float) -> None:
        # ``seen`` is insertion-ordered by send time, so expired ids are at the front.
        expired: list[str] = []
        for dedupe_id, at in seen.items():
            if at + self._dedupe_window_s > now:
                break
            expired.append(dedupe_id)
        for dedupe_id in expired:
            del seen[dedupe_id]

    # ---- consumer -------------------------------------------------------------------
    def receive(
        self, queue: QueueName, max_messages: int = 10, visibility_timeout_s: float = 30.0
    ) -> list[Received]:
        """Deliver up to ``max_messages`` visible messages and hide them for the timeout.

        A message already received ``redrive_after`` times is moved to the dead-letter list
        instead of being delivered again (SQS checks maxReceiveCount on receive).
        """
        now = self._clock.now()
        delivered: list[Received] = []
        with self._lock:
            entries = self._entries[queue]
            for entry in list(entries.values()):
                if len(delivered) >= max_messages:
                    break
                if entry.visible_at > now:
                    continue
                if self._redrive_after is not None and entry.receive_count >= self._redrive_after:
                    del entries[entry.message_id]
                    self._dead[queue].append(entry.message)
                    continue
                entry.receive_count += 1
                entry.visible_at = now + visibility_timeout_s
                entry.receipt = f"{queue.value}:{entry.message_id}:{entry.receive_count}"
                delivered.append(
                    Received(entry.receipt, entry.message, entry.receive_count, entry.sent_at)
                )
        return delivered

    def delete(self, queue: QueueName, receipt: str) -> bool:
        """Acknowledge a delivery. False if the receipt is stale (the message was redelivered
        since, or is gone): the caller's work may then run twice, which consumers tolerate."""
        try:
            message_id = int(receipt.split(":")[-2])
        except (IndexError, ValueError):
            return False
        with self._lock:
            entries = self._entries[queue]
            entry = entries.get(message_id)
            if entry is None or entry.receipt != receipt:
                return False
            del entries[message_id]
            return True

    def drain(self, queue: QueueName) -> list[Message]:
        """Receive and delete every visible message at once (for tests and the simulator)."""
        received = self.receive(queue, max_messages=1 << 30)
        for item in received:
            self.delete(queue, item.receipt)
        return [item.message for item in received]

    # ---- inspection -----------------------------------------------------------------
    def pending(self, queue: QueueName) -> int:
        """Messages not yet deleted or dead-lettered: visible, in flight or delayed."""
        with self._lock:
            return len(self._entries[queue])

    def visible(self, queue: QueueName) -> int:
        now = self._clock.now()
        with self._lock:
            return sum(1 for e in self._entries[queue].values() if e.visible_at <= now)

    def next_visible_at(self, queue: QueueName) -> float | None:
        """When the next message becomes receivable (None if the queue is empty)."""
        with self._lock:
            return min((e.visible_at for e in self._entries[queue].values()), default=None)

    def dead_letters(self, queue: QueueName) -> list[Message]:
        with self._lock:
            return list(self._dead[queue])

    def sent(self, queue: QueueName) -> list[Message]:
        """Every message accepted on ``queue`` (after a FIFO queue's dedupe), in send order,
        as it was sent."""
        with self._lock:
            return list(self._history[queue])
