"""The Store port: versioned records, all-or-nothing commits, and unversioned observations.

Contract (held by every adapter, checked by tests/contract):
- Every record carries ``version``. ``commit`` writes each record only if the stored version
  equals the record's ``version`` (0 means: must not exist yet), stores it with version + 1,
  and returns the stored copies. Either every write in one commit lands or none does
  (``ConflictError``).
- Heartbeats, events and log lines are appended or overwritten without touching versions.
- Trial metric series carry their own ``revision`` (``put_metric_series`` writes one only if
  the stored revision equals it, 0 meaning absent, and stores revision + 1): writing metrics
  never bumps the version of a trial, instance or experiment, so it never makes the
  scheduler's conditional writes lose a race.
- Reads by id (``get_*``) return what the last successful commit wrote. Listings (by state,
  pool, experiment, cloud id) may lag a commit on stores whose indexes are eventually
  consistent (DynamoDB GSIs, Firestore queries): a record read from a listing may be stale,
  which costs at most a ConflictError on the next conditional write, never a lost update.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol, TypeVar

from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.metrics import MetricKind, MetricSeries, MetricSummary
from corral.domain.records import Event, Experiment, Heartbeat, LogLine, PoolState
from corral.domain.trial import Trial, TrialState

Record = Instance | Trial | Experiment | PoolState
# A store's name (table, collection) for each kind of record.
RecordKinds = Mapping[type[Record], str]


def record_key(record: Record, kinds: RecordKinds) -> tuple[str, str]:
    """(kind, key): what makes two records in one commit the same record. Records are keyed by
    id, a pool's state by the pool's name."""
    for record_type, kind in kinds.items():
        if isinstance(record, record_type):
            return kind, record.pool if isinstance(record, PoolState) else record.id
    raise TypeError(f"not a storable record: {type(record).__name__}")


def commit_keys(
    records: Sequence[Record], kinds: RecordKinds, most: int, limit: str
) -> list[tuple[str, str]]:
    """The records' keys, after the checks every store makes before a commit: no record named
    twice, and at most ``most`` records (``limit`` says whose limit that is)."""
    keys = [record_key(r, kinds) for r in records]
    if len(set(keys)) != len(keys):
        dupes = sorted({f"{k[0]} {k[1]}" for k in keys if keys.count(k) > 1})
        raise ValueError(f"one commit names the same record twice: {', '.join(dupes)}")
    if len(records) > most:
        raise ValueError(f"{len(records)} records in one commit; {limit}")
    return keys


class Store(Protocol):
    # ---- versioned records ----------------------------------------------------------
    def commit(self, records: Sequence[Record]) -> list[Record]:
        """Conditionally write all records at once; raise ConflictError if any is stale."""
        ...

    def get_instance(self, instance_id: str) -> Instance | None: ...

    def instances(
        self,
        *,
        pool: str | None = None,
        states: Collection[InstanceState] | None = None,
    ) -> list[Instance]: ...

    def instance_by_cloud_id(self, cloud_id: str) -> Instance | None: ...

    def get_trial(self, trial_id: str) -> Trial | None: ...

    def trials(
        self,
        *,
        states: Collection[TrialState] | None = None,
        experiment_id: str | None = None,
        pool: str | None = None,
    ) -> list[Trial]: ...

    def get_experiment(self, experiment_id: str) -> Experiment | None: ...

    def experiments(self, *, limit: int = 100) -> list[Experiment]: ...

    def pool_state(self, pool: str) -> PoolState:
        """The stored state, or a fresh ``PoolState(pool)`` with version 0."""
        ...

    # ---- observations (no versions) -------------------------------------------------
    def put_heartbeat(self, heartbeat: Heartbeat) -> None: ...

    def heartbeats(self, instance_ids: Collection[str]) -> dict[str, Heartbeat]: ...

    def append_events(self, events: Sequence[Event]) -> None: ...

    def events(
        self, *, since: float = 0.0, limit: int = 200, pool: str | None = None
    ) -> list[Event]: ...

    def append_logs(self, lines: Sequence[LogLine]) -> None: ...

    def logs(self, trial_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[LogLine]: ...

    # ---- trial metrics (their own revision, never a record's version) ------------------
    def metric_series(self, trial_id: str, kind: MetricKind) -> MetricSeries | None:
        """The stored series of one kind of one trial, read consistently."""
        ...

    def put_metric_series(self, series: MetricSeries) -> MetricSeries:
        """Write ``series`` if the stored revision equals ``series.revision`` (0: none is
        stored); return the stored copy (revision + 1). ``ConflictError`` otherwise."""
        ...

    def metric_summaries(self, trial_ids: Collection[str]) -> list[MetricSummary]:
        """The summaries (no points) of every stored series of these trials, in the order
        of ``trial_ids`` then kind; trials without metrics are left out."""
        ...


R = TypeVar("R", Instance, Trial, Experiment, PoolState)


def commit_one(store: Store, record: R) -> R:
    """Commit one record and get the stored copy back with its own type."""
    (stored,) = store.commit([record])
    if not isinstance(stored, type(record)):
        raise TypeError(f"store returned {type(stored).__name__} for {type(record).__name__}")
    return stored


T = TypeVar("T")


def retry_on_conflict(step: Callable[[], T], attempts: int = 3) -> T:
    """Run ``step`` (read, decide, conditional commit) again each time it loses a race to
    another writer, ``attempts`` times in all; the last ``ConflictError`` propagates for the
    caller to decide what losing means. Every step re-reads what it decides on, so a retry
    never commits a decision made on records that changed."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for _ in range(attempts - 1):
        try:
            return step()
        except ConflictError:
            continue
    return step()
