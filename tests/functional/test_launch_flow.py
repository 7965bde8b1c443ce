"""Submit -> schedule handler -> scale-up handler -> one tagged EC2 instance."""

from __future__ import annotations

import json

import pytest

from corral.domain.instance import InstanceState
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.domain.trial import TrialState
from corral.handlers.aws import scale_up, schedule
from corral.ports.commands import CommandKind
from corral.ports.queue import QueueName
from tests.functional.conftest import (
    POOL,
    TAG_KEY,
    TAG_VALUE,
    Corral,
    sqs_record,
)


def _plan_one_launch(corral: Corral) -> list[dict[str, object]]:
    """Submit one 1-GPU trial and run the schedule handler on its message: one QUEUED
    record and one launch command on the scale-up queue (returned as SQS records)."""
    corral.submit(slots=1)
    reply = corral.deliver(QueueName.SCHEDULE, schedule.handler)
    assert reply == {"batchItemFailures": []}
    (queued,) = corral.ctx.store.instances()
    assert queued.state is InstanceState.QUEUED
    records = corral.receive(QueueName.SCALE_UP)
    assert len(records) == 1
    assert json.loads(str(records[0]["body"]))["kind"] == CommandKind.LAUNCH_INSTANCE
    return records


def test_submitted_experiment_launches_one_tagged_instance(corral: Corral) -> None:
    records = _plan_one_launch(corral)

    reply = corral.handle(scale_up.handler, records)

    assert reply == {"batchItemFailures": []}
    (record,) = corral.ctx.store.instances()
    assert record.state is InstanceState.ALLOCATED
    (instance,) = corral.instances().values()
    assert instance["InstanceId"] == record.cloud_id
    assert instance["InstanceType"] == "g5.xlarge"
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[TAG_KEY] == TAG_VALUE
    assert tags[POOL_TAG] == POOL
    assert tags[RECORD_TAG] == record.id
    (trial,) = corral.ctx.store.trials()
    assert trial.state is TrialState.PENDING  # until the agent registers


def test_schedule_coalesces_a_batch_and_the_timer_into_single_passes(corral: Corral) -> None:
    corral.submit(slots=1)
    corral.submit(slots=1)
    records = corral.receive(QueueName.SCHEDULE)
    assert len(records) == 2

    corral.handle(schedule.handler, records)
    corral.tick(schedule.handler)  # nothing new to do

    # One pass planned both trials' launches; the timer pass planned nothing more.
    assert len(corral.ctx.store.instances()) == 2
    assert len(corral.receive(QueueName.SCALE_UP)) == 2


def test_duplicated_launch_message_in_one_batch_launches_one_instance(corral: Corral) -> None:
    (record,) = _plan_one_launch(corral)
    twin = sqs_record(str(record["eventSourceARN"]), str(record["body"]))

    reply = corral.handle(scale_up.handler, [record, twin])

    assert reply == {"batchItemFailures": []}
    assert len(corral.instances()) == 1
    (stored,) = corral.ctx.store.instances()
    assert stored.state is InstanceState.ALLOCATED


@pytest.mark.parametrize(
    "poison",
    [
        "{not json",
        '{"kind":"mystery","body":{}}',
        '{"kind":"launch_instance","body":{"instance_id":"inst-1","attempt":"0"}}',
    ],
)
def test_a_failing_record_is_the_only_batch_item_failure(
    corral: Corral, capsys: pytest.CaptureFixture[str], poison: str
) -> None:
    (good,) = _plan_one_launch(corral)
    # Reported failed (SQS dead-letters it after maxReceiveCount), never run.
    bad = sqs_record(str(good["eventSourceARN"]), poison, "bad-message")

    reply = corral.handle(scale_up.handler, [bad, good])

    assert reply == {"batchItemFailures": [{"itemIdentifier": "bad-message"}]}
    assert len(corral.instances()) == 1  # the good record still launched
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    # EMF holds a list when one metric got several values in an invocation.
    metrics = {
        k: sum(v) if isinstance(v, list) else v
        for doc in emf
        for k, v in doc.items()
        if k in ("Launches", "RecordsFailed", "CommandsMalformed")
    }
    assert metrics == {"Launches": 1.0, "RecordsFailed": 1.0, "CommandsMalformed": 1.0}


def test_a_schedule_message_not_understood_still_runs_the_pass(corral: Corral) -> None:
    corral.submit(slots=1)
    (record,) = corral.receive(QueueName.SCHEDULE)
    odd = sqs_record(str(record["eventSourceARN"]), '{"kind":"mystery","body":{}}', "odd")

    reply = corral.handle(schedule.handler, [odd, record])

    assert reply == {"batchItemFailures": []}  # not retried: the pass ran anyway
    assert len(corral.ctx.store.instances()) == 1
