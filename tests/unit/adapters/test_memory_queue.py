"""InMemoryQueue (SQS-like consumer side) and FakeClock. Time only moves when we move it."""

from __future__ import annotations

import threading

import pytest

from corral.adapters.memory import FakeClock, InMemoryQueue
from corral.ports.queue import Message, QueueName

Q = QueueName.SCALE_UP


def msg(n: int, **kwargs: object) -> Message:
    return Message("launch_instance", {"n": n}, **kwargs)  # type: ignore[arg-type]


def bodies(items: list[Message]) -> list[object]:
    return [m.body["n"] for m in items]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> InMemoryQueue:
    return InMemoryQueue(clock)


def test_messages_come_out_in_send_order_per_queue(queue: InMemoryQueue) -> None:
    queue.send(Q, [msg(1), msg(2)])
    queue.send(QueueName.SCHEDULE, [msg(9)])
    queue.send(Q, [msg(3)])
    got = queue.receive(Q, max_messages=2)
    assert [r.message.body["n"] for r in got] == [1, 2]
    assert [r.receive_count for r in got] == [1, 1]
    assert bodies(queue.drain(Q)) == [3]
    assert bodies(queue.drain(QueueName.SCHEDULE)) == [9]


def test_a_received_message_is_hidden_then_redelivered(
    queue: InMemoryQueue, clock: FakeClock
) -> None:
    queue.send(Q, [msg(1)])
    (first,) = queue.receive(Q, visibility_timeout_s=30.0)
    assert queue.receive(Q) == []
    assert queue.pending(Q) == 1 and queue.visible(Q) == 0
    clock.advance(29.9)
    assert queue.receive(Q) == []
    clock.advance(0.1)
    (again,) = queue.receive(Q)
    assert again.message == first.message and again.receive_count == 2
    assert not queue.delete(Q, first.receipt)  # stale receipt: redelivered since
    assert queue.delete(Q, again.receipt)
    assert queue.pending(Q) == 0
    assert not queue.delete(Q, again.receipt)  # deleting twice is harmless
    assert not queue.delete(Q, "garbage")


def test_deleted_messages_never_come_back(queue: InMemoryQueue, clock: FakeClock) -> None:
    queue.send(Q, [msg(1)])
    (got,) = queue.receive(Q)
    queue.delete(Q, got.receipt)
    clock.advance(3600.0)
    assert queue.receive(Q) == []


def test_redrive_moves_a_poison_message_to_the_dead_letters(clock: FakeClock) -> None:
    queue = InMemoryQueue(clock, redrive_after=2)
    queue.send(Q, [msg(1), msg(2)])
    for _ in range(2):
        got = queue.receive(Q, visibility_timeout_s=10.0)
        for item in got:
            if item.message.body["n"] == 2:
                queue.delete(Q, item.receipt)
        clock.advance(10.0)
    assert queue.receive(Q) == []  # received twice already: dead-lettered on this receive
    assert bodies(queue.dead_letters(Q)) == [1]
    assert queue.pending(Q) == 0


def test_redrive_after_must_be_positive(clock: FakeClock) -> None:
    with pytest.raises(ValueError):
        InMemoryQueue(clock, redrive_after=0)


def test_a_dedupe_id_is_dropped_within_five_minutes_on_the_fifo_queue(
    queue: InMemoryQueue, clock: FakeClock
) -> None:
    fifo = QueueName.SCHEDULE  # FIFO in the template; scale-up and interruptions are not
    queue.send(fifo, [msg(1, dedupe_id="r1"), msg(2, dedupe_id="r1")])
    clock.advance(299.0)
    queue.send(fifo, [msg(3, dedupe_id="r1"), msg(4), msg(5)])
    assert bodies(queue.drain(fifo)) == [1, 4, 5]  # messages without an id are never deduped
    clock.advance(1.0)  # five minutes after the first send
    queue.send(fifo, [msg(6, dedupe_id="r1")])
    assert bodies(queue.drain(fifo)) == [6]
    queue.send(Q, [msg(7, dedupe_id="r1"), msg(8, dedupe_id="r1")])  # a standard queue
    assert bodies(queue.drain(Q)) == [7, 8]


def test_delay_holds_a_message_back(queue: InMemoryQueue, clock: FakeClock) -> None:
    queue.send(Q, [msg(1, delay_s=10.0), msg(2)])
    assert bodies(queue.drain(Q)) == [2]
    assert queue.pending(Q) == 1
    assert queue.next_visible_at(Q) == clock.now() + 10.0
    clock.advance(10.0)
    assert bodies(queue.drain(Q)) == [1]
    assert queue.next_visible_at(Q) is None


def test_concurrent_consumers_never_get_the_same_delivery(queue: InMemoryQueue) -> None:
    queue.send(Q, [msg(n) for n in range(500)])
    seen: list[object] = []
    lock = threading.Lock()

    def consume() -> None:
        while got := queue.receive(Q, max_messages=7):
            for item in got:
                assert queue.delete(Q, item.receipt)
            with lock:
                seen.extend(item.message.body["n"] for item in got)

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(500))  # type: ignore[type-var]


# ---- FakeClock -------------------------------------------------------------------------------


def test_fake_clock_moves_only_forward() -> None:
    clock = FakeClock(start=100.0)
    assert clock.now() == 100.0
    assert clock.advance(5.0) == 105.0
    clock.set(200.0)
    assert clock.now() == 200.0
    clock.set(200.0)  # standing still is fine
    with pytest.raises(ValueError):
        clock.set(199.0)
    with pytest.raises(ValueError):
        clock.advance(-1.0)
    assert clock.now() == 200.0


def test_fake_clock_starts_at_a_realistic_epoch() -> None:
    assert FakeClock().now() > 1.6e9
