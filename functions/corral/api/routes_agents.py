"""Agent routes: the agent protocol (``corral.protocol.agent``) over HTTP.

Each route takes the instance id the caller PROVED (``Deps.agent``), never one it claims, and
the services check every agent id and trial against it (``services.agents.placed_here``): an
agent can only act on its own record and on trials placed on it (403 otherwise; the statuses
come from the one table in ``api.errors``). Every write is fenced too
(``corral.domain.agent_fence``): from an instance that is not IDLE, BUSY, DRAINING or STOPPING it is
refused with 409 (the agent shuts down), about a trial that has ended with 410 (the agent
forgets the trial), and nothing is written.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from corral.api.deps import Deps
from corral.api.errors import ApiError
from corral.api.openapi import errors
from corral.api.schemas.public import Accepted, FieldError, StatusApplied
from corral.protocol import agent as wire
from corral.protocol.agent_paths import HEARTBEAT, REGISTER, TRIAL_LOGS, TRIAL_STATUS, route
from corral.services import agents

TAG = "agents"


def register(app: APIGatewayHttpResolver, deps: Deps) -> None:
    @app.post(
        route(REGISTER),
        tags=[TAG],
        summary="An agent proves its instance and registers its GPUs",
        responses=errors(404, 409, 422),
    )
    def register_agent(body: wire.RegisterRequest) -> wire.RegisterResponse:
        principal = deps.agent_principal()
        refusal = deps.auth.identity_refusal(principal, body.identity)
        if refusal is not None:
            raise ApiError(403, refusal)
        return agents.register(deps.ctx(), body, principal.cloud_id or "")

    @app.post(
        route(HEARTBEAT),
        tags=[TAG],
        summary="Heartbeat; the reply carries trials to start and stop, and drain",
        responses=errors(409),
    )
    def heartbeat(agent_id: str, body: wire.HeartbeatRequest) -> wire.HeartbeatResponse:
        cloud_id = deps.agent()
        return agents.heartbeat(deps.ctx(), agent_id, cloud_id, body)

    @app.post(
        route(TRIAL_STATUS),
        tags=[TAG],
        summary="A trial changed state on the agent",
        responses=errors(404, 409, 410, 422),
    )
    def trial_status(agent_id: str, trial_id: str, body: wire.TrialStatus) -> StatusApplied:
        cloud_id = deps.agent()
        if body.trial_id != trial_id:
            raise ApiError(
                422,
                "invalid request",
                [FieldError(field="trial_id", reason=f"must be {trial_id}, as in the path")],
            )
        moved = agents.report_trial_status(deps.ctx(), agent_id, cloud_id, body)
        return StatusApplied(
            applied=moved is not None, trial_state=moved.state.value if moved else None
        )

    @app.post(
        route(TRIAL_LOGS),
        tags=[TAG],
        summary="Append a batch of a trial's log lines (idempotent per seq)",
        responses=errors(404, 409, 410, 422),
    )
    def trial_logs(agent_id: str, trial_id: str, body: wire.LogBatch) -> Accepted:
        cloud_id = deps.agent()
        return Accepted(accepted=agents.append_logs(deps.ctx(), agent_id, cloud_id, trial_id, body))
