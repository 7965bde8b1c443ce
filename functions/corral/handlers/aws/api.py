"""Lambda entry point of the ``api`` function (API Gateway HTTP API, payload format 2.0).

Cold start: only Powertools' Logger, Metrics and resolver are imported here, no ``Tracer``
(creating one imports the X-Ray SDK, ~0.25 s, even when tracing is off). boto3 and the
composition module load on the first request that needs the store, so ``/healthz`` and
``/docs`` answer without them. The resolver and the Context are built once per container.

Two resolvers, the same routes: a request for the Swagger UI (``/docs``) is served by one
with it, every other by one without, which never imports Powertools' OpenAPI models (0.08
to 0.14 s of the first event of a container that serves no ``/docs``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from corral.api.app import build_resolver
from corral.api.auth import authenticator_from_env
from corral.api.openapi import DOCS_PATH
from corral.handlers.aws.cold_start import settles_after
from corral.handlers.aws.observability import count, make_logger, make_metrics
from corral.services.shared.service_context import Context

logger = make_logger("api")
metrics = make_metrics("api")
# Loggers of the services and the API ("corral.*") log as JSON with the correlation id too.
copy_config_to_registered_loggers(source_logger=logger, include={"corral"})


def _ctx() -> Context:
    # ``build_context`` caches the Context per container itself; looked up on the module at
    # call time so tests can monkeypatch it.
    from corral.handlers.aws import composition

    return composition.build_context()


@functools.cache
def resolver(swagger: bool = False) -> APIGatewayHttpResolver:
    """Built once per container and kind (routes, models and the OpenAPI cache are reused)."""
    return build_resolver(_ctx, authenticator_from_env(os.environ), swagger=swagger)


def _wants_swagger(event: dict[str, Any]) -> bool:
    # Under a named stage the path carries the stage first; a route that merely ends in
    # /docs (an experiment named "docs") is served by the Swagger resolver too, which has
    # every route: the test only decides which of two equivalent resolvers answers.
    return str(event.get("rawPath", "")).rstrip("/").endswith(DOCS_PATH)


@settles_after  # outermost: after the logs and metrics of the first event
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True
)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = resolver(_wants_swagger(event)).resolve(event, context)
    status = int(response.get("statusCode", 500))
    # Zeros included, so a dashboard shows 0 rather than a gap (per-route dimensions would
    # multiply the metric count; the route is in the logs).
    count(
        metrics,
        {
            "ApiRequests": 1,
            "ApiClientErrors": int(400 <= status < 500),
            "ApiServerErrors": int(status >= 500),
        },
    )
    return response
