"""DynamoStore: the Store port on DynamoDB (table design and reasons: docs/storage.md).

- ``commit`` is one conditional write per record (``attribute_not_exists`` for version 0,
  ``version = :expected`` otherwise): a single record is a conditional ``PutItem`` (half the
  cost of a transaction), several are one ``TransactWriteItems``. Losing means
  ``ConflictError`` naming the stale records, with their stored version when DynamoDB says.
- Queries are ``Query`` calls on indexes, never ``Scan``. Index reads are eventually
  consistent (a record written a moment ago may show its previous state); the version
  condition on the next write keeps that safe. ``get_*`` reads are consistent.
- Results come in a fixed order: instances by ``(created_at, id)``, trials in scheduling
  order ``(priority, submitted_at, id)``, experiments newest first, events oldest first.
- Heartbeats live in their own table, so writing one never touches a record's ``version``.
- Trial metric series live in the logs table (no extra table, IAM grant or index): key
  ``("metrics#<trial id>", 0 | 1)`` (training, validation; ``#`` is in no trial id), the
  series as one map attribute, conditioned on its own ``revision``. Summaries are read with
  a projection of ``series.summary`` only, so list views never fetch the points.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from corral.adapters.aws import dynamo_schema as schema
from corral.adapters.aws.dynamo_codec import Item, decode_fields, encode_fields
from corral.adapters.record_types import sortable_float
from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.metrics import MetricKind, MetricSeries, MetricSummary
from corral.domain.records import Event, Experiment, Heartbeat, LogLine, PoolState
from corral.domain.trial import Trial, TrialState, sort_key
from corral.ports.store import Record, RecordKinds, commit_keys, record_key

MAX_TRANSACTION_ITEMS = 100  # TransactWriteItems' limit
_BATCH_GET, _BATCH_WRITE = 100, 25  # BatchGetItem / BatchWriteItem limits
_RETRIES = 8  # for unprocessed batch items (throttling); backoff 50 ms doubling
# Event keys: ties on ``at`` sort in append order within a process, by process otherwise.
_PROCESS = secrets.token_hex(4)
_ARRIVAL = itertools.count()
DAY = 86_400.0
D = TypeVar("D")


KINDS: RecordKinds = {
    Instance: schema.INSTANCES,
    Trial: schema.TRIALS,
    Experiment: schema.EXPERIMENTS,
    PoolState: schema.POOLS,
}


class DynamoStore:
    """Implements ``corral.ports.store.Store``.

    ``client``: a boto3 DynamoDB client (created on first use when omitted, so importing
    this module never imports boto3). ``prefix``: table-name prefix (default
    ``$CORRAL_TABLE_PREFIX`` or ``corral-``). Retention (days) sets the TTL attribute on
    observations; ``None`` keeps them forever. ``sleep`` is the backoff between batch
    retries (tests pass a fake).
    """

    def __init__(
        self,
        client: Any | None = None,
        *,
        prefix: str | None = None,
        heartbeat_retention_days: float | None = 7,
        event_retention_days: float | None = 90,
        log_retention_days: float | None = 90,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._prefix = schema.table_prefix(prefix)
        self._ttl_days = {
            schema.HEARTBEATS: heartbeat_retention_days,
            schema.EVENTS: event_retention_days,
            schema.LOGS: log_retention_days,
        }
        self._sleep = sleep

    @property
    def client(self) -> Any:
        if self._client is None:
            from corral.adapters.aws import clients  # lazily: keeps cold starts fast

            self._client = clients.client("dynamodb")
        return self._client

    def table(self, kind: str) -> str:
        return schema.table_name(self._prefix, kind)

    # ---- versioned records ----------------------------------------------------------
    def commit(self, records: Sequence[Record]) -> list[Record]:
        keys = commit_keys(records, KINDS, MAX_TRANSACTION_ITEMS, "DynamoDB allows 100")
        if not records:
            return []
        written = [replace(r, version=r.version + 1) for r in records]
        puts = [
            self._conditional_put(k[0], r, w)
            for k, r, w in zip(keys, records, written, strict=True)
        ]
        errors = self.client.exceptions
        try:
            if len(puts) == 1:
                self.client.put_item(**puts[0])
            else:
                self.client.transact_write_items(TransactItems=[{"Put": p} for p in puts])
        except errors.ConditionalCheckFailedException as error:
            stale_one = _stale(keys[0], records[0], error.response.get("Item"))
            raise ConflictError(f"stale record(s): {stale_one}") from None
        except errors.TransactionCanceledException as error:
            reasons = error.response.get("CancellationReasons") or []
            stale = [
                _stale(key, record, reason.get("Item"))
                for key, record, reason in zip(keys, records, reasons, strict=False)
                if reason.get("Code") in ("ConditionalCheckFailed", "TransactionConflict")
            ]
            if not stale:  # throttling, validation, ...: not a lost race
                raise
            raise ConflictError(f"stale record(s): {'; '.join(stale)}") from None
        return written

    def _conditional_put(self, kind: str, record: Record, written: Record) -> dict[str, Any]:
        item = encode_fields(written)
        (hash_key,) = schema.KEYS[kind]
        for attr in (hash_key, "pool", "cloud_id", "experiment_id"):
            if attr in item and item[attr].get("S") == "":
                # DynamoDB refuses empty strings in key and index-key attributes.
                raise ValueError(
                    f"{kind} {record_key(record, KINDS)[1]!r}: {attr} must not be empty"
                )
        if isinstance(written, Experiment):
            item[schema.LISTING] = {"S": schema.LISTING_VALUE}
            item[schema.LISTED_AT] = {"S": f"{sortable_float(written.submitted_at)}#{written.id}"}
        put: dict[str, Any] = {
            "TableName": self.table(kind),
            "Item": item,
            "ExpressionAttributeNames": {"#k": hash_key},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if record.version == 0:
            put["ConditionExpression"] = "attribute_not_exists(#k)"
        else:
            put["ConditionExpression"] = "#v = :expected"
            put["ExpressionAttributeNames"] = {"#v": "version"}
            put["ExpressionAttributeValues"] = {":expected": {"N": str(record.version)}}
        return put

    def _get(self, kind: str, key: str, cls: type[D]) -> D | None:
        (hash_key,) = schema.KEYS[kind]
        found = self.client.get_item(
            TableName=self.table(kind), Key={hash_key: {"S": key}}, ConsistentRead=True
        ).get("Item")
        return None if found is None else decode_fields(cls, found)

    def get_instance(self, instance_id: str) -> Instance | None:
        return self._get(schema.INSTANCES, instance_id, Instance)

    def get_trial(self, trial_id: str) -> Trial | None:
        return self._get(schema.TRIALS, trial_id, Trial)

    def get_experiment(self, experiment_id: str) -> Experiment | None:
        return self._get(schema.EXPERIMENTS, experiment_id, Experiment)

    def pool_state(self, pool: str) -> PoolState:
        return self._get(schema.POOLS, pool, PoolState) or PoolState(pool)

    def instances(
        self,
        *,
        pool: str | None = None,
        states: Collection[InstanceState] | None = None,
    ) -> list[Instance]:
        items = self._by_state(schema.INSTANCES, InstanceState, states, pool)
        found = _newest(decode_fields(Instance, i) for i in items)
        return sorted(found, key=lambda r: (r.created_at, r.id))

    def trials(
        self,
        *,
        states: Collection[TrialState] | None = None,
        experiment_id: str | None = None,
        pool: str | None = None,
    ) -> list[Trial]:
        if experiment_id is None:
            items = self._by_state(schema.TRIALS, TrialState, states, pool)
        else:  # an experiment's trials are few: its index, then the pool filter here
            wanted: list[str | None] = [None]  # no state filter: the whole experiment
            if states is not None:
                wanted = [*sorted({s.value for s in states})]
            conditions = [("experiment_id", experiment_id, s) for s in wanted]
            items = self._queries(schema.TRIALS, schema.BY_EXPERIMENT, conditions)
        found = _newest(decode_fields(Trial, i) for i in items)
        return sorted((t for t in found if pool in (None, t.pool)), key=sort_key)

    def _by_state(
        self, kind: str, every: Iterable[Any], states: Collection[Any] | None, pool: str | None
    ) -> Iterator[Item]:
        """One Query per state on the ``by-state`` index (pool as its range key)."""
        wanted = sorted({s.value for s in (every if states is None else states)})
        return self._queries(kind, schema.BY_STATE, [("state", s, pool) for s in wanted])

    def _queries(
        self, kind: str, index: str, conditions: list[tuple[str, str, str | None]]
    ) -> Iterator[Item]:
        """Query ``index`` for each (hash attribute, value, range value or None)."""
        range_attr = schema.INDEX_RANGE_KEY.get(index)
        for hash_attr, value, range_value in conditions:
            names = {"#h": hash_attr}
            values = {":h": {"S": value}}
            expression = "#h = :h"
            if range_value is not None and range_attr is not None:
                names["#r"], values[":r"] = range_attr, {"S": range_value}
                expression += " AND #r = :r"
            yield from self._query(
                TableName=self.table(kind),
                IndexName=index,
                KeyConditionExpression=expression,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )

    def _query(self, limit: int | None = None, **kwargs: Any) -> Iterator[Item]:
        """Every item of a Query, following ``LastEvaluatedKey`` past each 1 MB page."""
        while True:
            if limit is not None:
                kwargs["Limit"] = limit
            page = self.client.query(**kwargs)
            items = page.get("Items", [])
            yield from items
            if limit is not None:
                limit -= len(items)
            start = page.get("LastEvaluatedKey")
            if start is None or (limit is not None and limit <= 0):
                return
            kwargs["ExclusiveStartKey"] = start

    def instance_by_cloud_id(self, cloud_id: str) -> Instance | None:
        # The index holds keys only and may lag: re-read each candidate consistently and
        # keep the ones that still carry this cloud id (the latest created wins a tie).
        keys = self._queries(schema.INSTANCES, schema.BY_CLOUD_ID, [("cloud_id", cloud_id, None)])
        ids = sorted({k["id"]["S"] for k in keys})
        found = [r for r in map(self.get_instance, ids) if r is not None and r.cloud_id == cloud_id]
        return max(found, key=lambda r: (r.created_at, r.id), default=None)

    def experiments(self, *, limit: int = 100) -> list[Experiment]:
        if limit <= 0:
            return []
        items = self._query(
            limit=limit,
            TableName=self.table(schema.EXPERIMENTS),
            IndexName=schema.NEWEST,
            KeyConditionExpression="#l = :l",
            ExpressionAttributeNames={"#l": schema.LISTING},
            ExpressionAttributeValues={":l": {"S": schema.LISTING_VALUE}},
            ScanIndexForward=False,
        )
        return [decode_fields(Experiment, i) for i in items][:limit]

    # ---- observations (no versions) -------------------------------------------------
    def _expiry(self, kind: str, at: float) -> dict[str, Any]:
        days = self._ttl_days[kind]
        return {} if days is None else {schema.TTL_ATTRIBUTE: {"N": str(int(at + days * DAY))}}

    def put_heartbeat(self, heartbeat: Heartbeat) -> None:
        item = encode_fields(heartbeat) | self._expiry(schema.HEARTBEATS, heartbeat.at)
        self.client.put_item(TableName=self.table(schema.HEARTBEATS), Item=item)

    def heartbeats(self, instance_ids: Collection[str]) -> dict[str, Heartbeat]:
        wanted = list(dict.fromkeys(instance_ids))  # BatchGetItem refuses duplicate keys
        found: dict[str, Heartbeat] = {}
        table = self.table(schema.HEARTBEATS)
        for start in range(0, len(wanted), _BATCH_GET):
            keys = [{"instance_id": {"S": i}} for i in wanted[start : start + _BATCH_GET]]
            request: dict[str, Any] = {table: {"Keys": keys}}
            for attempt in range(_RETRIES + 1):
                reply = self.client.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(table, []):
                    beat = decode_fields(Heartbeat, item)
                    found[beat.instance_id] = beat
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    break
                self._backoff(attempt, "BatchGetItem", table)
        return {i: found[i] for i in wanted if i in found}

    def _backoff(self, attempt: int, operation: str, table: str) -> None:
        if attempt >= _RETRIES:
            raise RuntimeError(f"{operation} on {table}: items still unprocessed after retries")
        self._sleep(0.05 * 2**attempt)

    def _batch_write(self, kind: str, items: list[Item]) -> None:
        table = self.table(kind)
        for start in range(0, len(items), _BATCH_WRITE):
            chunk = items[start : start + _BATCH_WRITE]
            request: dict[str, Any] = {table: [{"PutRequest": {"Item": i}} for i in chunk]}
            for attempt in range(_RETRIES + 1):
                reply = self.client.batch_write_item(RequestItems=request)
                request = reply.get("UnprocessedItems") or {}
                if not request:
                    break
                self._backoff(attempt, "BatchWriteItem", table)

    def append_events(self, events: Sequence[Event]) -> None:
        items = []
        for event in events:
            key = f"{sortable_float(event.at)}#{_PROCESS}{next(_ARRIVAL):012x}"
            items.append(
                encode_fields(event)
                | {schema.STREAM: {"S": schema.STREAM_VALUE}, schema.EVENT_KEY: {"S": key}}
                | self._expiry(schema.EVENTS, event.at)
            )
        self._batch_write(schema.EVENTS, items)

    def events(
        self, *, since: float = 0.0, limit: int = 200, pool: str | None = None
    ) -> list[Event]:
        """Events with ``at > since``, oldest first; ties in append order per process."""
        if limit <= 0:
            return []
        # Every key of an event at exactly ``since`` is "<since>#...", below "<since>$".
        after = {":after": {"S": f"{sortable_float(since)}$"}}
        query: dict[str, Any] = {"TableName": self.table(schema.EVENTS)}
        if pool is None:
            hash_attr, value = schema.STREAM, schema.STREAM_VALUE
            query["ConsistentRead"] = True  # pagers must not skip an event just written
        else:
            hash_attr, value = "pool", pool
            query["IndexName"] = schema.BY_POOL
        query |= {
            "KeyConditionExpression": "#h = :h AND #k > :after",
            "ExpressionAttributeNames": {"#h": hash_attr, "#k": schema.EVENT_KEY},
            "ExpressionAttributeValues": {":h": {"S": value}} | after,
        }
        return [decode_fields(Event, i) for i in self._query(limit=limit, **query)][:limit]

    def append_logs(self, lines: Sequence[LogLine]) -> None:
        # Resent lines (same trial and seq) overwrite with the same content: idempotent.
        unique = {(line.trial_id, line.seq): line for line in reversed(lines)}
        items = [
            encode_fields(line) | self._expiry(schema.LOGS, line.at)
            for line in reversed(unique.values())
        ]
        self._batch_write(schema.LOGS, items)

    def logs(self, trial_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[LogLine]:
        if limit <= 0:
            return []
        items = self._query(
            limit=limit,
            TableName=self.table(schema.LOGS),
            KeyConditionExpression="#t = :t AND #s > :after",
            ExpressionAttributeNames={"#t": "trial_id", "#s": "seq"},
            ExpressionAttributeValues={":t": {"S": trial_id}, ":after": {"N": str(after_seq)}},
            ConsistentRead=True,
        )
        return [decode_fields(LogLine, i) for i in items][:limit]

    # ---- trial metrics (in the logs table) --------------------------------------------
    def metric_series(self, trial_id: str, kind: MetricKind) -> MetricSeries | None:
        found = self.client.get_item(
            TableName=self.table(schema.LOGS), Key=_metrics_key(trial_id, kind), ConsistentRead=True
        ).get("Item")
        if found is None or METRICS_ATTRIBUTE not in found:
            return None
        return decode_fields(MetricSeries, found[METRICS_ATTRIBUTE]["M"])

    def put_metric_series(self, series: MetricSeries) -> MetricSeries:
        written = replace(series, revision=series.revision + 1)
        at = written.summary.latest_at or 0.0
        item = (
            _metrics_key(series.trial_id, series.kind)
            | {METRICS_ATTRIBUTE: {"M": encode_fields(written)}}
            | self._expiry(schema.LOGS, at)
        )
        put: dict[str, Any] = {"TableName": self.table(schema.LOGS), "Item": item}
        if series.revision == 0:
            put["ConditionExpression"] = "attribute_not_exists(#k)"
            put["ExpressionAttributeNames"] = {"#k": "trial_id"}
        else:
            put["ConditionExpression"] = "#m.#r = :expected"
            put["ExpressionAttributeNames"] = {"#m": METRICS_ATTRIBUTE, "#r": "revision"}
            put["ExpressionAttributeValues"] = {":expected": {"N": str(series.revision)}}
        try:
            self.client.put_item(**put)
        except self.client.exceptions.ConditionalCheckFailedException:
            raise ConflictError(
                f"stale metric series {series.trial_id}/{series.kind} (expected r{series.revision})"
            ) from None
        return written

    def metric_summaries(self, trial_ids: Collection[str]) -> list[MetricSummary]:
        wanted = list(dict.fromkeys(trial_ids))
        table = self.table(schema.LOGS)
        found: dict[tuple[str, str], MetricSummary] = {}
        keys = [_metrics_key(t, k) for t in wanted for k in MetricKind]
        for start in range(0, len(keys), _BATCH_GET):
            request: dict[str, Any] = {
                table: {
                    "Keys": keys[start : start + _BATCH_GET],
                    "ProjectionExpression": "#m.#s",
                    "ExpressionAttributeNames": {"#m": METRICS_ATTRIBUTE, "#s": "summary"},
                }
            }
            for attempt in range(_RETRIES + 1):
                reply = self.client.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(table, []):
                    data = item.get(METRICS_ATTRIBUTE, {}).get("M", {}).get("summary")
                    if data is not None:
                        summary = decode_fields(MetricSummary, data["M"])
                        found[(summary.trial_id, summary.kind.value)] = summary
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    break
                self._backoff(attempt, "BatchGetItem", table)
        return [found[(t, k.value)] for t in wanted for k in MetricKind if (t, k.value) in found]


METRICS_ATTRIBUTE = "series"
_METRICS_RANGE = {MetricKind.TRAINING: 0, MetricKind.VALIDATION: 1}


def _metrics_key(trial_id: str, kind: MetricKind) -> Item:
    return {
        "trial_id": {"S": f"metrics#{trial_id}"},
        "seq": {"N": str(_METRICS_RANGE[MetricKind(kind)])},
    }


R = TypeVar("R", Instance, Trial)


def _newest(records: Iterable[R]) -> list[R]:
    """One copy per id, the highest version: a lagging index can list a record that just
    changed state under both its old and its new state."""
    best: dict[str, R] = {}
    for record in records:
        if record.id not in best or record.version > best[record.id].version:
            best[record.id] = record
    return list(best.values())


def _stale(key: tuple[str, str], record: Record, stored: Item | None) -> str:
    kind = key[0].removesuffix("s")  # "instances" -> "instance"
    if stored is None:
        now = "missing" if record.version else "already exists"
    else:
        now = f"is v{stored.get('version', {}).get('N', '?')}"
    return f"{kind} {key[1]} (expected v{record.version}, {now})"
