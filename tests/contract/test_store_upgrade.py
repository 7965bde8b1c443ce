"""Records written by the previous version, read and written by this one.

``tests/fixtures/upgrade/v1/`` holds the raw items and documents Corral wrote before stored
records carried a schema version (captured by ``tests/fixtures/upgrade/capture.py`` from
that version's code), and what they mean (``records.json``). Each case puts the raw data
into a fresh DynamoDB (moto) or Firestore (Google's emulator) and reads it through today's
store: the same records come back, they take conditional writes, the services work on
them, and the next write stores them at today's schema version.

The memory store has nothing to upgrade: it lives and dies with its process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pytest

from corral.adapters import migrations
from corral.adapters.migrations import SCHEMA_VERSION, NewerSchemaError
from corral.domain.errors import ConflictError
from corral.domain.records import Heartbeat, PoolState
from corral.domain.trial import Trial, TrialState
from corral.ports.store import Store, commit_one
from corral.protocol.agent import AgentTrialState, HeartbeatRequest, TrialStatus
from corral.services import agents as agent_service
from corral.services.kill import kill_experiment
from tests.contract.dynamo_harness import dynamodb_store
from tests.contract.firestore_harness import firestore_store
from tests.contract.upgrade_records import load, snapshot
from tests.services.harness import Cluster, make_pool

PREFIX = "contract-"  # the harnesses' table and collection prefix
POOL = "gpu"  # the pool of the captured scenario


@dataclass
class Loaded:
    store: Store
    raw: Callable[[str, str], dict[str, Any]]  # (collection or table, key) -> stored data
    poke: Callable[[str, str, str, int], None]  # set one int attribute of a stored record
    stamp: Callable[[dict[str, Any]], int | None]  # the schema version in stored data


@contextmanager
def dynamodb_at(version: str) -> Iterator[Loaded]:
    """A fresh DynamoDB (moto) holding the raw items of fixture ``version``."""
    with dynamodb_store() as store:
        client: Any = store.client  # type: ignore[attr-defined]
        for table, items in load(version, "dynamodb.json").items():
            for item in items:
                client.put_item(TableName=PREFIX + table, Item=item)
        key_attr = {"pools": "pool", "heartbeats": "instance_id"}

        def raw(table: str, key: str) -> dict[str, Any]:
            found = client.get_item(
                TableName=PREFIX + table,
                Key={key_attr.get(table, "id"): {"S": key}},
                ConsistentRead=True,
            )
            return dict(found["Item"])

        def poke(table: str, key: str, attribute: str, value: int) -> None:
            item = raw(table, key) | {attribute: {"N": str(value)}}
            client.put_item(TableName=PREFIX + table, Item=item)

        def stamp(item: dict[str, Any]) -> int | None:
            return int(item[SCHEMA_VERSION]["N"]) if SCHEMA_VERSION in item else None

        yield Loaded(store, raw, poke, stamp)


def _restore(value: Any) -> Any:
    """Fixture JSON back to Firestore values (timestamps were written as ``__timestamp__``)."""
    if isinstance(value, dict):
        if set(value) == {"__timestamp__"}:
            return datetime.fromisoformat(value["__timestamp__"])
        return {k: _restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v) for v in value]
    return value


@contextmanager
def firestore_at(version: str) -> Iterator[Loaded]:
    """A fresh Firestore (the emulator) holding the raw documents of fixture ``version``."""
    with firestore_store() as store:
        client: Any = store.client  # type: ignore[attr-defined]
        batch = client.batch()
        for path, data in load(version, "firestore.json").items():
            batch.set(client.document(PREFIX + path), _restore(data))
        batch.commit()

        def raw(collection: str, key: str) -> dict[str, Any]:
            return dict(client.document(f"{PREFIX}{collection}/{key}").get().to_dict())

        def poke(collection: str, key: str, attribute: str, value: int) -> None:
            client.document(f"{PREFIX}{collection}/{key}").update({attribute: value})

        def stamp(data: dict[str, Any]) -> int | None:
            return int(data[SCHEMA_VERSION]) if SCHEMA_VERSION in data else None

        yield Loaded(store, raw, poke, stamp)


BACKENDS = {"dynamodb": dynamodb_at, "firestore": firestore_at}


@pytest.fixture(params=sorted(BACKENDS))
def v1(request: pytest.FixtureRequest) -> Iterator[Loaded]:
    """The previous version's records in a fresh store. A later release adds its own
    fixture (``v2``, ...) and parametrizes these tests over the versions."""
    with BACKENDS[request.param]("v1") as loaded:
        yield loaded


def contains(read: Any, captured: Any, path: str = "") -> None:
    """``read`` says everything ``captured`` says; fields added since (dicts' extra keys)
    are allowed: their own migration tests say what they hold."""
    if isinstance(captured, dict):
        assert isinstance(read, dict), path
        for key, value in captured.items():
            assert key in read, f"{path}.{key}: lost"
            contains(read[key], value, f"{path}.{key}")
    elif isinstance(captured, list):
        assert isinstance(read, list) and len(read) == len(captured), path
        for i, (r, c) in enumerate(zip(read, captured, strict=True)):
            contains(r, c, f"{path}[{i}]")
    else:
        assert read == captured, f"{path}: {read!r} != {captured!r}"


def current(kind: type) -> int:
    found = migrations.SCHEMA.kind_of(kind)
    assert found is not None
    return found.version


# ---- the tests ------------------------------------------------------------------------------


def test_the_fixtures_hold_every_kind_of_record() -> None:
    captured = load("v1", "records.json")
    assert {k: len(v) > 0 for k, v in captured.items()} == dict.fromkeys(captured, True)
    assert set(captured) == {
        "experiments",
        "trials",
        "instances",
        "pools",
        "heartbeats",
        "events",
        "logs",
        "metrics",
    }
    raw = json.dumps(load("v1", "dynamodb.json")) + json.dumps(load("v1", "firestore.json"))
    assert SCHEMA_VERSION not in raw  # written before versions existed


def test_previous_records_read_as_the_same_domain_records(v1: Loaded) -> None:
    read = snapshot(v1.store, [POOL])
    captured = load("v1", "records.json")
    for kind, records in captured.items():
        contains(read[kind], records, kind)
    summaries = v1.store.metric_summaries([t["id"] for t in captured["trials"]])
    assert len(summaries) == len(captured["metrics"])  # list views read summaries alone


def test_previous_records_take_conditional_writes_and_are_rewritten_current(
    v1: Loaded,
) -> None:
    store = v1.store
    trial = store.get_trial("exp-000001.t0001")
    instance = store.get_instance("inst-000003")
    experiment = store.get_experiment("exp-000001")
    pool = store.pool_state(POOL)
    assert trial is not None and instance is not None and experiment is not None
    assert v1.stamp(v1.raw("trials", trial.id)) is None  # as the previous version left it

    written = store.commit(
        [
            replace(trial, pending_reason="after the upgrade"),
            replace(instance, last_error="after the upgrade"),
            replace(experiment, owner="someone"),
            replace(pool, boot_failures=1),
        ]
    )
    assert [r.version for r in written] == [
        trial.version + 1,
        instance.version + 1,
        experiment.version + 1,
        pool.version + 1,
    ]
    for table, key, kind in (
        ("trials", trial.id, type(trial)),
        ("instances", instance.id, type(instance)),
        ("experiments", experiment.id, type(experiment)),
        ("pools", POOL, PoolState),
    ):
        assert v1.stamp(v1.raw(table, key)) == current(kind), table
    assert store.get_trial(trial.id) == written[0]
    with pytest.raises(ConflictError):  # the version counter still guards every write
        commit_one(store, replace(trial, pending_reason="stale"))

    beats = store.heartbeats(["inst-000003"])
    store.put_heartbeat(replace(beats["inst-000003"], at=beats["inst-000003"].at + 5))
    assert v1.stamp(v1.raw("heartbeats", "inst-000003")) == current(Heartbeat)


def test_the_services_carry_on_over_previous_records(v1: Loaded) -> None:
    cluster = Cluster(make_pool(name=POOL))
    cluster.store = cluster.ctx.store = v1.store
    cluster.clock.advance(400.0)  # just after the capture ended
    instance = v1.store.get_instance("inst-000003")
    assert instance is not None and instance.cloud_id is not None

    killed = kill_experiment(cluster.ctx, "exp-000001")
    assert killed.killed_at == cluster.clock.now()
    states = {t.id: t.state for t in v1.store.trials(experiment_id="exp-000001")}
    assert states == {
        "exp-000001.t0000": TrialState.COMPLETED,  # finished before: untouched
        "exp-000001.t0001": TrialState.STOPPING,  # running: its agent is told to stop it
    }
    running = TrialStatus(trial_id="exp-000001.t0001", state=AgentTrialState.RUNNING)
    reply = agent_service.heartbeat(
        cluster.ctx, instance.id, instance.cloud_id, HeartbeatRequest(trials=[running])
    )
    assert reply.stop == ["exp-000001.t0001"]


def test_a_record_from_a_newer_corral_is_refused_not_misread(v1: Loaded) -> None:
    v1.poke("trials", "exp-000001.t0001", SCHEMA_VERSION, current(Trial) + 1)
    with pytest.raises(NewerSchemaError, match=r"trial exp-000001\.t0001 has schema version"):
        v1.store.get_trial("exp-000001.t0001")
    assert v1.store.get_trial("exp-000001.t0000") is not None  # its neighbours still read
