"""Metric series: dedupe by seq, the storage bound and downsampling (first, best and latest
kept, an even spread otherwise), the compact encoding, and the best trial of an experiment."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.adapters.aws.dynamo_codec import encode_fields
from corral.domain.metrics import (
    MAX_NAME_LENGTH,
    MAX_NAMES,
    MAX_POINTS,
    BestTrial,
    IncomingPoint,
    MetricKind,
    MetricSeries,
    best_trial,
    merge,
    new_series,
    trial_best_value,
)

V = MetricKind.VALIDATION


def fresh(metric: str | None = "loss", smaller: bool = True) -> MetricSeries:
    return new_series("t1", "e1", V, metric, smaller)


def pts(values: list[float], start: int = 0, name: str = "loss") -> list[IncomingPoint]:
    return [
        IncomingPoint(seq=start + n, batches=10 * (start + n), values={name: v}, at=float(n))
        for n, v in enumerate(values)
    ]


def test_points_at_or_below_the_last_seq_are_duplicates() -> None:
    first = merge(fresh(), pts([3.0, 2.0, 1.0]))
    assert (first.accepted, first.duplicates) == (3, 0)
    again = merge(first.series, pts([3.0, 2.0, 1.0, 0.5]))  # resent, plus one new
    assert (again.accepted, again.duplicates) == (1, 3)
    assert [p.seq for p in again.series.points] == [0, 1, 2, 3]
    assert merge(again.series, pts([9.0], start=1)).series == again.series


def test_points_are_taken_in_seq_order_whatever_the_order_sent() -> None:
    merged = merge(fresh(), list(reversed(pts([3.0, 2.0, 1.0])))).series
    assert [p.seq for p in merged.points] == [0, 1, 2]
    assert merged.summary.latest == {"loss": 1.0} and merged.summary.latest_batches == 20


def test_non_finite_values_and_bad_names_are_dropped_and_counted() -> None:
    incoming = [
        IncomingPoint(0, 0, {"loss": math.nan, "acc": 0.5}, 0.0),
        IncomingPoint(1, 1, {"loss": math.inf}, 1.0),  # nothing left: not a point
        IncomingPoint(2, 2, {"x" * (MAX_NAME_LENGTH + 1): 1.0, "loss": 0.1}, 2.0),
    ]
    result = merge(fresh(), incoming)
    s = result.series
    assert (result.accepted, result.empty) == (2, 1)
    assert s.last_seq == 2  # the empty point is still not taken twice
    assert s.names == ("acc", "loss") and s.summary.rejected == 3
    assert [s.values(p) for p in s.points] == [{"acc": 0.5}, {"loss": 0.1}]
    assert s.summary.best_value == 0.1


def test_names_past_the_limit_are_dropped() -> None:
    many = {f"m{n}": float(n) for n in range(MAX_NAMES + 3)}
    s = merge(fresh(), [IncomingPoint(0, 0, many, 0.0)]).series
    assert len(s.names) == MAX_NAMES and s.summary.rejected == 3


def test_values_are_aligned_to_the_names_missing_ones_stay_missing() -> None:
    incoming = [
        IncomingPoint(0, 0, {"a": 1.0}, 0.0),
        IncomingPoint(1, 1, {"b": 2.0}, 1.0),
        IncomingPoint(2, 2, {"a": 3.0, "b": 4.0}, 2.0),
    ]
    s = merge(fresh(metric=None), incoming).series
    assert [p.values for p in s.points] == [(1.0,), (None, 2.0), (3.0, 4.0)]
    assert s.value(s.points[1], "a") is None and s.value(s.points[1], "b") == 2.0
    assert s.value(s.points[0], "b") is None and s.value(s.points[0], "zzz") is None


@pytest.mark.parametrize("smaller", [True, False])
def test_the_best_follows_the_direction_and_a_tie_keeps_the_earlier(smaller: bool) -> None:
    s = merge(fresh(smaller=smaller), pts([0.5, 0.2, 0.9, 0.2, 0.9])).series.summary
    if smaller:
        assert (s.best_value, s.best_seq, s.best_batches) == (0.2, 1, 10)
    else:
        assert (s.best_value, s.best_seq, s.best_batches) == (0.9, 2, 20)


def test_a_series_without_the_searchers_metric_has_no_best() -> None:
    s = merge(fresh(metric="loss"), pts([0.5], name="accuracy")).series.summary
    assert s.best_value is None and s.latest == {"accuracy": 0.5}
    assert trial_best_value(s, "loss") is None
    assert trial_best_value(None, "loss") is None


def test_a_long_run_is_bounded_and_keeps_first_best_latest_and_an_even_spread() -> None:
    # The best (lowest) comes at ordinal 3001, off any power-of-two stride.
    values = [1.0 + n for n in range(10_000)]
    values[3001] = -5.0
    s = fresh()
    for start in range(0, len(values), 37):  # many heartbeats, as a real run would
        s = merge(s, pts(values[start : start + 37], start=start), max_points=100).series
    ordinals = [p.ordinal for p in s.points]
    assert len(s.points) <= 100
    assert ordinals[0] == 0 and ordinals[-1] == 9_999 and 3001 in ordinals
    assert s.summary.received == 10_000 and s.summary.best_value == -5.0
    on_stride = [o for o in ordinals if o % s.stride == 0]
    assert on_stride == list(range(0, 10_000, s.stride))  # evenly spread, none missing
    assert len(s.points) > 100 // 2  # halving never leaves much less than half the bound
    assert [p.seq for p in s.points] == sorted(p.seq for p in s.points)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20), max_size=15
    ),
    cap=st.integers(min_value=4, max_value=12),
)
def test_any_sequence_of_heartbeats_stays_within_the_bound(
    batches: list[list[float]], cap: int
) -> None:
    s, seq = fresh(), 0
    finite: list[tuple[int, float]] = []
    for values in batches:
        s = merge(s, pts(values, start=seq), max_points=cap).series
        finite += [(seq + n, v) for n, v in enumerate(values) if math.isfinite(v)]
        seq += len(values)
    assert len(s.points) <= cap
    if finite:
        best = min(v for _, v in finite)
        first_best = next(q for q, v in finite if v == best)
        assert s.summary.best_value == best and s.summary.best_seq == first_best
        kept = {p.seq for p in s.points}
        assert {finite[0][0], finite[-1][0], first_best} <= kept


def test_the_worst_case_series_fits_a_dynamodb_item() -> None:
    names = {f"{n:02d}".ljust(MAX_NAME_LENGTH, "x"): 1.0 / 3 for n in range(MAX_NAMES)}
    s = fresh()
    for start in range(0, 3 * MAX_POINTS, 50):
        incoming = [
            IncomingPoint(10**15 + start + n, 10**9, names, 1.7e9 + 0.123456) for n in range(50)
        ]
        s = merge(s, incoming).series
    assert len(s.points) <= MAX_POINTS
    size = _dynamo_size({"M": encode_fields(s)})
    assert size < 300_000, size  # DynamoDB's limit is 400 KB; Firestore's 1 MiB


def _dynamo_size(av: dict[str, Any]) -> int:
    """An upper bound of DynamoDB's size of an attribute value (its documented rules, with
    every number at its 21-byte maximum and 1 byte per element of a list or map)."""
    if "S" in av:
        return len(av["S"].encode())
    if "N" in av:
        return 21
    if "L" in av:
        return 3 + sum(1 + _dynamo_size(v) for v in av["L"])
    if "M" in av:
        return 3 + sum(len(k.encode()) + 1 + _dynamo_size(v) for k, v in av["M"].items())
    return 1  # BOOL, NULL


# ---- the best trial -------------------------------------------------------------------------


def test_the_best_trial_skips_missing_and_non_finite_values_and_ties_go_first() -> None:
    candidates = [
        ("t1", None),  # the metric missing, or nothing reported yet
        ("t2", 0.3),
        ("t3", math.nan),
        ("t4", -math.inf),
        ("t5", 0.3),  # a tie with t2: the earlier trial wins
        ("t6", 0.4),
    ]
    assert best_trial("loss", True, candidates) == BestTrial("t2", "loss", 0.3)
    assert best_trial("acc", False, candidates) == BestTrial("t6", "acc", 0.4)
    assert best_trial("loss", True, [("t1", None), ("t2", math.inf)]) is None
    assert best_trial("loss", True, []) is None


def test_max_points_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="max_points must be at least 4"):
        merge(fresh(), [], max_points=3)
