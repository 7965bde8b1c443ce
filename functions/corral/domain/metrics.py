"""Trial metrics: what a trial reported (training and validation values at a batch count),
kept compactly and bounded per trial, with the best value of the searcher's metric.

A series holds one kind of metric of one trial. Its points are numbered by the agent
(``seq``, increasing per trial across runs), so a point delivered twice (a heartbeat resent
after a lost reply) is recognised and dropped: everything at or below ``last_seq`` is old.

Bounded storage: at most ``max_points`` points per series. Every accepted point gets an
ordinal (0, 1, 2, ...); the series keeps the points whose ordinal is a multiple of
``stride``, plus the latest and the best. When it grows past the bound the stride doubles
and the points off the new stride go, so a long run keeps an evenly spread curve, its first
point (ordinal 0), its best point and its latest point, whatever its length.

Compact: the value names are stored once per series (``names``); a point holds only its
values, in that order (missing trailing values: not reported at that point).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

# The rules of a point (kinds, names, finite values) are the wire protocol's: the agent
# checks a trial's lines with the same ones. Re-exported: the domain's names for them.
from corral.protocol.metrics import MAX_NAME_LENGTH, MetricKind, finite_value, valid_name

__all__ = [
    "MAX_NAMES",
    "MAX_NAME_LENGTH",
    "MAX_POINTS",
    "MIN_POINTS",
    "BestTrial",
    "IncomingPoint",
    "MergeResult",
    "MetricKind",
    "MetricPoint",
    "MetricSeries",
    "MetricSummary",
    "best_trial",
    "is_better",
    "is_finite",
    "merge",
    "new_series",
    "trial_best_value",
    "valid_name",
]

MAX_POINTS = 500  # per kind per trial: ~100 KB at most once stored (tests/unit/domain)
MAX_NAMES = 24  # distinct value names per series; values under further names are dropped
MIN_POINTS = 4  # the first, the best, the latest and one on the stride always fit


@dataclass(frozen=True)
class IncomingPoint:
    """One point as a trial reported it (parsed and numbered by the agent)."""

    seq: int
    batches: int
    values: Mapping[str, float]
    at: float


@dataclass(frozen=True)
class MetricPoint:
    seq: int
    batches: int
    at: float
    ordinal: int  # the n-th point accepted into the series (0 is the first)
    values: tuple[float | None, ...]  # aligned with ``MetricSeries.names``


@dataclass(frozen=True)
class MetricSummary:
    """What list views need without the points: the latest values and the best value of
    the searcher's metric (``metric``, fixed when the series is created)."""

    trial_id: str
    kind: MetricKind
    metric: str | None = None
    smaller_is_better: bool = True
    best_value: float | None = None
    best_batches: int | None = None
    best_seq: int | None = None
    latest: Mapping[str, float] = field(default_factory=dict)
    latest_batches: int | None = None
    latest_at: float | None = None
    received: int = 0  # points accepted in all, downsampled ones included
    rejected: int = 0  # values dropped: not finite, a bad name, or past MAX_NAMES


@dataclass(frozen=True)
class MetricSeries:
    """One kind of metric of one trial. ``revision`` is its own optimistic-concurrency
    counter: writing a series never touches the trial's ``version``."""

    trial_id: str
    kind: MetricKind
    experiment_id: str
    summary: MetricSummary
    names: tuple[str, ...] = ()
    points: tuple[MetricPoint, ...] = ()
    stride: int = 1
    last_seq: int = -1
    revision: int = 0

    def value(self, point: MetricPoint, name: str) -> float | None:
        try:
            index = self.names.index(name)
        except ValueError:
            return None
        return point.values[index] if index < len(point.values) else None

    def values(self, point: MetricPoint) -> dict[str, float]:
        return {n: v for n, v in zip(self.names, point.values, strict=False) if v is not None}


def new_series(
    trial_id: str,
    experiment_id: str,
    kind: MetricKind,
    metric: str | None = None,
    smaller_is_better: bool = True,
) -> MetricSeries:
    summary = MetricSummary(trial_id, kind, metric=metric, smaller_is_better=smaller_is_better)
    return MetricSeries(trial_id, kind, experiment_id, summary)


