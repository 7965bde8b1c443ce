"""The re-drive of a stale QUEUED launch on the standard scale-up queue.

SQS standard queues ignore ``dedupe_id``: when the schedule pass re-sends the launch message
of a record still QUEUED after ``redrive_after_s``, the consumer gets the command twice (the
memory queue used to drop the second copy, as only a FIFO queue does). The record's state and
attempt, and the launch token, must keep it to one cloud launch.
"""

from __future__ import annotations

import contextlib

from corral.domain.instance import InstanceState
from corral.ports.commands import LaunchInstance
from corral.ports.queue import QueueName
from corral.services.dispatch import dispatch
from corral.services.schedule_pass import run_schedule_pass

from .harness import Cluster


def test_a_redriven_launch_message_is_delivered_twice_and_launches_once() -> None:
    cluster = Cluster()
    cluster.submit()
    run_schedule_pass(cluster.ctx)  # plans one record and sends its launch message
    (record,) = cluster.instances()
    assert record.state is InstanceState.QUEUED
    cluster.clock.advance(cluster.ctx.settings.redrive_after_s)
    run_schedule_pass(cluster.ctx)  # still QUEUED: the same message (same dedupe_id) again

    sent = cluster.queue.sent(QueueName.SCALE_UP)
    assert sent == [LaunchInstance.of(record).to_message()] * 2
    assert sent[0].dedupe_id is not None  # a FIFO queue would drop the copy; this one does not
    received = cluster.queue.receive(QueueName.SCALE_UP, 10)
    assert len(received) == 2

    outcomes = [dispatch(cluster.ctx, r.message) for r in received]
    assert len(cluster.cloud.all_instances()) == 1
    assert cluster.cloud.api_calls["launch"] == 1
    (launched,) = cluster.instances()
    assert launched.state is InstanceState.ALLOCATED and launched.cloud_id is not None
    assert outcomes[0] != outcomes[1]  # one launched, the copy was skipped


def test_a_copy_arriving_while_the_first_is_mid_launch_reuses_the_token() -> None:
    """The copy finds the record REQUESTED without a cloud id (the first delivery died after
    its intent write): it repeats the call with the same token and gets the same instance."""
    cluster = Cluster()
    cluster.submit()
    run_schedule_pass(cluster.ctx)
    cluster.clock.advance(cluster.ctx.settings.redrive_after_s)
    run_schedule_pass(cluster.ctx)
    first, copy = cluster.queue.receive(QueueName.SCALE_UP, 10)

    real_launch = cluster.cloud.launch
    made: list[str | None] = []

    def launch_then_die(request):  # type: ignore[no-untyped-def]
        made.append(real_launch(request).cloud_id)
        raise RuntimeError("the function died after the cloud call")

    cluster.cloud.launch = launch_then_die  # type: ignore[method-assign]
    with contextlib.suppress(RuntimeError):
        dispatch(cluster.ctx, first.message)
    cluster.cloud.launch = real_launch  # type: ignore[method-assign]
    (record,) = cluster.instances()
    assert record.state is InstanceState.REQUESTED and record.cloud_id is None

    dispatch(cluster.ctx, copy.message)
    (record,) = cluster.instances()
    assert len(cluster.cloud.all_instances()) == 1
    assert record.state is InstanceState.ALLOCATED and record.cloud_id == made[0]


def test_a_stale_launch_is_redriven_once_per_period_not_on_every_pass() -> None:
    cluster = Cluster()
    cluster.submit()
    run_schedule_pass(cluster.ctx)
    assert len(cluster.instances()) == 1
    period = cluster.ctx.settings.redrive_after_s
    cluster.clock.advance(period)
    for _ in range(5):  # five passes within one period (a burst of submits)
        run_schedule_pass(cluster.ctx)
        cluster.clock.advance(period / 10)
    assert len(cluster.queue.sent(QueueName.SCALE_UP)) == 2  # the first send, one re-drive
    cluster.clock.advance(period)
    run_schedule_pass(cluster.ctx)
    assert len(cluster.queue.sent(QueueName.SCALE_UP)) == 3
