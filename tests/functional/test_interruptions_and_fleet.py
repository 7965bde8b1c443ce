"""The spot_reconcile handler (interruption queue and timer) and the idle_reap handler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.domain.instance import InstanceState
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.domain.trial import TrialState
from corral.handlers.aws import idle_reap, spot_reconcile
from corral.ports.commands import CommandKind
from corral.ports.queue import QueueName
from tests.functional.conftest import (
    MAX_IDLE_S,
    POOL,
    TAG_KEY,
    TAG_VALUE,
    Corral,
    spot_warning,
    sqs_record,
)

GONE = ("shutting-down", "terminated")


def test_spot_warning_requeues_the_trial_and_wakes_the_scheduler(corral: Corral) -> None:
    agent = corral.agent(with_trial=True)
    assert agent.state is InstanceState.BUSY
    (trial,) = corral.ctx.store.trials()
    assert trial.state is TrialState.ASSIGNED
    assert agent.cloud_id is not None

    reply = corral.interruptions(spot_warning(agent.cloud_id))

    assert reply == {"batchItemFailures": []}
    (trial,) = corral.ctx.store.trials()
    assert trial.state is TrialState.PENDING
    assert trial.preemptions == 1
    record = corral.ctx.store.get_instance(agent.id)
    assert record is not None
    assert record.state is InstanceState.DRAINING
    assert record.interruption_notice_at == corral.clock.now()
    kinds = [json.loads(str(r["body"]))["kind"] for r in corral.receive(QueueName.SCHEDULE)]
    assert CommandKind.SCHEDULE in kinds  # the replacement is planned at once


def test_spot_warning_for_a_foreign_instance_changes_nothing(corral: Corral) -> None:
    agent = corral.agent(with_trial=True)
    foreign = corral.run_foreign({"Name": "someone-else"})
    before = (corral.ctx.store.instances(), corral.ctx.store.trials())

    reply = corral.interruptions(spot_warning(foreign))

    assert reply == {"batchItemFailures": []}
    assert (corral.ctx.store.instances(), corral.ctx.store.trials()) == before
    assert corral.receive(QueueName.SCHEDULE) == []
    assert corral.state(foreign) == "running"
    assert agent.cloud_id is not None and corral.state(agent.cloud_id) == "running"


def test_an_event_as_moto_delivers_it_is_applied(corral: Corral) -> None:
    """moto's EventBridge leaves ``account`` out of what it puts on SQS: Corral does not
    need it, so the notice is applied, not retried."""
    agent = corral.agent(with_trial=True)
    assert agent.cloud_id is not None
    event = spot_warning(agent.cloud_id)
    del event["account"]

    reply = corral.interruptions(event)

    assert reply == {"batchItemFailures": []}
    (trial,) = corral.ctx.store.trials()
    assert trial.state is TrialState.PENDING and trial.preemptions == 1


def test_an_unparseable_notice_is_dropped_and_only_a_transient_failure_is_retried(
    corral: Corral, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    arn = corral.arn(QueueName.INTERRUPTIONS)
    good = sqs_record(arn, json.dumps(spot_warning("i-0123456789abcdef0")))
    bad = sqs_record(arn, json.dumps({**spot_warning("i-0123456789abcdef0"), "detail": {}}))
    junk = sqs_record(arn, "not json")
    flaky = sqs_record(arn, json.dumps(spot_warning("i-0fedcba9876543210")))
    real = spot_reconcile.on_interruption_notice

    def store_down_for_flaky(ctx: Any, instance_id: str, kind: Any) -> bool:
        if instance_id == "i-0fedcba9876543210":
            raise ConnectionError("DynamoDB unreachable")
        return real(ctx, instance_id, kind)

    monkeypatch.setattr(spot_reconcile, "on_interruption_notice", store_down_for_flaky)

    reply = corral.handle(spot_reconcile.handler, [good, bad, junk, flaky])

    # Retrying can never make the bad and junk records parse: they are dropped, and said so.
    assert reply == {"batchItemFailures": [{"itemIdentifier": flaky["messageId"]}]}
    dropped = [r for r in caplog.records if r.getMessage() == "unparseable event dropped"]
    assert [(r.levelname, getattr(r, "message_id", None)) for r in dropped] == [
        ("ERROR", bad["messageId"]),
        ("ERROR", junk["messageId"]),
    ]
    assert "detail.instance-id" in getattr(dropped[0], "reason", "")
    assert getattr(dropped[1], "body", None) == "not json"


def test_reconcile_terminates_a_tagged_orphan_after_grace_never_an_untagged_one(
    corral: Corral,
) -> None:
    orphan = corral.run_foreign({TAG_KEY: TAG_VALUE, POOL_TAG: POOL, RECORD_TAG: "inst-gone"})
    untagged = corral.run_foreign()
    grace = corral.ctx.settings.reconcile.orphan_grace_s

    corral.tick(spot_reconcile.handler)
    assert corral.state(orphan) == "running"  # within its grace period

    corral.clock.advance(grace + 1)
    reply = corral.tick(spot_reconcile.handler)

    assert any(orphan in applied for applied in reply["applied"])
    assert corral.state(orphan) in GONE
    assert corral.state(untagged) == "running"


def test_idle_reap_drains_then_terminates_an_idle_agent(corral: Corral) -> None:
    agent = corral.agent(with_trial=False)
    assert agent.state is InstanceState.IDLE
    assert agent.cloud_id is not None

    first = corral.tick(idle_reap.handler)
    assert first["drained"] == []  # not idle long enough yet

    corral.clock.advance(MAX_IDLE_S + 1)
    drained = corral.tick(idle_reap.handler)
    terminated = corral.tick(idle_reap.handler)

    assert drained["drained"] == [agent.id]
    assert terminated["terminated"] == [agent.id]
    record = corral.ctx.store.get_instance(agent.id)
    assert record is not None and record.state is InstanceState.TERMINATED
    assert corral.state(agent.cloud_id) in GONE
