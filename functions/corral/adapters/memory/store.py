"""InMemoryStore: the Store port in one process, for tests, the simulator and the local stack.

It holds the same contract as the DynamoDB and Firestore stores (tests/contract checks all of
them with one suite), so a service that passes against it behaves the same in the cloud:
conditional writes on ``version``, all-or-nothing commits, unversioned observations.

Everything sits behind one lock: the local stack runs several pollers in threads, and a
single lock makes every commit trivially atomic. Secondary indexes (see ``index.py``) keep
the hot queries (``instances(pool=, states=)``, ``trials(states=)``) from scanning every
record when the simulator replays months of jobs. Query results come in a deterministic
order (the port promises none): creation order, or the order records entered the filtered
pool / state, so simulator runs are reproducible whatever the hash seed.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Collection, Sequence
from dataclasses import replace

from corral.adapters.memory.index import Index, select
from corral.adapters.memory.logs import EventLog, LogBook
from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.metrics import MetricKind, MetricSeries, MetricSummary
from corral.domain.records import Event, Experiment, Heartbeat, LogLine, PoolState
from corral.domain.trial import Trial, TrialState
from corral.ports.store import Record, RecordKinds, commit_keys

Key = tuple[str, str]


KINDS: RecordKinds = {
    Instance: "instance",
    Trial: "trial",
    Experiment: "experiment",
    PoolState: "pool",
}


def _values(states: Collection[InstanceState | TrialState]) -> list[str]:
    return [s.value for s in states]


# The largest all-or-nothing write a real store takes (DynamoDB TransactWriteItems).
MAX_COMMIT = 100


class InMemoryStore:
    """Implements ``corral.ports.store.Store``."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._instances: dict[str, Instance] = {}
        self._instances_by_pool = Index()
        self._instances_by_state = Index()
        self._instance_by_cloud: dict[str, str] = {}
        self._trials: dict[str, Trial] = {}
        self._trials_by_state = Index()
        self._trials_by_experiment = Index()
        self._trials_by_pool = Index()
        self._experiments: dict[str, Experiment] = {}
        self._pools: dict[str, PoolState] = {}
        self._heartbeats: dict[str, Heartbeat] = {}
        self._events = EventLog()
        self._logs = LogBook()
        self._metrics: dict[tuple[str, MetricKind], MetricSeries] = {}

    # ---- versioned records ----------------------------------------------------------
    def commit(self, records: Sequence[Record]) -> list[Record]:
        """Write every record whose ``version`` matches the stored one, or none of them.

        Raises ``ValueError`` if one key appears twice or for more than ``MAX_COMMIT``
        records (DynamoDB refuses both, so the fake must too, or code that only the fake
        runs at scale would pass its tests) and ``ConflictError`` naming every stale record.
        """
        keys = commit_keys(records, KINDS, MAX_COMMIT, f"at most {MAX_COMMIT}")
        with self._lock:
            stale = []
            for key, record in zip(keys, records, strict=True):
                stored = self._stored_version(key)
                if stored != record.version:
                    stale.append(f"{key[0]} {key[1]} (expected v{record.version}, is v{stored})")
            if stale:
                raise ConflictError(f"stale record(s): {'; '.join(stale)}")
            written: list[Record] = []
            for record in records:
                new = replace(record, version=record.version + 1)
                self._write(new)
                written.append(new)
            return written

    def _stored_version(self, key: Key) -> int:
        kind, ident = key
        current: Record | None
        if kind == "instance":
            current = self._instances.get(ident)
        elif kind == "trial":
            current = self._trials.get(ident)
        elif kind == "experiment":
            current = self._experiments.get(ident)
        else:
            current = self._pools.get(ident)
        return 0 if current is None else current.version

    def _write(self, record: Record) -> None:
        if isinstance(record, Instance):
            self._write_instance(record)
        elif isinstance(record, Trial):
            self._write_trial(record)
        elif isinstance(record, Experiment):
            self._experiments[record.id] = record
        else:
            self._pools[record.pool] = record

    def _write_instance(self, new: Instance) -> None:
        old = self._instances.get(new.id)
        self._instances[new.id] = new
        self._instances_by_pool.move(new.id, None if old is None else old.pool, new.pool)
        self._instances_by_state.move(
            new.id, None if old is None else old.state.value, new.state.value
        )
        old_cloud_id = None if old is None else old.cloud_id
        # The cloud id changed: drop the old mapping, unless another record has claimed it.
        if (
            old_cloud_id is not None
            and old_cloud_id != new.cloud_id
            and self._instance_by_cloud.get(old_cloud_id) == new.id
        ):
            del self._instance_by_cloud[old_cloud_id]
        if new.cloud_id is not None:
            self._instance_by_cloud[new.cloud_id] = new.id

    def _write_trial(self, new: Trial) -> None:
        old = self._trials.get(new.id)
        self._trials[new.id] = new
        self._trials_by_state.move(
            new.id, None if old is None else old.state.value, new.state.value
        )
        self._trials_by_experiment.move(
            new.id, None if old is None else old.experiment_id, new.experiment_id
        )
        self._trials_by_pool.move(new.id, None if old is None else old.pool, new.pool)

    def get_instance(self, instance_id: str) -> Instance | None:
        with self._lock:
            return self._instances.get(instance_id)

    def instances(
        self,
        *,
        pool: str | None = None,
        states: Collection[InstanceState] | None = None,
    ) -> list[Instance]:
        with self._lock:
            ids = select(
                [
                    self._instances_by_pool.hits(None if pool is None else [pool]),
                    self._instances_by_state.hits(None if states is None else _values(states)),
                ]
            )
            if ids is None:
                return list(self._instances.values())
            return [self._instances[i] for i in ids]

    def instance_by_cloud_id(self, cloud_id: str) -> Instance | None:
        with self._lock:
            record_id = self._instance_by_cloud.get(cloud_id)
            return None if record_id is None else self._instances[record_id]

    def get_trial(self, trial_id: str) -> Trial | None:
        with self._lock:
            return self._trials.get(trial_id)

    def trials(
        self,
        *,
        states: Collection[TrialState] | None = None,
        experiment_id: str | None = None,
        pool: str | None = None,
    ) -> list[Trial]:
        with self._lock:
            ids = select(
                [
                    self._trials_by_state.hits(None if states is None else _values(states)),
                    self._trials_by_experiment.hits(
                        None if experiment_id is None else [experiment_id]
                    ),
                    self._trials_by_pool.hits(None if pool is None else [pool]),
                ]
            )
            if ids is None:
                return list(self._trials.values())
            return [self._trials[i] for i in ids]

    def get_experiment(self, experiment_id: str) -> Experiment | None:
        with self._lock:
            return self._experiments.get(experiment_id)

    def experiments(self, *, limit: int = 100) -> list[Experiment]:
        """Newest first (by ``submitted_at``, then id, both descending)."""
        with self._lock:
            return heapq.nlargest(
                max(limit, 0), self._experiments.values(), key=lambda e: (e.submitted_at, e.id)
            )

    def pool_state(self, pool: str) -> PoolState:
        with self._lock:
            stored = self._pools.get(pool)
        return PoolState(pool) if stored is None else stored

    # ---- observations (no versions) -------------------------------------------------
    def put_heartbeat(self, heartbeat: Heartbeat) -> None:
        with self._lock:
            self._heartbeats[heartbeat.instance_id] = heartbeat

    def heartbeats(self, instance_ids: Collection[str]) -> dict[str, Heartbeat]:
        with self._lock:
            return {i: self._heartbeats[i] for i in instance_ids if i in self._heartbeats}

    def append_events(self, events: Sequence[Event]) -> None:
        with self._lock:
            for event in events:
                self._events.append(event)

    def events(
        self, *, since: float = 0.0, limit: int = 200, pool: str | None = None
    ) -> list[Event]:
        """Events with ``at > since``, oldest first (ties in the order they were appended)."""
        with self._lock:
            return self._events.after(since, limit, pool)

    def append_logs(self, lines: Sequence[LogLine]) -> None:
        with self._lock:
            for line in lines:
                self._logs.add(line)

    def logs(self, trial_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[LogLine]:
        with self._lock:
            return self._logs.page(trial_id, after_seq, limit)

    # ---- trial metrics ----------------------------------------------------------------
    def metric_series(self, trial_id: str, kind: MetricKind) -> MetricSeries | None:
        with self._lock:
            return self._metrics.get((trial_id, MetricKind(kind)))

    def put_metric_series(self, series: MetricSeries) -> MetricSeries:
        key = (series.trial_id, MetricKind(series.kind))
        with self._lock:
            stored = self._metrics.get(key)
            revision = 0 if stored is None else stored.revision
            if revision != series.revision:
                raise ConflictError(
                    f"stale metric series {series.trial_id}/{series.kind} "
                    f"(expected r{series.revision}, is r{revision})"
                )
            written = replace(series, revision=series.revision + 1)
            self._metrics[key] = written
            return written

    def metric_summaries(self, trial_ids: Collection[str]) -> list[MetricSummary]:
        with self._lock:
            return [
                found.summary
                for trial_id in dict.fromkeys(trial_ids)
                for kind in MetricKind
                if (found := self._metrics.get((trial_id, kind))) is not None
            ]
