"""The Queue contract (corral.ports.queue), run against every registered queue adapter.

What the services rely on, and no more: a message comes back with its kind and its body (as
JSON gives it back); a FIFO queue (schedule, on SQS) drops a repeated ``dedupe_id`` for 5
minutes and keeps send order, a standard queue (scale-up, interruptions; every Pub/Sub topic)
delivers every send, duplicates included; a delay holds a message back; an unacknowledged
delivery comes back after its visibility timeout; acknowledging with a stale receipt is
harmless; batches larger than the backend's (SQS: 10) go through whole; a refused message
(not JSON, too big, a delay on a FIFO queue) refuses the whole send.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from corral.adapters.memory.queue import FIFO_QUEUES
from corral.ports.queue import Message, QueueName
from tests.contract.queue_harness import template_fifo, template_queues

if TYPE_CHECKING:
    from tests.contract.queue_harness import Got, QueueHarness

ALL = sorted(QueueName)
VISIBILITY_S = 60.0


def msg(n: int, kind: str = "launch_instance", **kwargs: object) -> Message:
    return Message(kind, {"instance_id": f"inst-{n}", "attempt": 0, "n": n}, **kwargs)  # type: ignore[arg-type]


def receive_all(env: QueueHarness, name: QueueName, limit: int = 100) -> list[Got]:
    """Receive and acknowledge until the queue has nothing visible (10 at a time)."""
    out: list[Got] = []
    for _ in range(limit):
        got = env.receive(name, 10, VISIBILITY_S)
        if not got:
            return out
        for item in got:
            env.delete(name, item.receipt)
        out.extend(got)
    raise AssertionError("the queue never ran dry")


def ns(items: list[Got]) -> list[int]:
    return [item.message.body["n"] for item in items]


def gap(env: QueueHarness, request: pytest.FixtureRequest, case: str) -> None:
    """Mark a case the backend is known to fail as an expected (strict) failure."""
    reason = (env.known_gaps or {}).get(case)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


# ---- the fake's defaults are the template's ----------------------------------------------------


def test_the_memory_queues_fifo_set_is_the_templates() -> None:
    assert template_fifo() == FIFO_QUEUES == {QueueName.SCHEDULE}
    assert set(template_queues()) == set(QueueName)


# ---- send / receive -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_a_message_comes_back_with_its_kind_and_body(
    queue_env: QueueHarness, name: QueueName
) -> None:
    body = {"instance_id": "inst-1", "attempt": 2, "x": [1, 2.5, None, True], "é": {"k": "ü"}}
    queue_env.queue.send(name, [Message("launch_instance", body)])
    (got,) = queue_env.receive(name, 10, VISIBILITY_S)
    assert (got.message.kind, got.message.body) == ("launch_instance", body)
    assert got.receive_count in (None, 1)


def test_a_body_comes_back_as_json_gives_it(queue_env: QueueHarness) -> None:
    """Tuples come back as lists and int keys as strings: what the handlers get."""
    queue_env.queue.send(QueueName.SCALE_UP, [Message("k", {"ids": ("a", "b"), "m": {1: 2}})])
    (got,) = queue_env.receive(QueueName.SCALE_UP, 10, VISIBILITY_S)
    assert got.message.body == {"ids": ["a", "b"], "m": {"1": 2}}


def test_a_body_that_is_not_json_refuses_the_whole_send(queue_env: QueueHarness) -> None:
    with pytest.raises(TypeError):
        queue_env.queue.send(QueueName.SCALE_UP, [msg(1), Message("k", {"at": object()})])
    assert queue_env.receive(QueueName.SCALE_UP, 10, VISIBILITY_S) == []


@pytest.mark.parametrize("name", ALL)
def test_a_batch_larger_than_the_backends_goes_through_whole(
    queue_env: QueueHarness, name: QueueName
) -> None:
    queue_env.queue.send(name, [msg(n) for n in range(25)])  # SQS takes 10 a call
    got = receive_all(queue_env, name)
    if name in queue_env.fifo:  # one message group (one kind, no instance_id): send order
        assert ns(got) == list(range(25))
    else:
        assert sorted(ns(got)) == list(range(25))


# ---- dedupe: FIFO queues only ----------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_a_dedupe_id_is_honoured_only_by_fifo_queues(
    queue_env: QueueHarness, name: QueueName
) -> None:
    """The scale-up queue is standard: a re-driven launch message arrives again (its consumer
    is idempotent); only the FIFO schedule queue drops a repeat within 5 minutes."""
    kind = "schedule" if name is QueueName.SCHEDULE else "launch_instance"
    queue_env.queue.send(name, [msg(1, kind, dedupe_id="d-1"), msg(2, kind, dedupe_id="d-1")])
    queue_env.advance(299.0)
    queue_env.queue.send(name, [msg(3, kind, dedupe_id="d-1"), msg(4, kind)])
    got = sorted(ns(receive_all(queue_env, name)))
    if name in queue_env.fifo:
        assert got == [1, 4]  # without a dedupe_id nothing is dropped
        queue_env.advance(2.0)  # five minutes after the first send: accepted again
        queue_env.queue.send(name, [msg(5, kind, dedupe_id="d-1")])
        assert ns(receive_all(queue_env, name)) == [5]
    else:
        assert got == [1, 2, 3, 4]


def test_a_fifo_dedupe_outlives_the_consumed_message(
    queue_env: QueueHarness, request: pytest.FixtureRequest
) -> None:
    if not queue_env.fifo:
        pytest.skip("this backend has no deduplicating queue")
    gap(queue_env, request, "dedupe_outlives_consumption")
    (name, *_) = sorted(queue_env.fifo)
    queue_env.queue.send(name, [msg(1, "schedule", dedupe_id="submit-e1")])
    assert ns(receive_all(queue_env, name)) == [1]  # consumed and deleted
    queue_env.advance(60.0)
    queue_env.queue.send(name, [msg(2, "schedule", dedupe_id="submit-e1")])
    assert receive_all(queue_env, name) == []


# ---- delays ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_a_delay_holds_a_message_back_and_fifo_queues_refuse_one(
    queue_env: QueueHarness, name: QueueName
) -> None:
    if name in queue_env.fifo:
        with pytest.raises(ValueError):
            queue_env.queue.send(name, [msg(1), msg(2, delay_s=30.0)])
        assert receive_all(queue_env, name) == []  # refused whole
        return
    queue_env.queue.send(name, [msg(1, delay_s=30.0), msg(2)])
    assert ns(receive_all(queue_env, name)) == [2]
    queue_env.advance(29.0)
    assert receive_all(queue_env, name) == []
    queue_env.advance(2.0)
    assert ns(receive_all(queue_env, name)) == [1]


def test_a_long_delay_is_cut_to_the_backends_maximum(queue_env: QueueHarness) -> None:
    """SQS delays at most 900 s (consumers re-check their own deadlines); Pub/Sub's
    ``not_before`` holds any delay."""
    name = QueueName.SCALE_UP
    queue_env.queue.send(name, [msg(1, delay_s=1200.0)])
    due = queue_env.max_delay_s if queue_env.max_delay_s is not None else 1200.0
    queue_env.advance(due - 1.0)
    assert receive_all(queue_env, name) == []
    queue_env.advance(2.0)
    assert ns(receive_all(queue_env, name)) == [1]


# ---- visibility and receipts ------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_an_unacknowledged_delivery_comes_back_after_its_visibility_timeout(
    queue_env: QueueHarness, name: QueueName
) -> None:
    queue_env.queue.send(name, [msg(1, "schedule" if name is QueueName.SCHEDULE else "k")])
    (first,) = queue_env.receive(name, 10, VISIBILITY_S)
    assert queue_env.receive(name, 10, VISIBILITY_S) == []  # in flight: hidden
    queue_env.advance(VISIBILITY_S - 1.0)
    assert queue_env.receive(name, 10, VISIBILITY_S) == []
    queue_env.advance(2.0)
    (again,) = queue_env.receive(name, 10, VISIBILITY_S)
    assert again.message == first.message
    assert again.receive_count in (None, 2)
    queue_env.delete(name, again.receipt)
    queue_env.advance(3600.0)
    assert queue_env.receive(name, 10, VISIBILITY_S) == []  # acknowledged: gone for good


@pytest.mark.parametrize("name", ALL)
def test_deleting_with_a_stale_receipt_is_harmless(
    queue_env: QueueHarness, name: QueueName
) -> None:
    """A consumer slower than the visibility timeout acknowledges with an old receipt: no
    error (the work may run twice, which consumers tolerate); the latest receipt deletes."""
    queue_env.queue.send(name, [msg(1, "schedule" if name is QueueName.SCHEDULE else "k")])
    (first,) = queue_env.receive(name, 10, VISIBILITY_S)
    queue_env.advance(VISIBILITY_S + 1.0)
    (again,) = queue_env.receive(name, 10, VISIBILITY_S)
    queue_env.delete(name, first.receipt)  # stale: must not raise
    queue_env.delete(name, again.receipt)
    queue_env.delete(name, again.receipt)  # twice: must not raise either
    queue_env.advance(3600.0)
    assert queue_env.receive(name, 10, VISIBILITY_S) == []


# ---- size ------------------------------------------------------------------------------------


def _sized(n: int, size: int) -> Message:
    """A message whose encoded body (``{"kind":...,"body":...}``) is ``size`` bytes."""
    empty = len(json.dumps({"kind": "k", "body": {"n": n, "pad": ""}}, separators=(",", ":")))
    return Message("k", {"n": n, "pad": "x" * (size - empty)})


def test_a_message_over_the_size_limit_refuses_the_whole_send(queue_env: QueueHarness) -> None:
    limit = queue_env.max_message_bytes
    if limit is None:
        pytest.skip("this adapter enforces no message size")
    name = QueueName.SCALE_UP
    fits = min(limit, 256 * 1024)  # SQS's limit, exactly; far below Pub/Sub's 10 MB
    queue_env.queue.send(name, [_sized(1, fits)])
    assert ns(receive_all(queue_env, name)) == [1]
    with pytest.raises(ValueError):
        queue_env.queue.send(name, [_sized(2, 100), _sized(3, limit + 1)])
    assert receive_all(queue_env, name) == []
