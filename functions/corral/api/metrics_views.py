"""Read models of trial metrics (``schemas/metrics.py``): a trial's points page by page, an
experiment's learning curves of one metric, and the metric fields of trial and experiment
views (latest values, a trial's best value, the experiment's best trial). Nothing here
writes; list views read only the series' summaries, never their points."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from corral.api.schemas.metrics import (
    BestView,
    ExperimentMetrics,
    LatestMetrics,
    MetricPointView,
    TrialCurve,
    TrialMetricsPage,
)
from corral.domain.errors import NotFoundError
from corral.domain.metrics import (
    MetricKind,
    MetricSeries,
    MetricSummary,
    best_trial,
    trial_best_value,
)
from corral.domain.records import Experiment
from corral.domain.trial import Trial
from corral.services.shared.service_context import Context
from corral.services.trial_metrics import searcher_metric

# Curves on one chart at most (a 10,000-trial grid would not fit a 6 MB response); past it,
# the trials with the best values of the searcher's metric are kept.
MAX_CHART_TRIALS = 100


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def trial_metrics_page(
    ctx: Context, trial_id: str, *, kind: MetricKind, after_seq: int, limit: int
) -> TrialMetricsPage:
    if ctx.store.get_trial(trial_id) is None:
        raise NotFoundError(f"no trial {trial_id}")
    series = ctx.store.metric_series(trial_id, kind)
    if series is None:
        return TrialMetricsPage(trial_id=trial_id, kind=kind.value, points=[], next_after_seq=None)
    later = [p for p in series.points if p.seq > after_seq]
    page = later[:limit]
    return TrialMetricsPage(
        trial_id=trial_id,
        kind=kind.value,
        points=[
            MetricPointView(
                seq=p.seq, batches=p.batches, values=series.values(p), reported_at=_iso(p.at)
            )
            for p in page
        ],
        next_after_seq=page[-1].seq if len(later) > limit else None,
    )


def experiment_metrics(
    ctx: Context, experiment_id: str, *, name: str | None, kind: MetricKind
) -> ExperimentMetrics:
    experiment = ctx.store.get_experiment(experiment_id)
    if experiment is None:
        raise NotFoundError(f"no experiment {experiment_id}")
    searcher, smaller = searcher_metric(experiment.config)
    order = list(experiment.trial_ids)
    summaries = [s for s in ctx.store.metric_summaries(order) if s.kind is kind]
    truncated = len(summaries) > MAX_CHART_TRIALS
    if truncated:
        rank = {t: n for n, t in enumerate(order)}
        summaries = sorted(summaries, key=lambda s: _rank(s, smaller, rank[s.trial_id]))
        summaries = sorted(summaries[:MAX_CHART_TRIALS], key=lambda s: rank[s.trial_id])
    found = [
        series
        for s in summaries
        if (series := ctx.store.metric_series(s.trial_id, kind)) is not None
    ]
    metric = name or searcher or next((s.names[0] for s in found if s.names), "")
    curves = [_curve(series, metric) for series in found]
    return ExperimentMetrics(
        experiment_id=experiment_id,
        metric=metric,
        kind=kind.value,
        smaller_is_better=smaller,
        series=[c for c in curves if c.points],
        truncated=truncated,
    )


def _rank(summary: MetricSummary, smaller: bool, position: int) -> tuple[int, float, int]:
    """Best first (no best value: last), then trial order."""
    value = summary.best_value
    if value is None:
        return (1, 0.0, position)
    return (0, value if smaller else -value, position)


def _curve(series: MetricSeries, metric: str) -> TrialCurve:
    points = [
        (p.batches, value) for p in series.points if (value := series.value(p, metric)) is not None
    ]
    return TrialCurve(trial_id=series.trial_id, points=points)


# ---- fields of trial and experiment views ---------------------------------------------------
def by_trial(summaries: Iterable[MetricSummary]) -> dict[str, list[MetricSummary]]:
    out: dict[str, list[MetricSummary]] = {}
    for s in summaries:
        out.setdefault(s.trial_id, []).append(s)
    return out


def trial_fields(summaries: Sequence[MetricSummary]) -> tuple[LatestMetrics, float | None]:
    """``latest_metrics`` and ``best_value`` of one trial, from its summaries."""
    kinds = {s.kind: s for s in summaries}
    training, validation = kinds.get(MetricKind.TRAINING), kinds.get(MetricKind.VALIDATION)
    latest = LatestMetrics(
        training=dict(training.latest) if training else None,
        validation=dict(validation.latest) if validation else None,
    )
    # The validation summary's metric is searcher.metric (fixed when it was created).
    best = trial_best_value(validation, validation.metric) if validation else None
    return latest, best


def experiment_best(
    experiment: Experiment, trials: Sequence[Trial], summaries: dict[str, list[MetricSummary]]
) -> BestView | None:
    metric, smaller = searcher_metric(experiment.config)
    if metric is None:
        return None
    candidates = [
        (t.id, trial_best_value(_validation(summaries.get(t.id, [])), metric)) for t in trials
    ]
    best = best_trial(metric, smaller, candidates)
    return (
        None if best is None else BestView(trial_id=best.trial_id, metric=metric, value=best.value)
    )


def _validation(summaries: Sequence[MetricSummary]) -> MetricSummary | None:
    return next((s for s in summaries if s.kind is MetricKind.VALIDATION), None)
