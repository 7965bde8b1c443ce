"""What every route needs per request: the Context, and the caller checked for its kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from corral.api.auth import Authenticator, AuthError, Principal, require
from corral.services.shared.service_context import Context


@dataclass(frozen=True)
class Deps:
    app: APIGatewayHttpResolver
    # Called per request, so the composition root decides caching: the Lambda handler
    # builds one Context per container, lazily, so /healthz and /docs never wait for boto3.
    ctx_provider: Callable[[], Context]
    auth: Authenticator

    def ctx(self) -> Context:
        return self.ctx_provider()

    def principal(self) -> Principal:
        return self.auth.authenticate(self.app.current_event.raw_event)

    def user(self) -> Principal:
        return require(self.principal(), "user")

    def agent_principal(self) -> Principal:
        principal = require(self.principal(), "agent")
        if not principal.cloud_id:
            raise AuthError(403, "the agent proved no instance id")
        return principal

    def agent(self) -> str:
        """The proven cloud id of the calling agent."""
        return self.agent_principal().cloud_id or ""
