"""DynamoStore specifics the contract suite cannot see: the codec, the calls it makes (no Scan,
paging, batching, retries), how a lost transaction is reported, and the table schema."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from decimal import Context
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.adapters.aws import dynamo_schema as schema
from corral.adapters.aws.dynamo_codec import decode_fields, encode_fields
from corral.adapters.aws.dynamo_store import DynamoStore
from corral.adapters.record_types import sortable_float
from corral.domain.errors import ConflictError
from corral.domain.instance import LIVE_STATES, Instance, InstanceState, new_instance
from corral.domain.offerings import CapacityMemory, CapacityType, Offering
from corral.domain.records import (
    Event,
    EventKind,
    Experiment,
    Heartbeat,
    LogLine,
    PoolState,
    TrialReport,
)
from corral.domain.state_machine import HistoryEntry
from corral.domain.trial import Placement, Trial, TrialState, new_trial
from tests.moto_env import moto_environ

moto = pytest.importorskip("moto")
T0 = 1_700_000_000.0
OFFERING = Offering("g5.xlarge", "subnet-a", CapacityType.SPOT, 4, 0.45)


@pytest.fixture
def store() -> Iterator[DynamoStore]:
    import boto3

    with moto_environ(), moto.mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        schema.create_tables(client, "t-")
        yield DynamoStore(client, prefix="t-", sleep=lambda _: None)


def calls(store: DynamoStore) -> Counter[str]:
    """Count every DynamoDB API call the store makes from now on."""
    seen: Counter[str] = Counter()
    store.client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: seen.update([model.name])
    )
    return seen


def answer(store: DynamoStore, operation: str, replies: list[dict[str, Any]]) -> None:
    """Answer the next ``len(replies)`` calls of ``operation`` instead of moto."""
    from botocore.awsrequest import AWSResponse

    def handler(**_: Any) -> Any:
        if not replies:
            return None
        reply = replies.pop(0)
        status = 400 if "Error" in reply else 200
        return AWSResponse("https://dynamodb", status, {}, None), reply

    store.client.meta.events.register(f"before-call.dynamodb.{operation}", handler)


# ---- codec ---------------------------------------------------------------------------------

floats = st.floats(allow_nan=False)  # every float, inf and subnormals included (nan != nan)
text = st.text(max_size=8)
ids = st.text(min_size=1, max_size=8)
maybe = st.none() | floats
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
json_maps = st.dictionaries(text, json_values, max_size=4)
history = st.lists(st.builds(HistoryEntry, text, floats, text), max_size=3).map(tuple)
gpus = st.lists(st.integers(0, 7), max_size=3).map(tuple)
offerings = st.builds(
    Offering, text, text, st.sampled_from(CapacityType), st.integers(0, 8), floats
)
instances = st.builds(
    Instance,
    id=ids, pool=ids, offering=offerings, state=st.sampled_from(InstanceState),
    created_at=floats, version=st.integers(0, 10**9), history=history,
    attempt=st.integers(0, 99), cloud_id=st.none() | ids, spot_request_id=st.none() | text,
    requested_at=maybe, launched_at=maybe, registered_at=maybe, terminated_at=maybe,
    idle_since=maybe, allocations=st.lists(st.tuples(text, gpus), max_size=3).map(tuple),
    planned_for=st.lists(st.tuples(text, st.integers(0, 8)), max_size=3).map(tuple),
    last_error=st.none() | text, address=st.none() | text, interruption_notice_at=maybe,
)  # fmt: skip
trials = st.builds(
    Trial,
    id=ids, experiment_id=ids, pool=ids, slots=st.integers(0, 64),
    state=st.sampled_from(TrialState), submitted_at=floats, priority=st.integers(-99, 99),
    version=st.integers(0, 10**9), history=history,
    placement=st.none() | st.builds(Placement, st.lists(st.tuples(text, gpus)).map(tuple)),
    restarts=st.integers(0, 9), latest_checkpoint=st.none() | text, exit_code=st.none()
    | st.integers(-255, 255), cost_usd=floats, gpu_seconds=floats, hyperparameters=json_maps,
    ran_on=st.lists(text, max_size=3).map(tuple),
)  # fmt: skip
pools = st.builds(
    PoolState,
    pool=ids, version=st.integers(0, 99),
    capacity=st.dictionaries(text, floats, max_size=3).map(CapacityMemory),
    backoff_until=floats, backoff_reason=st.none() | text, breaker_open_since=maybe,
)  # fmt: skip
others = (
    st.builds(Experiment, ids, text, ids, floats, json_maps, st.lists(text).map(tuple))
    | st.builds(Event, floats, st.sampled_from(EventKind), text, st.none() | ids, data=json_maps)
    | st.builds(LogLine, ids, st.integers(0, 10**6), floats, text)
    | st.builds(
        Heartbeat,
        ids,
        floats,
        st.lists(
            st.builds(TrialReport, text, text, st.none() | st.integers(-(10**18), 10**18))
        ).map(tuple),
        st.lists(floats, max_size=2).map(tuple),
    )
)


DYNAMODB_NUMBERS = Context(prec=38)  # DynamoDB keeps 38 significant digits


def as_dynamodb_would(value: Any) -> Any:
    """Numbers as DynamoDB returns them (normalised: "5.0" -> "5", "1e+16" -> "1E+16")."""
    if isinstance(value, dict):
        return {
            k: (
                str(DYNAMODB_NUMBERS.create_decimal(v).normalize())
                if k == "N"
                else as_dynamodb_would(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [as_dynamodb_would(v) for v in value]
    return value


@settings(max_examples=200, deadline=None)
@given(record=instances | trials | pools | others)
def test_every_field_round_trips_exactly(record: Any) -> None:
    item = as_dynamodb_would(encode_fields(record))
    assert decode_fields(type(record), item) == record


def test_read_capacity_memory_is_read_only() -> None:
    state = PoolState("gpu", capacity=CapacityMemory({"k": T0}))
    decoded = decode_fields(PoolState, encode_fields(state))
    assert decoded == state
    with pytest.raises(TypeError):
        decoded.capacity.unavailable_until["k"] = 0.0  # type: ignore[index]


@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_sortable_float_sorts_like_the_numbers(a: float, b: float) -> None:
    if a < b:
        assert sortable_float(a) < sortable_float(b)
    elif a == b:
        assert sortable_float(a) == sortable_float(b)


def test_importing_the_adapters_does_not_import_boto3() -> None:
    code = (
        "import sys, corral.adapters.aws.dynamo_store, corral.adapters.aws.sqs_queue;"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- commits -------------------------------------------------------------------------------


def test_a_lost_transaction_names_every_stale_record(store: DynamoStore) -> None:
    inst, tri = store.commit(
        [new_instance("i1", "gpu", OFFERING, T0, "t"), new_trial("t1", "e", "gpu", 1, T0)]
    )
    store.commit([replace(inst, attempt=1), replace(tri, priority=1)])
    with pytest.raises(ConflictError) as lost:
        store.commit([replace(inst, attempt=2), replace(tri, priority=2), PoolState("gpu")])
    assert "instance i1 (expected v1, is v2)" in str(lost.value)
    assert "trial t1 (expected v1, is v2)" in str(lost.value)
    assert store.pool_state("gpu").version == 0


def test_a_single_record_is_a_conditional_put_not_a_transaction(store: DynamoStore) -> None:
    seen = calls(store)
    store.commit([PoolState("gpu")])
    with pytest.raises(ConflictError, match="pool gpu"):
        store.commit([PoolState("gpu")])
    assert seen == Counter({"PutItem": 2})


def test_a_transaction_conflict_is_a_conflict_other_cancellations_are_not(
    store: DynamoStore,
) -> None:
    reasons = [{"Code": "None"}, {"Code": "TransactionConflict"}]
    error = {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"}}
    answer(store, "TransactWriteItems", [error | {"CancellationReasons": reasons}])
    with pytest.raises(ConflictError, match="trial t1"):
        store.commit([PoolState("gpu"), new_trial("t1", "e", "gpu", 1, T0)])
    throttled = [{"Code": "ThrottlingError"}, {"Code": "None"}]
    answer(store, "TransactWriteItems", [error | {"CancellationReasons": throttled}])
    with pytest.raises(store.client.exceptions.TransactionCanceledException):
        store.commit([PoolState("gpu"), new_trial("t1", "e", "gpu", 1, T0)])


def test_commit_limits_are_checked_before_calling_aws(store: DynamoStore) -> None:
    seen = calls(store)
    with pytest.raises(ValueError, match="100"):
        store.commit([new_trial(f"t{n}", "e", "gpu", 1, T0) for n in range(101)])
    with pytest.raises(ValueError, match="pool must not be empty"):
        store.commit([new_trial("t1", "e", "", 1, T0)])
    assert not seen


def test_heartbeats_never_bump_versions_nor_fail_a_commit(store: DynamoStore) -> None:
    inst = store.commit([new_instance("i1", "gpu", OFFERING, T0, "t")])[0]
    for n in range(3):
        store.put_heartbeat(Heartbeat("i1", T0 + n, gpu_utilization=(0.5,)))
    assert store.get_instance("i1") == inst
    store.commit([replace(inst, attempt=1)])  # still at the version read before the beats
    item = store.client.get_item(
        TableName=store.table(schema.HEARTBEATS), Key={"instance_id": {"S": "i1"}}
    )["Item"]
    assert item[schema.TTL_ATTRIBUTE]["N"] == str(int(T0 + 2 + 7 * 86_400))


# ---- queries -------------------------------------------------------------------------------


def test_hot_paths_query_indexes_and_never_scan(store: DynamoStore) -> None:
    store.commit(
        [
            replace(new_instance("i1", "gpu", OFFERING, T0, "t"), state=InstanceState.IDLE),
            replace(new_instance("i2", "gpu", OFFERING, T0, "t"), cloud_id="i-0abc"),
            new_trial("t1", "e1", "gpu", 1, T0),
        ]
    )
    seen = calls(store)
    assert [i.id for i in store.instances(states=LIVE_STATES)] == ["i1", "i2"]
    assert [t.id for t in store.trials(states={TrialState.PENDING})] == ["t1"]
    assert [t.id for t in store.trials(experiment_id="e1", pool="gpu")] == ["t1"]
    assert store.instance_by_cloud_id("i-0abc") is not None
    store.heartbeats(["i1", "i2"])
    store.events(pool="gpu")
    store.experiments()
    store.instances(pool="gpu")
    assert seen["Scan"] == 0
    assert set(seen) == {"Query", "GetItem", "BatchGetItem"}
    seen.clear()
    store.trials(states={TrialState.PENDING})
    assert seen == Counter({"Query": 1})  # one state, one Query


def test_results_come_in_a_fixed_order(store: DynamoStore) -> None:
    store.commit(
        [
            new_trial("t-late", "e", "gpu", 1, T0 + 5),
            new_trial("t-urgent", "e", "gpu", 1, T0 + 9, priority=1),
            new_trial("t-early", "e", "gpu", 1, T0),
        ]
    )
    expected = ["t-urgent", "t-early", "t-late"]  # scheduling order
    assert [t.id for t in store.trials(states={TrialState.PENDING})] == expected
    assert [t.id for t in store.trials(experiment_id="e")] == expected


def small_pages(store: DynamoStore, size: int) -> None:
    """Make every Query return at most ``size`` items, as a 1 MB page limit would."""

    def shrink(params: dict[str, Any], **_: Any) -> None:
        params["Limit"] = min(params.get("Limit", size), size)

    store.client.meta.events.register("provide-client-params.dynamodb.Query", shrink)


def test_queries_follow_last_evaluated_key(store: DynamoStore) -> None:
    store.commit([new_trial(f"t{n:02}", "e", "gpu", 1, T0 + n) for n in range(30)])
    store.append_logs([LogLine("t1", n, T0, f"line {n}") for n in range(30)])
    store.append_events([Event(T0 + n, EventKind.TRIAL_STATE, "x", "gpu") for n in range(30)])
    small_pages(store, 7)
    seen = calls(store)
    assert len(store.trials(states={TrialState.PENDING})) == 30
    assert seen["Query"] == 5  # 7 + 7 + 7 + 7 + 2
    assert [line.seq for line in store.logs("t1", after_seq=3, limit=20)] == list(range(4, 24))
    assert len(store.events(since=T0 - 1, limit=25, pool="gpu")) == 25
    assert len(store.events(since=T0 + 9)) == 20


def test_events_at_the_same_time_keep_their_append_order(store: DynamoStore) -> None:
    store.append_events([Event(T0, EventKind.TRIAL_STATE, str(n)) for n in range(12)])
    assert [e.message for e in store.events(since=T0 - 1)] == [str(n) for n in range(12)]


# ---- batches -------------------------------------------------------------------------------


def test_heartbeats_batch_by_100_and_retry_unprocessed_keys(store: DynamoStore) -> None:
    for n in range(150):
        store.put_heartbeat(Heartbeat(f"i{n:03}", T0 + n))
    first = [{"instance_id": {"S": f"i{n:03}"}} for n in range(100)]
    table = store.table(schema.HEARTBEATS)
    # The first call processes nothing: every key comes back unprocessed.
    replies = [{"Responses": {}, "UnprocessedKeys": {table: {"Keys": first}}}]
    answer(store, "BatchGetItem", replies)
    seen = calls(store)  # sees only the calls that reach moto
    beats = store.heartbeats([f"i{n:03}" for n in range(150)] + ["i000", "nope"])
    assert list(beats) == [f"i{n:03}" for n in range(150)]
    assert not replies and seen == Counter({"BatchGetItem": 2})  # the retry, then the rest


def test_unprocessed_writes_are_retried_then_reported(store: DynamoStore) -> None:
    line = LogLine("t1", 0, T0, "x")
    unprocessed = {
        store.table(schema.LOGS): [{"PutRequest": {"Item": encode_fields(line)}}]
    }  # fmt: skip
    answer(store, "BatchWriteItem", [{"UnprocessedItems": unprocessed}])
    store.append_logs([line, line])  # a duplicate in one batch is dropped, not refused
    assert store.logs("t1") == [line]
    answer(store, "BatchWriteItem", [{"UnprocessedItems": unprocessed}] * 9)
    with pytest.raises(RuntimeError, match="unprocessed"):
        store.append_logs([line])


# ---- schema --------------------------------------------------------------------------------


def test_schema_defines_every_key_attribute_once() -> None:
    for definition in schema.table_definitions("p-"):
        defined = {a["AttributeName"] for a in definition["AttributeDefinitions"]}
        used = {k["AttributeName"] for k in definition["KeySchema"]}
        for index in definition.get("GlobalSecondaryIndexes", []):
            used |= {k["AttributeName"] for k in index["KeySchema"]}
        assert defined == used, definition["TableName"]
        assert definition["TableName"].startswith("p-")


def test_prefix_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(schema.PREFIX_ENV, "dev-")
    assert DynamoStore(object()).table(schema.TRIALS) == "dev-trials"
    assert DynamoStore(object(), prefix="x-").table(schema.TRIALS) == "x-trials"
