"""Read models of trial metrics (docs/metrics.md, docs/api.md): pages of a trial's points, an
experiment's learning curves for one chart, and the fields trial and experiment views gain.
Part of the public contract like ``public.py``: add fields, never rename or remove them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class BestView(_View):
    trial_id: str
    metric: str = Field(description="searcher.metric")
    value: float = Field(description="The best validation value of it any trial reported")


class LatestMetrics(_View):
    training: dict[str, float] | None = Field(
        default=None, description="The values of the trial's last training point"
    )
    validation: dict[str, float] | None = Field(
        default=None, description="The values of the trial's last validation point"
    )


class MetricPointView(_View):
    seq: int = Field(description="The point's number: increasing per trial, across runs")
    batches: int
    values: dict[str, float]
    reported_at: str = Field(description="When the agent read it (ISO 8601, UTC)")


class TrialMetricsPage(_View):
    trial_id: str
    kind: str
    points: list[MetricPointView] = Field(description="Ascending seq")
    next_after_seq: int | None = Field(
        description="Pass as ?after_seq= for the next page; null when there is no more"
    )


class TrialCurve(_View):
    trial_id: str
    points: list[tuple[int, float]] = Field(description="[batches, value] in report order")


class ExperimentMetrics(_View):
    experiment_id: str
    metric: str = Field(description="The metric charted: ?name=, else searcher.metric")
    kind: str
    smaller_is_better: bool
    series: list[TrialCurve] = Field(description="Trials that reported it, in trial order")
    truncated: bool = Field(
        default=False,
        description="More trials reported it than one chart shows (the best ones are kept)",
    )
