"""User routes for the fleet: agents (instances), pools, the event log; and the health check.

Reads are open to every user; resetting a pool's breaker is for admins (the cluster config's
``admins``: ``services.pools``)."""

from __future__ import annotations

import time
from typing import Annotated

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import FiniteFloat

from corral.api import views
from corral.api.deps import Deps
from corral.api.openapi import errors
from corral.api.schemas.public import (
    EventsPage,
    Health,
    InstanceList,
    PoolList,
    PoolQuery,
    PoolView,
)
from corral.services import pools

TAG = "fleet"
ALL = "Include records that ended (terminated, cancelled, failed launches)"
POOL = "Only this pool's"


def register(app: APIGatewayHttpResolver, deps: Deps) -> None:
    def instances(pool: str | None, include_terminal: bool) -> InstanceList:
        deps.user()
        return views.list_instances(deps.ctx(), pool=pool, include_terminal=include_terminal)

    @app.get(
        "/agents",
        tags=[TAG],
        summary="List agents (instance records): state, offering, idle time, cost so far",
        responses=errors(),
    )
    def list_agents(
        pool: Annotated[PoolQuery | None, Query(description=POOL)] = None,
        include_terminal: Annotated[bool, Query(alias="all", description=ALL)] = False,
    ) -> InstanceList:
        return instances(pool, include_terminal)

    @app.get("/instances", tags=[TAG], summary="Alias of GET /agents", responses=errors())
    def list_instances(
        pool: Annotated[PoolQuery | None, Query(description=POOL)] = None,
        include_terminal: Annotated[bool, Query(alias="all", description=ALL)] = False,
    ) -> InstanceList:
        return instances(pool, include_terminal)

    @app.get(
        "/pools",
        tags=[TAG],
        summary="List pools: instance counts, offerings, backoff, breaker and budget",
        responses=errors(),
    )
    def list_pools() -> PoolList:
        deps.user()
        return views.list_pools(deps.ctx())

    @app.post(
        "/pools/<name>/reset-breaker",
        tags=[TAG],
        summary="Close a pool's boot circuit breaker now (admins only); the event log says who",
        responses=errors(404, 409),
    )
    def reset_breaker(name: str) -> PoolView:
        user = deps.user()
        ctx = deps.ctx()
        pools.reset_breaker(ctx, name, by=user.name)
        return views.pool_view(ctx, name)

    @app.get(
        "/events",
        tags=[TAG],
        summary="A page of the event log, oldest first; follow with since=next_since",
        responses=errors(),
    )
    def list_events(
        # FiniteFloat, not Query(allow_inf_nan=False): Powertools passes that on misspelt
        # (allow_nan), so pydantic never sees it.
        since: Annotated[FiniteFloat, Query(description="Events strictly after this time")] = 0.0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
        pool: Annotated[PoolQuery | None, Query(description=POOL)] = None,
    ) -> EventsPage:
        deps.user()
        return views.events_page(deps.ctx(), since=since, limit=limit, pool=pool)

    @app.get("/healthz", tags=[TAG], summary="Liveness (no credentials, no store access)")
    def healthz() -> Health:
        # Deliberately touches nothing: answering proves the function and routing work,
        # without building the Context (a cold start stays cheap for health probes).
        return Health(status="ok", time=time.time())
