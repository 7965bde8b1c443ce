"""Every failure becomes ``{"message": ..., "errors"?: [{"field", "reason"}]}``, never a traceback.

One table maps exception types to HTTP statuses, so the routes just raise. Services raise
domain errors (``corral.domain.errors``: the refusals below, ConflictError) or SubmitError,
config parsing raises ConfigError, and anything unexpected is logged with the request id and
answered 500. Only this module knows HTTP statuses for them. Bodies are refused before parsing
when too large or too deep (``http_events.parse_json_body``, the resolver's JSON decoder:
``app.build_resolver``), raising ``BodyRefused``.

The agent runtime acts on these statuses: 403/404/409 to a register or heartbeat stop the
agent (409, to any agent call, also shuts its instance down), 410 to a trial's status or
logs makes it forget the trial, 422 to a register is "unhealthy", 5xx is retried.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError as NoRoute
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from corral.api.auth import AuthError
from corral.api.http_events import BodyRefused
from corral.api.schemas.public import ErrorBody, FieldError
from corral.domain.config import ConfigError
from corral.domain.errors import (
    ConflictError,
    Ended,
    Forbidden,
    NotFoundError,
    Refused,
    RetryLater,
    ShutDown,
    Unhealthy,
)
from corral.domain.state_machine import IllegalTransition
from corral.domain.text import MAX_ID_CHARS, NOT_UNICODE, Kind, problem
from corral.services.submit import SubmitError

logger = logging.getLogger("corral.api")

# Where a request value came from; dropped from field paths ("body.config" -> "config").
_SOURCES = {"body", "query", "path", "header"}
_REASONS = {
    "missing": "required",
    "extra_forbidden": "unknown field",
    "string_unicode": NOT_UNICODE,  # the text rule's wording, where a model lacks the rule
}

# The services' refusals (``corral.domain.errors``), each answered with its message.
REFUSAL_STATUS: dict[type[Refused], int] = {
    # Another instance's record, a trial never placed on the agent; another user's experiment
    # (not its owner nor an admin); an admin-only action by a non-admin.
    Forbidden: 403,
    NotFoundError: 404,  # no such record (an instance Corral never launched, a trial id)
    ShutDown: 409,  # the agent's instance is being shut down, gone or lost: the agent stops
    Ended: 410,  # a write about a trial that has ended: the agent forgets the trial
    Unhealthy: 422,  # an agent short of GPUs (or that says so): its instance is terminated
    RetryLater: 503,  # nothing applied, the records kept changing: the agent retries
}


def refusal_status(exc: Refused) -> int:
    """The status of a refusal: its class's, or its nearest ancestor's in the table."""
    return next(REFUSAL_STATUS[c] for c in type(exc).__mro__ if c in REFUSAL_STATUS)


class ApiError(Exception):
    def __init__(self, status: int, message: str, errors: Sequence[FieldError] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = list(errors)


def error_response(
    status: int, message: str, errors: Iterable[FieldError] | None = None
) -> Response[Any]:
    listed = list(errors) if errors is not None else None
    body = ErrorBody(message=message, errors=listed or None)
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=body.model_dump(mode="json", exclude_none=True),
    )


def field_path(loc: Sequence[str | int]) -> str:
    parts = list(loc[1:] if loc and loc[0] in _SOURCES else loc)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _reason(error: dict[str, Any]) -> str:
    kind = str(error.get("type"))
    loc = error.get("loc") or ()
    if loc and loc[0] == "query" and error.get("input") == "":
        # ``?limit=`` or ``?all=``: say it was empty, not "unable to parse string as an integer"
        return "must not be empty"
    return _REASONS.get(kind) or str(error.get("msg", "invalid")).removeprefix("Value error, ")


def _validation_errors(exc: RequestValidationError) -> Response[Any]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(400, "the request body is not valid JSON")
    fields = [
        FieldError(
            field=field_path(tuple(e.get("loc", ()))),
            reason=_reason(e),
        )
        for e in errors
    ]
    return error_response(422, "invalid request", fields)


_PATH_PARAMETER = re.compile(r"<(\w+)>")


def check_path_parameters(
    app: APIGatewayHttpResolver, next_middleware: NextMiddleware
) -> Response[Any]:
    """Every route's path parameters (ids, a pool name) under the text rule, before the route
    runs: a 422 naming the parameter. The router's pattern already leaves out control
    characters; a 3,000-character id reached the store (DynamoDB refuses keys over 2 KB: a
    500)."""
    # The route's arguments hold the validated query and body too: only the path's names.
    route = app.context.get("_route")
    names = _PATH_PARAMETER.findall(getattr(route, "path", ""))
    arguments = app.context.get("_route_args") or {}
    for name in names:
        reason = problem(str(arguments.get(name, "")), Kind.LINE, MAX_ID_CHARS)
        if reason is not None:
            raise ApiError(422, "invalid request", [FieldError(field=name, reason=reason)])
    return next_middleware(app)


def install_error_handlers(app: APIGatewayHttpResolver) -> None:
    def config_error(exc: ConfigError) -> Response[Any]:
        problems = [FieldError(field=p.path, reason=p.reason) for p in exc.problems]
        return error_response(422, "invalid config", problems)

    def submit_error(exc: SubmitError) -> Response[Any]:
        # Valid config the cluster cannot run (no such pool, more GPUs than a pool holds).
        return error_response(422, str(exc), [FieldError(field=exc.field, reason=exc.reason)])

    def conflict(exc: Exception) -> Response[Any]:
        # A lost race with another function: the caller may simply retry. The detail (record
        # versions, state names) is for the logs, not the caller.
        logger.info("conflict: %s", exc)
        return error_response(409, "the record changed while handling the request; retry")

    def no_route(exc: NoRoute) -> Response[Any]:
        http = app.current_event.request_context.http
        return error_response(404, f"no route {http.method} {http.path}")

    def too_deep(exc: RecursionError) -> Response[Any]:
        # Input nested deeper than Python recurses (YAML config text: the JSON body's depth
        # is checked before parsing). Caused by the request, so a 400, not a 500.
        logger.info("request nested too deeply: %s", exc)
        return error_response(400, "the request is nested too deeply to process")

    def not_json(exc: RequestUnsupportedContentType) -> Response[Any]:
        # Powertools' validation reads JSON, forms and multipart; every route takes JSON.
        sent = app.current_event.headers.get("content-type", "")
        return error_response(415, f"the body must be application/json, not {sent}")

    def not_utf8(exc: UnicodeDecodeError) -> Response[Any]:
        return error_response(400, "the request body is not valid UTF-8")

    def unexpected(exc: Exception) -> Response[Any]:
        request_id = app.current_event.request_context.request_id
        logger.exception("unhandled error in %s", app.current_event.raw_path)
        return error_response(500, f"internal error (request id {request_id})")

    handlers: list[tuple[type[Exception] | list[type[Exception]], Callable[[Any], Any]]] = [
        (RequestValidationError, _validation_errors),
        (RequestUnsupportedContentType, not_json),
        (ConfigError, config_error),
        (SubmitError, submit_error),
        (ApiError, lambda e: error_response(e.status, e.message, e.errors)),
        (AuthError, lambda e: error_response(e.status, e.message)),
        (BodyRefused, lambda e: error_response(e.status, e.message)),
        (RecursionError, too_deep),
        (UnicodeDecodeError, not_utf8),
        (list(REFUSAL_STATUS), lambda e: error_response(refusal_status(e), str(e))),
        ([ConflictError, IllegalTransition], conflict),
        (NoRoute, no_route),
        # Last resort: the most specific handler wins (Powertools looks up the MRO).
        (Exception, unexpected),
    ]
    for exc_class, handler in handlers:
        # Called, not used as decorators: Powertools' decorator is untyped.
        app.exception_handler(exc_class)(handler)