@dataclass(frozen=True)
class MergeResult:
    series: MetricSeries
    accepted: int
    duplicates: int
    empty: int  # points left with no usable value


def is_finite(value: object) -> bool:
    return finite_value(value) is not None


def is_better(value: float, best: float | None, smaller_is_better: bool) -> bool:
    """Strictly better: a tie keeps the earlier best."""
    if best is None:
        return True
    return value < best if smaller_is_better else value > best


def merge(
    series: MetricSeries, incoming: Iterable[IncomingPoint], max_points: int = MAX_POINTS
) -> MergeResult:
    """Add new points (seq above ``last_seq``, in seq order) and downsample to the bound."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}")
    s, summary = series, series.summary
    names, points = list(s.names), list(s.points)
    accepted = duplicates = empty = 0
    for p in sorted(incoming, key=lambda x: x.seq):
        if p.seq <= s.last_seq:
            duplicates += 1
            continue
        values: dict[str, float] = {}
        for name, value in p.values.items():
            number = finite_value(value)
            if number is None or not valid_name(name):
                summary = replace(summary, rejected=summary.rejected + 1)
                continue
            if name not in names:
                if len(names) >= MAX_NAMES:
                    summary = replace(summary, rejected=summary.rejected + 1)
                    continue
                names.append(name)
            values[name] = number
        s = replace(s, last_seq=p.seq)
        if not values:
            empty += 1
            continue
        point = MetricPoint(
            seq=p.seq,
            batches=max(0, int(p.batches)),
            at=p.at,
            ordinal=summary.received,
            values=_aligned(names, values),
        )
        summary = _summarise(summary, point, values)
        if points and not _keep(points[-1], s.stride, summary):
            points.pop()  # the previous latest is off the stride and not the best
        points.append(point)
        accepted += 1
    stride = s.stride
    while len(points) > max_points:
        stride *= 2
        points = [p for p in points if _keep(p, stride, summary)]
    merged = replace(s, names=tuple(names), points=tuple(points), stride=stride, summary=summary)
    return MergeResult(merged, accepted, duplicates, empty)


def _aligned(names: list[str], values: Mapping[str, float]) -> tuple[float | None, ...]:
    row = [values.get(n) for n in names]
    while row and row[-1] is None:
        row.pop()
    return tuple(row)


def _summarise(
    summary: MetricSummary, point: MetricPoint, values: dict[str, float]
) -> MetricSummary:
    summary = replace(
        summary,
        latest=values,
        latest_batches=point.batches,
        latest_at=point.at,
        received=summary.received + 1,
    )
    value = values.get(summary.metric) if summary.metric else None
    if value is not None and is_better(value, summary.best_value, summary.smaller_is_better):
        summary = replace(summary, best_value=value, best_batches=point.batches, best_seq=point.seq)
    return summary


def _keep(point: MetricPoint, stride: int, summary: MetricSummary) -> bool:
    """On the stride (the first point always is), the best, or the latest."""
    return (
        point.ordinal % stride == 0
        or point.seq == summary.best_seq
        or point.ordinal == summary.received - 1
    )


# ---- the best trial ----------------------------------------------------------------------------
@dataclass(frozen=True)
class BestTrial:
    trial_id: str
    metric: str
    value: float


def best_trial(
    metric: str, smaller_is_better: bool, candidates: Iterable[tuple[str, float | None]]
) -> BestTrial | None:
    """The trial with the best value of ``metric`` among ``(trial_id, value)`` in the
    experiment's trial order. Trials without a value (the metric missing, nothing reported
    yet) and values that are not finite are left out; a tie goes to the earlier trial."""
    best: BestTrial | None = None
    for trial_id, value in candidates:
        if value is None or not is_finite(value):
            continue
        if is_better(value, None if best is None else best.value, smaller_is_better):
            best = BestTrial(trial_id, metric, float(value))
    return best


def trial_best_value(summary: MetricSummary | None, metric: str | None) -> float | None:
    """The trial's best value of ``metric`` (the searcher's) from its validation summary."""
    if summary is None or metric is None or summary.metric != metric:
        return None
    return summary.best_value
