"""OpenAPI document settings shared by ``/openapi.json`` and the Swagger UI at ``/docs``.

``/openapi.json`` also states what Powertools' generator leaves out or gets wrong, so clients
and the fuzzer (tests/api/test_fuzz_openapi.py) can hold every response to it: every error
body is ``ErrorBody`` (Powertools documents 422 as its own ``HTTPValidationError``), a route
with a body may answer 400 and 413 (``http_events.parse_json_body``) and 415 (a body that is
not JSON), one with a path parameter 404 (no such record, or no route for a malformed id),
and one needing credentials 401 and 403. ``/healthz`` needs none.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from pydantic import BaseModel

from corral.api.schemas.public import ErrorBody

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.openapi.models import SecurityScheme

TITLE = "Corral API"
VERSION = "1"
DOCS_PATH = "/docs"  # the Swagger UI
DESCRIPTION = (
    "Serverless control plane for elastic GPU training clusters. Users submit and watch "
    "experiments; agents (one per instance) register, heartbeat and report. Deployed, every "
    "request is SigV4-signed (API Gateway AWS_IAM authorization); on the local stack, send "
    "'Authorization: Bearer <token>'. Errors are {message, errors?: [{field, reason}]}."
)

_DESCRIPTIONS = {
    400: "Malformed request (body not JSON or not UTF-8, nested too deeply, YAML not parseable)",
    401: "No usable credentials",
    403: "The caller may not do this (wrong kind of caller, or another instance's records)",
    404: "No such record",
    409: "The record changed concurrently, or its state forbids this; retry or give up",
    410: "The trial has ended: nothing more is recorded for it",
    413: "The request body is over the size limit (named in the message)",
    415: "The request body is not application/json",
    422: "Invalid input; errors[].field names each wrong field",
}
# As the document spells them. Powertools validates these into its OpenAPI models when it
# builds the document (``OpenAPI(**output)``), so those models (~0.02 s of pydantic classes)
# load for /docs and /openapi.json only, not in every cold start of the API function.
_SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "sigv4": {
        "type": "apiKey",
        "name": "Authorization",
        "in": "header",
        "description": "AWS SigV4 (service execute-api); deployed stacks",
    },
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "Local stack user or agent token",
    },
}
PUBLIC_PATHS = frozenset({"/healthz"})  # answered without credentials
_ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorBody"}


def errors(*statuses: int, created: type[BaseModel] | None = None) -> dict[int, Any]:
    """The ``responses=`` of a route: its success (200 with the route's return model, or 201
    and 200 with ``created``) and its error statuses (401/403 always).

    Powertools documents no success response at all once ``responses=`` is given, unless it
    is listed; a 200 without ``content`` takes the return annotation's schema.
    """
    out: dict[int, Any] = {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {"application/json": {"model": ErrorBody}},
        }
        for status in sorted({401, 403, *statuses})
    }
    if created is None:
        out[200] = {"description": "Successful Response"}
    else:
        content = {"application/json": {"model": created}}
        out[201] = {"description": "Created", "content": content}
        out[200] = {
            "description": "An earlier submission with this client_token",
            "content": content,
        }
    return out


def complete(doc: dict[str, Any]) -> dict[str, Any]:
    """The generated document with every error status a route can answer, each an
    ``ErrorBody`` (see the module docstring). Changes ``doc`` in place and returns it."""
    for path, operations in doc.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            params = operation.get("parameters", [])
            statuses = set()
            if "requestBody" in operation:
                statuses |= {400, 413, 415, 422}
            if params:
                statuses.add(422)
            if any(p.get("in") == "path" for p in params):
                statuses.add(404)
            if path in PUBLIC_PATHS:
                operation["security"] = []
            else:
                statuses |= {401, 403}
            for status in sorted(statuses):
                responses.setdefault(str(status), {"description": _DESCRIPTIONS[status]})
            for status, response in responses.items():
                if status.startswith("4"):
                    if status == "422":
                        response["description"] = _DESCRIPTIONS[422]
                    response["content"] = {"application/json": {"schema": _ERROR_SCHEMA}}
    # Only the 422s above referred to it; every one now names ErrorBody.
    doc.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
    return doc


def configure(app: APIGatewayHttpResolver, *, swagger: bool = True) -> None:
    """The document's metadata, ``/openapi.json`` and, with ``swagger``, the Swagger UI at
    ``/docs``. Powertools' ``enable_swagger`` imports its OpenAPI models (38 pydantic
    models, 0.08 to 0.14 s), so the Lambda function builds a resolver without it for every
    other path (``handlers/aws/api.py``)."""
    app.configure_openapi(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        security_schemes=cast("dict[str, SecurityScheme]", _SECURITY_SCHEMES),
        security=[{"sigv4": []}, {"bearer": []}],
    )
    if swagger:
        app.enable_swagger(path=DOCS_PATH)
    cache: list[str] = []

    # Powertools serves the document at /docs?format=json; clients and tools expect a plain
    # /openapi.json too. Built once per resolver: generating it walks every model.
    @app.get("/openapi.json", include_in_schema=False)
    def openapi_json() -> Response[str]:
        if not cache:
            cache.append(json.dumps(complete(json.loads(app.get_openapi_json_schema()))))
        return Response(200, content_types.APPLICATION_JSON, body=cache[0])
