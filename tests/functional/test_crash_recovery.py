"""Crash recovery and ownership through the real handlers against moto (issue 3):

- a scale-up that dies between RunInstances and the record update leaves a tagged instance,
  which the ``spot_reconcile`` timer adopts by its record tag;
- instances that are not ours (no tags, another cluster's tag value, our pair without a
  pool tag) are never described into state, tagged or terminated by any pass.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from corral.domain.instance import Instance, InstanceState, new_instance
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.domain.records import EventKind
from corral.handlers.aws import idle_reap, scale_up, schedule, spot_reconcile
from corral.ports.queue import QueueName
from tests.functional.conftest import (
    MAX_IDLE_S,
    POOL,
    TAG_KEY,
    TAG_VALUE,
    Corral,
    spot_warning,
)
from tests.moto_env import ACCOUNT, REGION


class FunctionDied(Exception):
    """Stands for the Lambda container dying (timeout, OOM) at that very point."""


def _crash_after_run_instances(corral: Corral) -> None:
    """The Context's next DynamoDB write after a RunInstances call raises, once."""
    armed = {"on": False}

    def launched(**_: Any) -> None:
        armed["on"] = True

    def write(**_: Any) -> None:
        if armed["on"]:
            armed["on"] = False
            raise FunctionDied("died after RunInstances, before recording the instance")

    corral.aws["ec2"].meta.events.register("after-call.ec2.RunInstances", launched)
    for operation in ("PutItem", "TransactWriteItems"):
        corral.aws["dynamodb"].meta.events.register(f"before-call.dynamodb.{operation}", write)


def test_crash_after_run_instances_leaves_a_tagged_instance_that_reconcile_adopts(
    corral: Corral,
) -> None:
    corral.submit(slots=1)
    corral.deliver(QueueName.SCHEDULE, schedule.handler)
    (launch,) = corral.receive(QueueName.SCALE_UP)
    _crash_after_run_instances(corral)

    reply = corral.handle(scale_up.handler, [launch])

    # The record failed (SQS would redeliver it); the instance exists, tagged with the record.
    assert reply == {"batchItemFailures": [{"itemIdentifier": launch["messageId"]}]}
    (record,) = corral.ctx.store.instances()
    assert record.state is InstanceState.REQUESTED
    assert record.cloud_id is None
    (instance,) = corral.instances().values()
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[RECORD_TAG] == record.id
    assert (tags[TAG_KEY], tags[POOL_TAG]) == (TAG_VALUE, POOL)

    result = corral.tick(spot_reconcile.handler)

    assert result["applied"] == [f"Adopt:{record.id}"]
    (adopted,) = corral.ctx.store.instances()
    assert adopted.state is InstanceState.ALLOCATED
    assert adopted.cloud_id == instance["InstanceId"]
    assert adopted.launched_at is not None
    assert len(corral.instances()) == 1
    assert EventKind.INSTANCE_ADOPTED in [e.kind for e in corral.ctx.store.events()]

    # SQS redelivers the failed message: the record has moved on, so no second launch
    # (moto's ClientToken is not idempotent, so a second call would show as an instance).
    again = corral.handle(scale_up.handler, [launch])
    assert again == {"batchItemFailures": []}
    assert corral.calls["ec2.RunInstances"] == 1
    assert len(corral.instances()) == 1
    # A further reconcile pass has nothing left to repair.
    assert corral.tick(spot_reconcile.handler)["applied"] == []


def _requested_without_instance(corral: Corral) -> Instance:
    """A record caught between intent and launch: REQUESTED, no cloud id, and no launch
    message on its way (written straight to the store)."""
    now = corral.clock.now()
    offering = corral.ctx.pools[POOL].offerings()[0]
    queued = new_instance("inst-bait", POOL, offering, now, "test")
    requested = replace(
        queued.transition(InstanceState.REQUESTED, now, "launching (test)"), requested_at=now
    )
    (stored,) = corral.ctx.store.commit([requested])
    assert isinstance(stored, Instance)
    return stored


