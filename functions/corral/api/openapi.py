"""OpenAPI document settings shared by ``/openapi.json`` and the Swagger UI at ``/docs``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn, HTTPBearer
from pydantic import BaseModel

from corral.api.schemas.public import ErrorBody

TITLE = "Corral API"
VERSION = "1"
DESCRIPTION = (
    "Serverless control plane for elastic GPU training clusters. Users submit and watch "
    "experiments; agents (one per instance) register, heartbeat and report. Deployed, every "
    "request is SigV4-signed (API Gateway AWS_IAM authorization); on the local stack, send "
    "'Authorization: Bearer <token>'. Errors are {message, errors?: [{field, reason}]}."
)

_DESCRIPTIONS = {
    400: "Malformed request (body not JSON, YAML not parseable)",
    401: "No usable credentials",
    403: "The caller may not do this (wrong kind of caller, or another instance's records)",
    404: "No such record",
    409: "The record changed concurrently, or its state forbids this; retry or give up",
    422: "Invalid input; errors[].field names each wrong field",
}


def errors(*statuses: int, created: type[BaseModel] | None = None) -> dict[int, Any]:
    """The ``responses=`` of a route: its error statuses (401/403 always), and a 201."""
    out: dict[int, Any] = {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {"application/json": {"model": ErrorBody}},
        }
        for status in sorted({401, 403, *statuses})
    }
    if created is not None:
        out[201] = {
            "description": "Created (200 when client_token matched an earlier submission)",
            "content": {"application/json": {"model": created}},
        }
    return out


def configure(app: APIGatewayHttpResolver) -> None:
    app.configure_openapi(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        security_schemes={
            "sigv4": APIKey(
                name="Authorization",
                in_=APIKeyIn.header,
                description="AWS SigV4 (service execute-api); deployed stacks",
            ),
            "bearer": HTTPBearer(description="Local stack user or agent token"),
        },
        security=[{"sigv4": []}, {"bearer": []}],
    )
    app.enable_swagger(path="/docs")
    cache: list[str] = []

    # Powertools serves the document at /docs?format=json; clients and tools expect a plain
    # /openapi.json too. Built once per resolver: generating it walks every model.
    @app.get("/openapi.json", include_in_schema=False)
    def openapi_json() -> Response[str]:
        if not cache:
            cache.append(app.get_openapi_json_schema())
        return Response(200, content_types.APPLICATION_JSON, body=cache[0])
