"""The web dashboard: its static page and files, and the one read it needs that no other
route offers (GPUs demanded vs paid for, now).

``/`` and ``/dashboard/<name>`` need no credentials: the page and its scripts carry no data.
Every call the page makes for data goes to the ordinary user routes with the caller's
credentials (``Authorization: Bearer`` on the local stack; signed by ``corral dashboard``'s
proxy when deployed), so serving the page openly grants nothing.
"""

from __future__ import annotations

from collections import defaultdict

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from pydantic import BaseModel, Field

from corral.api import dashboard
from corral.api.deps import Deps
from corral.api.errors import ApiError
from corral.api.openapi import errors
from corral.domain.cost import billed_interval
from corral.domain.instance import LIVE_STATES
from corral.domain.trial import ACTIVE_STATES, HOLDS_GPUS
from corral.services.shared.service_context import Context

TAG = "fleet"


class PoolCapacity(BaseModel):
    pool: str
    gpus_demanded: int = Field(description="GPUs of every trial not yet ended")
    gpus_busy: int = Field(description="GPUs held by trials placed on agents")
    gpus_paid: int = Field(description="GPUs of the instances being billed now")
    instances_paid: int


class CapacityView(BaseModel):
    """One sample; the dashboard keeps the samples it took to draw demand over time."""

    at: float
    gpus_demanded: int
    gpus_busy: int
    gpus_paid: int
    pools: list[PoolCapacity]


def capacity_view(ctx: Context) -> CapacityView:
    """Read-only: the active trials and live instances, as the schedule pass reads them."""
    now = ctx.clock.now()
    demanded: dict[str, int] = defaultdict(int)
    busy: dict[str, int] = defaultdict(int)
    paid: dict[str, int] = defaultdict(int)
    instances: dict[str, int] = defaultdict(int)
    for trial in ctx.store.trials(states=ACTIVE_STATES):
        demanded[trial.pool] += trial.slots
        if trial.state in HOLDS_GPUS:
            busy[trial.pool] += trial.slots
    for inst in ctx.store.instances(states=LIVE_STATES):
        # Billed for compute now: a stopped one (a warm pool) pays for its disks only.
        if billed_interval(inst, now) is not None:
            paid[inst.pool] += inst.slots
            instances[inst.pool] += 1
    names = list(ctx.pools) + sorted({*demanded, *paid} - set(ctx.pools))
    pools = [
        PoolCapacity(
            pool=name,
            gpus_demanded=demanded[name],
            gpus_busy=busy[name],
            gpus_paid=paid[name],
            instances_paid=instances[name],
        )
        for name in names
    ]
    return CapacityView(
        at=now,
        gpus_demanded=sum(p.gpus_demanded for p in pools),
        gpus_busy=sum(p.gpus_busy for p in pools),
        gpus_paid=sum(p.gpus_paid for p in pools),
        pools=pools,
    )


def register(app: APIGatewayHttpResolver, deps: Deps) -> None:
    def serve(asset: dashboard.Asset) -> Response[str]:
        headers = asset.headers()
        if asset.not_modified(app.current_event.headers.get("if-none-match")):
            return Response(304, headers=headers, body="")
        return Response(200, asset.content_type, body=asset.body, headers=headers)

    @app.get("/", include_in_schema=False)
    def dashboard_page() -> Response[str]:
        return serve(dashboard.index())

    @app.get("/dashboard/<name>", include_in_schema=False)
    def dashboard_file(name: str) -> Response[str]:
        asset = dashboard.get(name)
        if asset is None:
            raise ApiError(404, f"no dashboard file {name}")
        return serve(asset)

    @app.get(
        "/capacity",
        tags=[TAG],
        summary="GPUs demanded, busy and paid for now, per pool (the dashboard samples it)",
        responses=errors(),
    )
    def capacity() -> CapacityView:
        deps.user()
        return capacity_view(deps.ctx())