def _state_change(instance_id: str, state: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "3f1c4a4e-0000-4000-8000-000000000000",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "account": ACCOUNT,
        "time": "2025-01-01T00:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "state": state},
    }


def _tags(instance: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((t["Key"], t["Value"]) for t in instance.get("Tags") or [])


def test_instances_that_are_not_ours_are_never_described_tagged_or_terminated(
    corral: Corral,
) -> None:
    # Our own fleet: one idle agent (reaped below) and one record waiting for its instance.
    ours = corral.agent(with_trial=False)
    bait = _requested_without_instance(corral)

    untagged = corral.run_foreign()
    # Another Corral cluster's instance: its tag value differs; its pool and record tags
    # name ours, so a provider that trusted those alone would adopt it for ``bait``.
    other_cluster = corral.run_foreign(
        {TAG_KEY: "another-cluster", POOL_TAG: POOL, RECORD_TAG: bait.id, "Name": "theirs"}
    )
    # Our pair without a pool tag: not ours either (the ownership rule needs both).
    no_pool = corral.run_foreign({TAG_KEY: TAG_VALUE, RECORD_TAG: bait.id})
    foreign = [untagged, other_cluster, no_pool]
    before = {i: _tags(corral.instances()[i]) for i in foreign}

    described: set[str] = set()
    acted_on: list[tuple[str, list[str]]] = []

    def seen(parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            described.update(i["InstanceId"] for i in reservation["Instances"])

    def mutating(model: Any, params: dict[str, Any], **_: Any) -> None:
        ids = params.get("InstanceIds") or params.get("Resources") or []
        acted_on.append((model.name, list(ids)))

    ec2_events = corral.aws["ec2"].meta.events
    ec2_events.register("after-call.ec2.DescribeInstances", seen)
    for operation in ("TerminateInstances", "CreateTags", "DeleteTags", "StopInstances"):
        ec2_events.register(f"before-parameter-build.ec2.{operation}", mutating)

    def every_pass() -> None:
        # Reconcile first: it meets the bait still REQUESTED (a schedule pass may cancel it).
        corral.tick(spot_reconcile.handler)
        corral.tick(schedule.handler)
        corral.tick(idle_reap.handler)
        notices = [spot_warning(i) for i in foreign] + [
            _state_change(i, "terminated") for i in foreign
        ]
        assert corral.interruptions(*notices) == {"batchItemFailures": []}

    every_pass()
    # Past the idle period (the reaper drains, then terminates our agent), then past every
    # other deadline: orphan grace, request timeout, heartbeat timeout.
    reconcile = corral.ctx.settings.reconcile
    for advance in (
        MAX_IDLE_S + 1,
        0.0,
        reconcile.orphan_grace_s + reconcile.request_timeout_s,
        reconcile.heartbeat_timeout_s + 1,
        0.0,
    ):
        corral.clock.advance(advance)
        every_pass()
        corral.receive(QueueName.SCHEDULE)
        corral.receive(QueueName.SCALE_UP)

    now = corral.instances()
    for instance_id in foreign:
        assert now[instance_id]["State"]["Name"] == "running"
        assert _tags(now[instance_id]) == before[instance_id]
    # The untagged and the other cluster's instance never even came back from EC2 (the
    # listing asks for our tag); the one without a pool tag did and was dropped.
    assert untagged not in described and other_cluster not in described
    assert all(not set(ids) & set(foreign) for _, ids in acted_on), acted_on
    records = corral.ctx.store.instances()
    assert all(r.cloud_id not in foreign for r in records)
    text = json.dumps([repr(e) for e in corral.ctx.store.events(limit=1000)])
    assert all(i not in text for i in foreign)
    bait_now = corral.ctx.store.get_instance(bait.id)
    assert bait_now is not None and bait_now.cloud_id is None  # never adopted one of them
    # Our own idle agent was reaped meanwhile: the passes did act, just not on theirs.
    assert ours.cloud_id is not None
    assert now[ours.cloud_id]["State"]["Name"] in ("shutting-down", "terminated")
    assert any(name == "TerminateInstances" for name, _ in acted_on)
