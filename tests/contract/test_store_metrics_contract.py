"""The Store contract for trial metric series, over every store adapter (memory, DynamoDB on
moto, Firestore on Google's emulator): their own revision, never a record's version."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from corral.domain.errors import ConflictError
from corral.domain.metrics import (
    IncomingPoint,
    MetricKind,
    MetricSeries,
    merge,
    new_series,
)
from corral.domain.records import LogLine
from corral.domain.trial import new_trial
from corral.ports.store import Store

T0 = 1_700_000_000.0
V, TR = MetricKind.VALIDATION, MetricKind.TRAINING


def series(trial_id: str, kind: MetricKind = V, points: int = 3, start: int = 0) -> MetricSeries:
    fresh = new_series(trial_id, "e1", kind, metric="loss", smaller_is_better=True)
    incoming = [
        IncomingPoint(
            seq=start + n,
            batches=100 * (n + 1),
            values={"loss": 1.0 / (n + 1), "acc": 0.5 + n / 100},
            at=T0 + n,
        )
        for n in range(points)
    ]
    return merge(fresh, incoming).series


def test_a_series_round_trips_with_its_points_and_summary(store: Store) -> None:
    assert store.metric_series("t1", V) is None
    sent = series("t1")
    stored = store.put_metric_series(sent)
    assert stored.revision == 1
    assert store.metric_series("t1", V) == stored
    assert stored.points == sent.points and stored.names == ("loss", "acc")
    assert stored.summary.best_value == pytest.approx(1 / 3)
    assert dict(stored.summary.latest) == {"loss": pytest.approx(1 / 3), "acc": 0.52}
    assert store.metric_series("t1", TR) is None  # kinds are apart


def test_values_keep_their_type_and_missing_values(store: Store) -> None:
    fresh = new_series("t1", "e1", V, metric=None)
    points = [
        IncomingPoint(0, 0, {"a": 5.0}, T0),
        IncomingPoint(1, 7, {"b": -0.0, "a": 1e-300}, T0 + 0.5),
    ]
    stored = store.put_metric_series(merge(fresh, points).series)
    read = store.metric_series("t1", V)
    assert read == stored
    assert read is not None and read.points[0].values == (5.0,)
    assert isinstance(read.points[0].values[0], float)
    assert read.points[1].values == (1e-300, -0.0)
    negative_zero = read.points[1].values[1]
    assert negative_zero is not None and math.copysign(1.0, negative_zero) == -1.0
    assert read.summary.metric is None and read.summary.best_value is None


def test_a_stale_revision_is_refused_and_changes_nothing(store: Store) -> None:
    first = store.put_metric_series(series("t1", points=2))
    with pytest.raises(ConflictError):
        store.put_metric_series(series("t1", points=3))  # revision 0: it exists already
    grown = merge(first, [IncomingPoint(10, 999, {"loss": 0.01}, T0 + 10)]).series
    second = store.put_metric_series(grown)
    assert second.revision == 2
    with pytest.raises(ConflictError):
        store.put_metric_series(grown)  # revision 1 again: a lost race
    assert store.metric_series("t1", V) == second


def test_metrics_never_bump_a_records_version(store: Store) -> None:
    (stored,) = store.commit([new_trial("t1", "e1", "gpu", 1, T0)])
    store.put_metric_series(series("t1"))
    trial = store.get_trial("t1")
    assert trial is not None and trial.version == stored.version
    (again,) = store.commit([replace(stored, priority=7)])  # its version still holds
    assert again.version == stored.version + 1


def test_metrics_and_logs_of_a_trial_do_not_mix(store: Store) -> None:
    store.append_logs([LogLine("t1", s, T0, f"l{s}") for s in range(3)])
    store.put_metric_series(series("t1"))
    store.put_metric_series(series("t1", TR))
    assert [line.seq for line in store.logs("t1")] == [0, 1, 2]
    assert [line.seq for line in store.logs("t1", after_seq=-1, limit=10)] == [0, 1, 2]


def test_summaries_in_trial_then_kind_order_without_points(store: Store) -> None:
    for trial_id, kinds in (("t1", (V,)), ("t2", (TR, V)), ("t3", (TR,))):
        for kind in kinds:
            store.put_metric_series(series(trial_id, kind))
    found = store.metric_summaries(["t3", "t1", "t-none", "t2", "t1"])
    assert [(s.trial_id, s.kind) for s in found] == [
        ("t3", TR),
        ("t1", V),
        ("t2", TR),
        ("t2", V),
    ]
    assert found[1] == series("t1").summary
    assert store.metric_summaries([]) == []


def test_summaries_of_many_trials_cross_batch_limits(store: Store) -> None:
    ids = [f"t{n:03d}" for n in range(60)]  # 120 keys: more than one BatchGetItem
    for trial_id in ids:
        store.put_metric_series(series(trial_id, points=1))
    assert [s.trial_id for s in store.metric_summaries(ids)] == ids
