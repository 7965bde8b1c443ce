"""Storing the metric points agents ship with their heartbeats (docs/metrics.md).

Each (trial, kind) series is read, merged with the new points (``domain.metrics.merge``:
duplicates dropped by seq, bounded, downsampled) and written back conditioned on its own
revision, never on the trial's version: metrics never make a scheduler write lose a race.
An agent may only add points to trials that were placed on it (``ran_on``) and have not
ended (the stale-instance fence, ``corral.domain.agent_fence``; the heartbeat that carries
them has fenced the instance already); points for other trials are dropped without a word,
as a report about a stranger's trial would be, and are not asked for again.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import ValidationError

from corral.domain.errors import ConflictError
from corral.domain.instance import Instance
from corral.domain.metrics import IncomingPoint, MetricKind, merge, new_series
from corral.domain.trial import Trial
from corral.ports.store import retry_on_conflict
from corral.protocol.agent import MetricPointIn, TrialMetrics
from corral.protocol.metrics import metric_kind
from corral.services.shared.service_context import Context

if TYPE_CHECKING:
    from corral.domain.config import SearcherConfig


class SearcherMetric(NamedTuple):
    """The metric that ranks an experiment's trials (``searcher.metric``; None: nothing
    ranks them) and which way. A tuple: ``metric, smaller = searcher_metric(...)``."""

    metric: str | None = None
    smaller_is_better: bool = True

    @classmethod
    def of(cls, searcher: SearcherConfig) -> SearcherMetric:
        return cls(searcher.metric or None, searcher.smaller_is_better)


def searcher_metric(config: Mapping[str, Any]) -> SearcherMetric:
    """The ``SearcherMetric`` of a stored experiment config, its ``searcher`` section read by
    the config's own model. Stored configs were validated at submission; one that no longer
    validates ranks nothing rather than failing the views and heartbeats that ask."""
    # Loaded here, not at import: the experiment models are built on first use (cold start).
    from corral.domain.config import SearcherConfig

    try:
        return SearcherMetric.of(SearcherConfig.model_validate(config.get("searcher") or {}))
    except ValidationError:
        return SearcherMetric()


def store_metrics(ctx: Context, record: Instance, reports: Sequence[TrialMetrics]) -> list[str]:
    """Store every report's points; returns the trials whose points must be sent again."""
    retry: list[str] = []
    for report in reports:
        trial = ctx.store.get_trial(report.trial_id)
        if trial is None or record.id not in trial.ran_on or not trial.is_active:
            continue
        try:
            for kind, points in _by_kind(report.points).items():
                retry_on_conflict(functools.partial(_merge_one, ctx, trial, kind, points))
        except ConflictError:
            retry.append(trial.id)
    return retry


def _by_kind(points: Sequence[MetricPointIn]) -> dict[MetricKind, list[IncomingPoint]]:
    grouped: dict[MetricKind, list[IncomingPoint]] = defaultdict(list)
    for p in points:
        kind = metric_kind(p.kind)
        if kind is not None:
            grouped[kind].append(IncomingPoint(p.seq, p.batches, p.values, p.at))
    return grouped


def _merge_one(ctx: Context, trial: Trial, kind: MetricKind, points: list[IncomingPoint]) -> None:
    series = ctx.store.metric_series(trial.id, kind)
    if series is None:
        experiment = ctx.store.get_experiment(trial.experiment_id)
        metric, smaller = searcher_metric(experiment.config if experiment else {})
        series = new_series(trial.id, trial.experiment_id, kind, metric, smaller)
    merged = merge(series, points).series
    if merged != series:  # a resent batch changes nothing: no write at all
        ctx.store.put_metric_series(merged)
