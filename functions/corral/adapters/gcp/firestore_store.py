"""FirestoreStore: the Store port on Firestore in Native mode (design notes: docs/gcp.md).

- One collection per record kind (``<prefix>instances``, ``trials``, ``experiments``,
  ``pools``) keyed by the record's id, plus ``heartbeats``, ``events`` and ``logs``.
- ``commit`` is one atomic Firestore ``Commit`` conditioned on what it just read: it reads
  every named document (one ``BatchGetDocuments``), checks each stored ``version`` against
  the record's, then writes them all in one batch where each write carries a precondition
  (``exists=false`` for version 0, else ``update_time`` = the time it read). Firestore
  applies a commit's writes all or none, so this is a transaction in the optimistic style
  DynamoDB's conditional writes have: a racing commit fails its precondition and becomes
  ``ConflictError`` naming the stale records. Why not ``client.transaction()``: server-side
  transactions take locks on what they read, so N functions racing on one record queue
  behind each other and get aborted; on the emulator an 8-way race took up to 30 s and
  sometimes every racer lost (the client's retries ran out). Preconditions never wait:
  exactly one racer wins, at once, in 2 RPCs instead of 3.
- Queries are ``where`` filters on indexed fields (``state`` with ``in``, ``pool``,
  ``experiment_id``, ``cloud_id``), never a scan; results are sorted here like the other
  stores (instances by ``(created_at, id)``, trials in scheduling order), so no query needs
  an ``order_by`` that would demand a composite index. The few that do order on the server
  (events of one pool) have their index in ``infra/gcp/firestore.indexes.json``.
- Heartbeats live in their own collection: writing one never touches a record's version.
- Events are keyed ``<sortable at>#<process><counter>`` (unique, ordered, ties in append
  order per process); log lines sit under their trial (``logs/<trial>/lines/<seq>``), so a
  resent line overwrites itself and a page is a range on ``seq`` within one trial.
- Trial metric series are documents of ``<prefix>metrics`` keyed ``<trial id>#<kind>``,
  written with the same preconditions as ``commit`` but on their own ``revision``;
  summaries are read with a field mask (``summary`` only), so list views skip the points.
- Observations carry ``expire_at`` for a Firestore TTL policy (retention in days; None
  keeps them forever). TTL deletes late and is never relied on for correctness.

``google-cloud-firestore`` is imported on first use, so importing this module is free.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from corral.adapters.gcp.firestore_codec import (
    decode_fields,
    decode_value,
    document_id,
    encode_fields,
)
from corral.adapters.record_types import sortable_float
from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.metrics import MetricKind, MetricSeries, MetricSummary
from corral.domain.records import Event, Experiment, Heartbeat, LogLine, PoolState
from corral.domain.trial import Trial, TrialState, sort_key
from corral.ports.store import Record, RecordKinds, commit_keys

INSTANCES, TRIALS, EXPERIMENTS, POOLS = "instances", "trials", "experiments", "pools"
HEARTBEATS, EVENTS, LOGS, LINES = "heartbeats", "events", "logs", "lines"
METRICS = "metrics"
# Firestore takes 500 writes per commit, but every Store holds the smallest limit of any
# backend (DynamoDB: 100) so that code which works on one works on all.
MAX_WRITES = 100
IN_LIMIT = 30  # values in one ``in`` filter
EXPIRE_AT = "expire_at"  # the TTL policy's field
EVENT_KEY = "key"
LISTED_AT = "listed_at"  # experiments: "<sortable submitted_at>#<id>", newest first
_PROCESS = secrets.token_hex(4)
_ARRIVAL = itertools.count()
D = TypeVar("D")


KINDS: RecordKinds = {
    Instance: INSTANCES,
    Trial: TRIALS,
    Experiment: EXPERIMENTS,
    PoolState: POOLS,
}


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class FirestoreStore:
    """Implements ``corral.ports.store.Store``.

    ``client``: a ``google.cloud.firestore.Client`` (created on first use when omitted; it
    honours ``FIRESTORE_EMULATOR_HOST``). ``prefix``: collection-name prefix, so several
    deployments can share one database. Retention (days) sets ``expire_at`` on observations.
    """

    def __init__(
        self,
        client: Any | None = None,
        *,
        prefix: str = "corral-",
        project: str | None = None,
        database: str | None = None,
        heartbeat_retention_days: float | None = 7,
        event_retention_days: float | None = 90,
        log_retention_days: float | None = 90,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._project = project
        self._database = database
        self._ttl_days = {
            HEARTBEATS: heartbeat_retention_days,
            EVENTS: event_retention_days,
            LOGS: log_retention_days,
        }

    @property
    def client(self) -> Any:
        if self._client is None:
            from google.cloud import firestore  # lazily: ~0.3 s of imports

            self._client = firestore.Client(project=self._project, database=self._database)
        return self._client

    def collection(self, kind: str) -> Any:
        return self.client.collection(self._prefix + kind)

    def _ref(self, kind: str, key: str) -> Any:
        return self.collection(kind).document(document_id(key))

    # ---- versioned records ----------------------------------------------------------
    def commit(self, records: Sequence[Record]) -> list[Record]:
        keys = commit_keys(records, KINDS, MAX_WRITES, f"at most {MAX_WRITES}")
        if not records:
            return []
        from google.api_core import exceptions

        written = [replace(r, version=r.version + 1) for r in records]
        refs = [self._ref(kind, key) for kind, key in keys]
        snapshots = self._read(refs)
        _check_versions(keys, records, snapshots)
        batch = self.client.batch()
        for ref, snapshot, record in zip(refs, snapshots, written, strict=True):
            if snapshot is None:
                batch.create(ref, _document(record))  # precondition: does not exist
            else:  # precondition: unchanged since we read it (hence the same version)
                option = self.client.write_option(last_update_time=snapshot.update_time)
                batch.update(ref, _document(record), option=option)
        try:
            batch.commit()  # one atomic Commit: every precondition holds, or nothing lands
        except (exceptions.FailedPrecondition, exceptions.AlreadyExists, exceptions.NotFound):
            # Someone committed between our read and our write: name who is stale now.
            _check_versions(keys, records, self._read(refs))
            names = ", ".join(f"{k[0].removesuffix('s')} {k[1]}" for k in keys)
            raise ConflictError(f"stale record(s): one of {names} changed meanwhile") from None
        return written

    def _read(self, refs: Sequence[Any]) -> list[Any | None]:
        """The snapshots of ``refs`` in their order (None where no document exists)."""
        found = {s.reference.path: s for s in self.client.get_all(refs) if s.exists}
        return [found.get(ref.path) for ref in refs]

    def _get(self, kind: str, key: str, cls: type[D]) -> D | None:
        snapshot = self._ref(kind, key).get()
        return decode_fields(cls, snapshot.to_dict()) if snapshot.exists else None

    def get_instance(self, instance_id: str) -> Instance | None:
        return self._get(INSTANCES, instance_id, Instance)

    def get_trial(self, trial_id: str) -> Trial | None:
        return self._get(TRIALS, trial_id, Trial)

    def get_experiment(self, experiment_id: str) -> Experiment | None:
        return self._get(EXPERIMENTS, experiment_id, Experiment)

    def pool_state(self, pool: str) -> PoolState:
        return self._get(POOLS, pool, PoolState) or PoolState(pool)

    def instances(
        self,
        *,
        pool: str | None = None,
        states: Collection[InstanceState] | None = None,
    ) -> list[Instance]:
        docs = self._where(INSTANCES, {"pool": pool}, states)
        found = [decode_fields(Instance, d) for d in docs]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    def trials(
        self,
        *,
        states: Collection[TrialState] | None = None,
        experiment_id: str | None = None,
        pool: str | None = None,
    ) -> list[Trial]:
        docs = self._where(TRIALS, {"pool": pool, "experiment_id": experiment_id}, states)
        return sorted((decode_fields(Trial, d) for d in docs), key=sort_key)

    def _where(
        self, kind: str, equal: dict[str, str | None], states: Collection[Any] | None
    ) -> Iterator[dict[str, Any]]:
        """Documents matching every given equality and, if given, one of ``states``.

        Equality and ``in`` filters need no composite index (Firestore merges single-field
        indexes); more states than one ``in`` takes are split over several queries."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.collection(kind)
        for field, value in equal.items():
            if value is not None:
                query = query.where(filter=FieldFilter(field, "==", value))
        if states is None:
            yield from (s.to_dict() for s in query.stream())
            return
        wanted = sorted({s.value for s in states})
        for chunk in _chunks(wanted, IN_LIMIT):
            filtered = query.where(filter=FieldFilter("state", "in", list(chunk)))
            yield from (s.to_dict() for s in filtered.stream())

    def instance_by_cloud_id(self, cloud_id: str) -> Instance | None:
        docs = self._where(INSTANCES, {"cloud_id": cloud_id}, None)
        found = [decode_fields(Instance, d) for d in docs]
        return max(found, key=lambda r: (r.created_at, r.id), default=None)

    def experiments(self, *, limit: int = 100) -> list[Experiment]:
        if limit <= 0:
            return []
        query = self.collection(EXPERIMENTS).order_by(LISTED_AT, direction="DESCENDING")
        return [decode_fields(Experiment, s.to_dict()) for s in query.limit(limit).stream()]

    # ---- observations (no versions) -------------------------------------------------
    def _expiry(self, kind: str, at: float) -> dict[str, Any]:
        days = self._ttl_days[kind]
        if days is None:
            return {}
        return {EXPIRE_AT: datetime.fromtimestamp(at, UTC) + timedelta(days=days)}

    def put_heartbeat(self, heartbeat: Heartbeat) -> None:
        data = encode_fields(heartbeat) | self._expiry(HEARTBEATS, heartbeat.at)
        self._ref(HEARTBEATS, heartbeat.instance_id).set(data)

    def heartbeats(self, instance_ids: Collection[str]) -> dict[str, Heartbeat]:
        wanted = list(dict.fromkeys(instance_ids))
        found: dict[str, Heartbeat] = {}
        for chunk in _chunks(wanted, 100):
            refs = [self._ref(HEARTBEATS, i) for i in chunk]
            for snapshot in self.client.get_all(refs):
                if snapshot.exists:
                    beat = decode_fields(Heartbeat, snapshot.to_dict())
                    found[beat.instance_id] = beat
        return {i: found[i] for i in wanted if i in found}

    def _write_all(self, writes: Iterable[tuple[Any, dict[str, Any]]]) -> None:
        """Unconditional sets in batches of 500 (each batch is atomic; the whole need not be:
        observations are idempotent to resend)."""
        for chunk in _chunks(list(writes), MAX_WRITES):
            batch = self.client.batch()
            for ref, data in chunk:
                batch.set(ref, data)
            batch.commit()

    def append_events(self, events: Sequence[Event]) -> None:
        writes = []
        for event in events:
            key = f"{sortable_float(event.at)}#{_PROCESS}{next(_ARRIVAL):012x}"
            data = encode_fields(event) | {EVENT_KEY: key} | self._expiry(EVENTS, event.at)
            writes.append((self.collection(EVENTS).document(key), data))
        self._write_all(writes)

    def events(
        self, *, since: float = 0.0, limit: int = 200, pool: str | None = None
    ) -> list[Event]:
        """Events with ``at > since``, oldest first; ties in append order per process."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        if limit <= 0:
            return []
        # Every key of an event at exactly ``since`` is "<since>#...", below "<since>$".
        query = self.collection(EVENTS)
        if pool is not None:  # the one composite index: (pool, key)
            query = query.where(filter=FieldFilter("pool", "==", pool))
        query = query.where(filter=FieldFilter(EVENT_KEY, ">", f"{sortable_float(since)}$"))
        query = query.order_by(EVENT_KEY).limit(limit)
        return [decode_fields(Event, s.to_dict()) for s in query.stream()]

    def _lines(self, trial_id: str) -> Any:
        return self.collection(LOGS).document(document_id(trial_id)).collection(LINES)

    def append_logs(self, lines: Sequence[LogLine]) -> None:
        # Resent lines (same trial and seq) overwrite themselves with the same content.
        unique = {(line.trial_id, line.seq): line for line in reversed(lines)}
        self._write_all(
            (
                self._lines(line.trial_id).document(f"{line.seq:020d}"),
                encode_fields(line) | self._expiry(LOGS, line.at),
            )
            for line in reversed(unique.values())
        )

    def logs(self, trial_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[LogLine]:
        from google.cloud.firestore_v1.base_query import FieldFilter

        if limit <= 0:
            return []
        query = self._lines(trial_id).where(filter=FieldFilter("seq", ">", after_seq))
        query = query.order_by("seq").limit(limit)
        return [decode_fields(LogLine, s.to_dict()) for s in query.stream()]

    # ---- trial metrics --------------------------------------------------------------
    def _metrics_ref(self, trial_id: str, kind: MetricKind) -> Any:
        return self._ref(METRICS, f"{trial_id}#{MetricKind(kind).value}")

    def metric_series(self, trial_id: str, kind: MetricKind) -> MetricSeries | None:
        snapshot = self._metrics_ref(trial_id, kind).get()
        return decode_fields(MetricSeries, snapshot.to_dict()) if snapshot.exists else None

    def put_metric_series(self, series: MetricSeries) -> MetricSeries:
        from google.api_core import exceptions

        ref = self._metrics_ref(series.trial_id, series.kind)
        (snapshot,) = self._read([ref])
        stored = 0 if snapshot is None else int(snapshot.get("revision"))
        stale = ConflictError(
            f"stale metric series {series.trial_id}/{series.kind} "
            f"(expected r{series.revision}, is r{stored})"
        )
        if stored != series.revision:
            raise stale
        written = replace(series, revision=series.revision + 1)
        data = encode_fields(written) | self._expiry(LOGS, written.summary.latest_at or 0.0)
        batch = self.client.batch()
        if snapshot is None:
            batch.create(ref, data)
        else:
            option = self.client.write_option(last_update_time=snapshot.update_time)
            batch.update(ref, data, option=option)
        try:
            batch.commit()
        except (exceptions.FailedPrecondition, exceptions.AlreadyExists, exceptions.NotFound):
            raise stale from None
        return written

    def metric_summaries(self, trial_ids: Collection[str]) -> list[MetricSummary]:
        wanted = list(dict.fromkeys(trial_ids))
        refs = [self._metrics_ref(t, k) for t in wanted for k in MetricKind]
        found: dict[tuple[str, str], MetricSummary] = {}
        for chunk in _chunks(refs, 100):
            for snapshot in self.client.get_all(chunk, field_paths=["summary"]):
                data = snapshot.to_dict() if snapshot.exists else None
                if data and data.get("summary") is not None:
                    summary = decode_value(data["summary"], MetricSummary)
                    found[(summary.trial_id, summary.kind.value)] = summary
        return [found[(t, k.value)] for t in wanted for k in MetricKind if (t, k.value) in found]


def _check_versions(
    keys: Sequence[tuple[str, str]], records: Sequence[Record], snapshots: Sequence[Any | None]
) -> None:
    stale = []
    for (kind, key), record, snapshot in zip(keys, records, snapshots, strict=True):
        version = 0 if snapshot is None else int(snapshot.get("version"))
        if version != record.version:
            if snapshot is None:
                now = "missing"
            else:
                now = "already exists" if not record.version else f"is v{version}"
            stale.append(f"{kind.removesuffix('s')} {key} (expected v{record.version}, {now})")
    if stale:
        raise ConflictError(f"stale record(s): {'; '.join(stale)}")


def _document(record: Record) -> dict[str, Any]:
    data = encode_fields(record)
    if isinstance(record, Experiment):
        data[LISTED_AT] = f"{sortable_float(record.submitted_at)}#{record.id}"
    return data


__all__ = ["FirestoreStore"]
