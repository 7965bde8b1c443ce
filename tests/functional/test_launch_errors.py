"""Launch errors through the real handlers against moto (issue 3): a capacity error moves the
launch to the next offering and then to on-demand; a quota error backs the pool off and
shows on the pending trial. EC2's refusals are injected on the Context's own EC2 client
(moto never runs out of capacity or quota)."""

from __future__ import annotations

import json
import random
from typing import Any

import boto3

from corral.domain.config import ExperimentConfig
from corral.domain.instance import InstanceState
from corral.domain.records import EventKind
from corral.domain.trial import TrialState
from corral.handlers.aws import scale_up, schedule
from corral.ports.commands import LaunchInstance
from corral.ports.queue import QueueName
from corral.services.submit import submit_experiment
from tests.functional.conftest import (
    CLUSTER_YAML,
    POOL,
    PREFIX,
    REGION,
    TAG_KEY,
    TAG_VALUE,
    Corral,
    sqs_record,
)
from tests.moto_env import GPU_POOL_YAML_HEAD

SPOT_POOL_YAML = (
    GPU_POOL_YAML_HEAD
    + """\
      instance_type: g5.xlarge
      spot: true
      on_demand_fallback: true
      on_demand_fallback_after: 0s  # at once: these tests follow one launch's path
      network_interface:
        subnet_id: [{first}, {second}]
      tag_key: {tag_key}
      tag_value: {tag_value}
      max_instances: 4
      capacity_memory_period: 3m
      max_idle_agent_period: 60s
      max_agent_starting_period: 5m
"""
)


