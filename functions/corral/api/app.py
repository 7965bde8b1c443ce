"""The HTTP API: one Powertools resolver for users, agents and the docs.

``build_resolver`` is the only entry point. It takes what the runtime owns (how a Context is
made, who the caller is) and wires routes, errors and OpenAPI; it creates no clients itself,
so the Lambda handler, the local stack and the tests all run these exact routes.

Routes (users unless marked): experiments, trials, logs and commands in
``routes_experiments``; agents/instances, pools and events in ``routes_fleet``; the agent
protocol (agents only) in ``routes_agents``; the web dashboard (``/``, ``/dashboard/<file>``)
and the GPU capacity sample it draws in ``routes_dashboard``. ``/healthz``, ``/docs``,
``/openapi.json`` and the dashboard's static files need no credentials from the app (API
Gateway may still demand them).
"""

from __future__ import annotations

from collections.abc import Callable

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, CORSConfig

from corral.api import (
    errors,
    http_events,
    openapi,
    routes_agents,
    routes_dashboard,
    routes_experiments,
    routes_fleet,
)
from corral.api.auth import Authenticator
from corral.api.deps import Deps
from corral.services.shared.service_context import Context


def build_resolver(
    ctx_provider: Callable[[], Context],
    auth: Authenticator,
    *,
    cors: CORSConfig | None = None,
    swagger: bool = True,
) -> APIGatewayHttpResolver:
    """``swagger=False`` leaves out the Swagger UI at ``/docs`` (see ``openapi.configure``):
    every other route, ``/openapi.json`` included, is the same."""
    # Validation: request bodies and query parameters are checked against the pydantic
    # models (422 naming the field) before a route runs, and responses against theirs. Every
    # JSON body is decoded by ``parse_json_body``: too large or too deep is refused unparsed.
    app = APIGatewayHttpResolver(
        enable_validation=True, cors=cors, json_body_deserializer=http_events.parse_json_body
    )
    deps = Deps(app=app, ctx_provider=ctx_provider, auth=auth)
    errors.install_error_handlers(app)
    app.use([errors.check_path_parameters])
    routes_experiments.register(app, deps)
    routes_fleet.register(app, deps)
    routes_agents.register(app, deps)
    routes_dashboard.register(app, deps)
    openapi.configure(app, swagger=swagger)
    return app
