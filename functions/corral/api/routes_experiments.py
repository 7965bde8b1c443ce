"""User routes for work: experiments, their trials and logs, and commands."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Query

from corral.api import metrics_views, views
from corral.api.deps import Deps
from corral.api.errors import ApiError
from corral.api.openapi import errors
from corral.api.schemas.metrics import ExperimentMetrics, TrialMetricsPage
from corral.api.schemas.public import (
    CreateExperimentRequest,
    ExperimentDetail,
    ExperimentList,
    ExperimentView,
    FieldError,
    LogsPage,
    MetricQuery,
    OwnerQuery,
    RunCommandRequest,
    TrialList,
    TrialView,
)
from corral.domain.config import CommandConfig, ExperimentConfig, parse_yaml, validate
from corral.domain.metrics import MetricKind
from corral.services import kill, submit

TAG = "experiments"
# ?kind= of the metrics routes: "training" or "validation".
KIND_PATTERN = "^(" + "|".join(k.value for k in MetricKind) + ")$"


def config_mapping(config: dict[str, Any] | str) -> dict[str, Any]:
    """The submitted config as a mapping. YAML text is parsed here, never treated as a path:
    ``read_source`` would read a server-side file for a one-line string ending in .yaml."""
    return parse_yaml(config) if isinstance(config, str) else config


def register(app: APIGatewayHttpResolver, deps: Deps) -> None:
    @app.post(
        "/experiments",
        tags=[TAG],
        summary="Submit an experiment",
        responses=errors(400, 401, 403, 409, 422, created=ExperimentDetail),
    )
    def create_experiment(body: CreateExperimentRequest) -> Response[ExperimentDetail]:
        user = deps.user()
        ctx = deps.ctx()
        # Validate everything before the service writes anything: a bad config or a trial no
        # pool can hold is refused with nothing half-written.
        config = validate(ExperimentConfig, config_mapping(body.config))
        done = submit.submit_experiment(
            ctx, config, owner=user.name, client_token=body.client_token
        )
        return _created(views.experiment_detail(ctx, done.experiment.id), done.created)

    @app.get(
        "/experiments",
        tags=[TAG],
        summary="List experiments, newest first (all users', or one owner's)",
        responses=errors(422),
    )
    def list_experiments(
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        mine: Annotated[bool, Query(description="Only the caller's own experiments")] = False,
        owner: Annotated[OwnerQuery | None, Query(description="Only this principal's")] = None,
    ) -> ExperimentList:
        user = deps.user()
        if mine and owner is not None and owner != user.name:
            raise ApiError(
                422,
                "invalid request",
                [FieldError(field="owner", reason=f"is not the caller ({user.name}) with mine")],
            )
        return views.list_experiments(deps.ctx(), limit, owner=user.name if mine else owner)

    @app.get(
        "/experiments/<experiment_id>",
        tags=[TAG],
        summary="Describe an experiment, with its config and trials",
        responses=errors(404),
    )
    def describe_experiment(experiment_id: str) -> ExperimentDetail:
        deps.user()
        return views.experiment_detail(deps.ctx(), experiment_id)

    @app.post(
        "/experiments/<experiment_id>/kill",
        tags=[TAG],
        summary="Kill an experiment or command: pending trials are cancelled, running ones "
        "stopped (its owner or an admin only)",
        responses=errors(404, 409),
    )
    def kill_experiment(experiment_id: str) -> ExperimentView:
        user = deps.user()
        ctx = deps.ctx()
        killed = kill.kill_experiment(ctx, experiment_id, by=user.name)
        return views.experiment_view(ctx, killed)

    @app.get(
        "/experiments/<experiment_id>/trials",
        tags=[TAG],
        summary="A page of an experiment's trials; follow with offset=next_offset",
        responses=errors(404),
    )
    def list_trials(
        experiment_id: str,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> TrialList:
        deps.user()
        return views.experiment_trials(deps.ctx(), experiment_id, offset, limit)

    @app.get(
        "/trials/<trial_id>",
        tags=[TAG],
        summary="Describe a trial (pending_reason says why it is not running)",
        responses=errors(404),
    )
    def describe_trial(trial_id: str) -> TrialView:
        deps.user()
        return views.trial_view(deps.ctx(), trial_id)

    @app.get(
        "/trials/<trial_id>/logs",
        tags=[TAG],
        summary="A page of a trial's log lines; follow with after_seq=next_after_seq",
        responses=errors(404),
    )
    def trial_logs(
        trial_id: str,
        after_seq: Annotated[int, Query(ge=-1)] = -1,
        limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
    ) -> LogsPage:
        deps.user()
        return views.logs_page(deps.ctx(), trial_id, after_seq=after_seq, limit=limit)

    @app.get(
        "/trials/<trial_id>/metrics",
        tags=[TAG],
        summary="A page of a trial's metric points of one kind; follow with "
        "after_seq=next_after_seq",
        responses=errors(404),
    )
    def trial_metrics(
        trial_id: str,
        kind: Annotated[str, Query(pattern=KIND_PATTERN)] = "validation",
        after_seq: Annotated[int, Query(ge=-1)] = -1,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> TrialMetricsPage:
        deps.user()
        return metrics_views.trial_metrics_page(
            deps.ctx(), trial_id, kind=MetricKind(kind), after_seq=after_seq, limit=limit
        )

    @app.get(
        "/experiments/<experiment_id>/metrics",
        tags=[TAG],
        summary="The learning curves of one metric for the experiment's trials (one chart)",
        responses=errors(404),
    )
    def experiment_metrics(
        experiment_id: str,
        name: Annotated[MetricQuery | None, Query()] = None,
        kind: Annotated[str, Query(pattern=KIND_PATTERN)] = "validation",
    ) -> ExperimentMetrics:
        deps.user()
        return metrics_views.experiment_metrics(
            deps.ctx(), experiment_id, name=name, kind=MetricKind(kind)
        )

    @app.post(
        "/commands",
        tags=[TAG],
        summary="Run a command (a one-trial experiment that is never restarted)",
        responses=errors(400, 409, 422, created=ExperimentDetail),
    )
    def run_command(body: RunCommandRequest) -> Response[ExperimentDetail]:
        user = deps.user()
        ctx = deps.ctx()
        config = validate(CommandConfig, config_mapping(body.config))
        done = submit.run_command(
            ctx, config, body.argv, owner=user.name, client_token=body.client_token
        )
        return _created(views.experiment_detail(ctx, done.experiment.id), done.created)


def _created(detail: ExperimentDetail, created: bool) -> Response[ExperimentDetail]:
    # 201 for a new experiment; 200 when the client token found the one a retry created.
    return Response(
        status_code=201 if created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=detail,
    )