class _Ceiling(random.Random):
    """Full jitter at its ceiling: a backoff as long as the rule allows (deterministic)."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _plan(corral: Corral) -> None:
    corral.submit(slots=1)
    assert corral.deliver(QueueName.SCHEDULE, schedule.handler) == {"batchItemFailures": []}


def _launch(corral: Corral) -> dict[str, Any]:
    """The scale-up handler on whatever is on its queue (as the event source would)."""
    return corral.deliver(QueueName.SCALE_UP, scale_up.handler)


def _stored_pool_item(pool: str) -> dict[str, Any]:
    """The pool's state item as DynamoDB holds it (read with a client of the test's own)."""
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=f"{PREFIX}pools", Key={"pool": {"S": pool}}, ConsistentRead=True
    )["Item"]
    return dict(item)


def test_capacity_error_moves_to_the_next_spot_offering_then_to_on_demand(
    corral: Corral,
) -> None:
    first, second = corral.subnets()[:2]
    corral.reconfigure(
        SPOT_POOL_YAML.format(
            image=corral.image, first=first, second=second, tag_key=TAG_KEY, tag_value=TAG_VALUE
        )
    )
    # Every spot offering is out of capacity; on-demand is not.
    corral.fail_run_instances("InsufficientInstanceCapacity", lambda o: o[2] == "spot")
    _plan(corral)
    (queued,) = corral.ctx.store.instances()
    assert queued.offering.key == f"g5.xlarge|{first}|spot"  # the cheapest, first in order

    replies = [_launch(corral) for _ in range(3)]  # each refusal re-sends the launch at once

    assert replies == [{"batchItemFailures": []}] * 3
    assert corral.launches == [
        ("g5.xlarge", first, "spot"),
        ("g5.xlarge", second, "spot"),
        ("g5.xlarge", first, "on-demand"),
    ]
    assert corral.receive(QueueName.SCALE_UP) == []  # nothing left to retry
    (instance,) = corral.instances().values()
    assert "InstanceLifecycle" not in instance  # on-demand (a spot instance says "spot")
    assert instance["SubnetId"] == first
    assert instance["InstanceType"] == "g5.xlarge"
    (record,) = corral.ctx.store.instances()
    assert record.state is InstanceState.ALLOCATED
    assert record.cloud_id == instance["InstanceId"]
    assert record.offering.key == f"g5.xlarge|{first}|on-demand"
    assert record.attempt == 2  # one new token per offering tried

    # The capacity memory is in DynamoDB, not in the function's memory: both spot offerings
    # are remembered as unavailable for capacity_memory_period, the on-demand ones are not.
    now = corral.clock.now()
    memory = corral.ctx.store.pool_state(POOL).capacity.unavailable_until
    assert set(memory) == {f"g5.xlarge|{first}|spot", f"g5.xlarge|{second}|spot"}
    assert all(until == now + 180.0 for until in memory.values())
    raw = json.dumps(_stored_pool_item(POOL))
    assert f"g5.xlarge|{first}|spot" in raw and f"g5.xlarge|{second}|spot" in raw
    assert "on-demand" not in raw
    kinds = [e.kind for e in corral.ctx.store.events(pool=POOL)]
    assert kinds.count(EventKind.OFFERING_UNAVAILABLE) == 2


def test_the_capacity_memory_steers_the_next_plan_until_it_expires(corral: Corral) -> None:
    first, second = corral.subnets()[:2]
    corral.reconfigure(
        SPOT_POOL_YAML.format(
            image=corral.image, first=first, second=second, tag_key=TAG_KEY, tag_value=TAG_VALUE
        )
    )
    corral.fail_run_instances(
        "InsufficientInstanceCapacity", lambda o: o == ("g5.xlarge", first, "spot")
    )
    _plan(corral)
    _launch(corral)
    _launch(corral)
    assert corral.launches == [("g5.xlarge", first, "spot"), ("g5.xlarge", second, "spot")]

    # A second trial, planned while the first zone's spot is remembered as out: straight to
    # the second zone, no refused call first.
    _plan(corral)
    _launch(corral)
    assert corral.launches[2:] == [("g5.xlarge", second, "spot")]

    # Once the memory lapses, the planner prefers the first zone again.
    corral.stop_failing_run_instances("InsufficientInstanceCapacity")
    corral.clock.advance(181.0)
    _plan(corral)
    _launch(corral)
    assert corral.launches[3:] == [("g5.xlarge", first, "spot")]
    spot = [i for i in corral.instances().values() if i.get("InstanceLifecycle") == "spot"]
    assert len(spot) == 3


def test_quota_error_backs_the_pool_off_and_shows_on_the_pending_trial(corral: Corral) -> None:
    corral.ctx.rng = _Ceiling()  # the first backoff is then exactly BACKOFF_BASE_S (30 s)
    corral.fail_run_instances("VcpuLimitExceeded")
    _plan(corral)
    (launch,) = corral.receive(QueueName.SCALE_UP)

    reply = corral.handle(scale_up.handler, [launch])

    assert reply == {"batchItemFailures": []}  # a refusal is handled, not a failed record
    assert corral.calls["ec2.RunInstances"] == 1
    now = corral.clock.now()
    state = corral.ctx.store.pool_state(POOL)
    assert state.backoff_until == now + 30.0
    assert state.backoff_failures == 1
    assert state.backoff_reason == f"VcpuLimitExceeded in {corral.subnet}"
    assert float(_stored_pool_item(POOL)["backoff_until"]["N"]) > now  # stored, in the future
    (record,) = corral.ctx.store.instances()
    assert record.state is InstanceState.QUEUED  # waits for the pool, new token next time
    assert record.attempt == 1
    assert record.last_error is not None and "VcpuLimitExceeded" in record.last_error
    assert corral.receive(QueueName.SCALE_UP) == []  # no retry message while backed off

    # A schedule pass shows the wait on the pending trial.
    corral.tick(schedule.handler)
    (trial,) = corral.ctx.store.trials()
    assert trial.state is TrialState.PENDING
    assert trial.pending_reason is not None
    assert "VcpuLimitExceeded" in trial.pending_reason
    assert trial.pending_reason.startswith(
        f"waiting: VcpuLimitExceeded in {corral.subnet} (pool backed off until "
    )
    assert corral.receive(QueueName.SCALE_UP) == []  # and plans no launch

    # A launch message arriving while the pool is backed off (a redrive, a duplicate) makes
    # no call to EC2; neither do more schedule passes.
    corral.clock.advance(20.0)
    again = sqs_record(str(launch["eventSourceARN"]), json.dumps(_message(record.id, 1)))
    assert corral.handle(scale_up.handler, [again]) == {"batchItemFailures": []}
    corral.tick(schedule.handler)
    assert corral.calls["ec2.RunInstances"] == 1
    assert corral.instances() == {}

    # That delivery scheduled one retry, recorded on the record, for a second after the
    # backoff lapses (SQS holds it: moto delays on the wall clock, so it is handed in here).
    (record,) = corral.ctx.store.instances()
    assert record.redriven_at == state.backoff_until + 1.0
    # The quota is raised and the backoff lapses: the retry arrives and launches; success
    # clears the backoff.
    corral.stop_failing_run_instances("VcpuLimitExceeded")
    corral.clock.advance(state.backoff_until + 1.0 - corral.clock.now())
    due = sqs_record(str(launch["eventSourceARN"]), json.dumps(_message(record.id, 1)))
    assert corral.handle(scale_up.handler, [due]) == {"batchItemFailures": []}
    assert corral.calls["ec2.RunInstances"] == 2
    (record,) = corral.ctx.store.instances()
    assert record.state is InstanceState.ALLOCATED
    assert corral.ctx.store.pool_state(POOL).backoff_until == 0.0


def _message(instance_id: str, attempt: int) -> dict[str, Any]:
    message = LaunchInstance(instance_id, attempt).to_message()
    return {"kind": message.kind, "body": message.body}


def test_a_plan_larger_than_one_transaction_is_committed_in_chunks(corral: Corral) -> None:
    # 120 launches in one pass: more than one DynamoDB transaction (100 items) can hold
    # with the pool state riding along. This pass used to fail outright, every time.
    corral.reconfigure(
        CLUSTER_YAML.format(
            image=corral.image, subnet=corral.subnet, tag_key=TAG_KEY, tag_value=TAG_VALUE
        ).replace("max_instances: 4", "max_instances: 120")
    )
    config = ExperimentConfig.model_validate(
        {
            "entrypoint": "python train.py",
            "resources": {"slots_per_trial": 1},
            "searcher": {"name": "grid", "metric": "loss"},
            "hyperparameters": {"x": {"type": "int", "minval": 0, "maxval": 119, "count": 120}},
        }
    )
    assert len(submit_experiment(corral.ctx, config).trials) == 120
    version = corral.ctx.store.pool_state(POOL).version
    corral.calls.clear()

    reply = corral.deliver(QueueName.SCHEDULE, schedule.handler)

    assert reply == {"batchItemFailures": []}
    records = corral.ctx.store.instances()
    assert len(records) == 120
    assert all(r.state is InstanceState.QUEUED for r in records)
    assert corral.ctx.store.pool_state(POOL).version == version + 2  # two chunks: 99 + 21
    assert len(corral.receive(QueueName.SCALE_UP)) == 120
    trials = corral.ctx.store.trials()
    assert all(t.pending_reason and t.pending_reason.startswith("waiting for") for t in trials)
    # 2 launch chunks + 2 chunks of pending reasons (100 + 20); no write per trial.
    assert corral.calls["dynamodb.TransactWriteItems"] == 4
    assert corral.calls["dynamodb.PutItem"] == 0


def test_an_error_that_changes_nothing_of_the_pool_does_not_rewrite_its_state(
    corral: Corral,
) -> None:
    # An unknown error counts against the record's retries only: the pool's state item (and
    # its version, which the schedule pass's plan commits are conditional on) stays as it is.
    _plan(corral)
    before = _stored_pool_item(POOL)
    corral.fail_run_instances("InternalError")
    assert _launch(corral) == {"batchItemFailures": []}
    (record,) = corral.ctx.store.instances()
    assert record.state is InstanceState.QUEUED and record.launch_failures == 1
    assert _stored_pool_item(POOL) == before
