"""Corral on Chalice: thin wrappers around the SAM handlers, so there is one implementation.

Every Chalice function here rebuilds the event its SAM twin gets and calls that twin
(``corral.handlers.aws.*.handler``): the same resolver, services, composition, logging and
metrics. What Chalice changes is the trigger plumbing, not the behaviour:

- The API is a REST API (v1) with ``AWS_IAM`` authorization, not an HTTP API. Each request is
  converted into the HTTP API (payload 2.0) event the ``api`` handler expects, with
  ``requestContext.authorizer.iam.userArn`` taken from the REST API's
  ``requestContext.identity.userArn``, so the same ``IamAuthenticator`` decides who calls.
- Chalice's SQS trigger does not set ``FunctionResponseTypes: [ReportBatchItemFailures]``, so
  a returned ``batchItemFailures`` list would be ignored and the failed records deleted with
  the rest. Unless ``CORRAL_SQS_REPORTS_BATCH_ITEM_FAILURES=true`` says the event source
  mappings were given that setting (``chalice package --merge-template``, see README.md), a
  batch with failed records raises, so SQS redelivers the whole batch. Every consumer is
  idempotent (launches move their record QUEUED -> REQUESTED with a conditional write first;
  a schedule pass and an interruption notice may run twice), so redelivering the records that
  already succeeded is harmless; it costs only repeated work.

The SAM handlers are imported inside each wrapper: Chalice puts every function in one zip
with this module as the entry point, and a timer should not import the API's resolver.

Queue ARNs and timer rates are read when Chalice loads this module (``chalice package`` or
``chalice deploy``), from the environment of that command; see README.md.
"""

from __future__ import annotations

import base64
import os
from typing import Any
from urllib.parse import quote, urlencode

from chalice.app import (
    Chalice,
    CloudWatchEvent,
    IAMAuthorizer,
    Rate,
    Response,
    SQSEvent,
)

app = Chalice(app_name="corral")

REPORTS_ITEM_FAILURES_ENV = "CORRAL_SQS_REPORTS_BATCH_ITEM_FAILURES"
_PLACEHOLDER_ARN = "arn:aws:sqs:us-east-1:123456789012:{}"
SCHEDULE_QUEUE_ARN = os.environ.get(
    "CORRAL_SCHEDULE_QUEUE_ARN", _PLACEHOLDER_ARN.format("corral-dev-schedule.fifo")
)
SCALE_UP_QUEUE_ARN = os.environ.get(
    "CORRAL_SCALE_UP_QUEUE_ARN", _PLACEHOLDER_ARN.format("corral-dev-scale-up")
)
INTERRUPTIONS_QUEUE_ARN = os.environ.get(
    "CORRAL_INTERRUPTIONS_QUEUE_ARN", _PLACEHOLDER_ARN.format("corral-dev-interruptions")
)

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
# Chalice answers 415 to a body whose content type a route does not list.
_CONTENT_TYPES = [
    "application/json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "application/octet-stream",
]
_iam = IAMAuthorizer()


class BatchFailedError(RuntimeError):
    """Some records of an SQS batch failed and the trigger cannot redeliver only those."""


# ---- API (REST API v1 -> HTTP API v2 event -> the SAM api handler) ----------------------
@app.route("/", methods=_METHODS, authorizer=_iam, content_types=_CONTENT_TYPES)
def api_root() -> Response:
    return _serve()


@app.route("/{proxy+}", methods=_METHODS, authorizer=_iam, content_types=_CONTENT_TYPES)
def api_proxy() -> Response:
    return _serve()


def _path(request: Any) -> str:
    """The request path below the stage. API Gateway's REST event carries it as ``path``;
    Chalice's local gateway does not, and names the greedy parameter ``proxy+``."""
    path = request.to_original_event().get("path")
    if isinstance(path, str) and path.startswith("/"):
        return path
    params = request.uri_params or {}
    proxy = params.get("proxy", params.get("proxy+", ""))
    # Path parameters arrive decoded; re-encode for the resolver's URL.
    return "/" + quote(proxy, safe="/:@!$&'()*+,;=-._~")


def _serve() -> Response:
    from corral.api.http_events import http_event
    from corral.handlers.aws import api

    request = app.current_request
    assert request is not None
    context: dict[str, Any] = request.context or {}
    identity: dict[str, Any] = context.get("identity") or {}
    query = request.query_params
    pairs = [(k, v) for k in query for v in query.getlist(k)] if query else []
    target = _path(request)
    if pairs:
        target += "?" + urlencode(pairs)
    event = http_event(
        request.method,
        target,
        list(request.headers.items()),
        raw if isinstance(raw := request.raw_body or b"", bytes) else raw.encode(),
        str(identity.get("sourceIp") or "0.0.0.0"),
        account=str(context.get("accountId") or "123456789012"),
        api_id=str(context.get("apiId") or "chalice"),
        host=str(context.get("domainName") or request.headers.get("host") or "localhost"),
        route_key="ANY /{proxy+}",
    )
    if identity.get("userArn"):
        event["requestContext"]["authorizer"] = {
            "iam": {
                "accessKey": identity.get("accessKey"),
                "accountId": identity.get("accountId"),
                "callerId": identity.get("caller"),
                "cognitoIdentity": None,
                "principalOrgId": identity.get("principalOrgId"),
                "userArn": identity["userArn"],
                "userId": identity.get("user"),
            }
        }
    return _response(api.handler(event, app.lambda_context))


def _response(result: dict[str, Any]) -> Response:
    headers: dict[str, str | list[str]] = {
        str(k): str(v) for k, v in (result.get("headers") or {}).items()
    }
    for key, values in (result.get("multiValueHeaders") or {}).items():
        headers[str(key)] = [str(v) for v in values]
    if result.get("cookies"):
        headers["Set-Cookie"] = [str(c) for c in result["cookies"]]
    raw = result.get("body") or ""
    body: str | bytes = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw)
    return Response(body=body, status_code=int(result.get("statusCode", 200)), headers=headers)


# ---- queues (SQS batch -> the SAM queue handlers) --------------------------------------
def _batch(event: SQSEvent) -> dict[str, Any]:
    """The Lambda SQS event, rebuilt from Chalice's records (each keeps its original dict)."""
    return {"Records": [record.to_dict() for record in event]}


def _settle(result: dict[str, Any], size: int) -> dict[str, Any]:
    failures = result.get("batchItemFailures") or []
    if failures and os.environ.get(REPORTS_ITEM_FAILURES_ENV, "").lower() != "true":
        # Returned, the list would be ignored and the failed records deleted: fail the batch.
        raise BatchFailedError(
            f"{len(failures)} of {size} record(s) failed; the event source mapping does not "
            "report batch item failures, so the whole batch is redelivered"
        )
    return result


@app.on_sqs_message(queue_arn=SCHEDULE_QUEUE_ARN, batch_size=10)
def schedule_queue(event: SQSEvent) -> dict[str, Any]:
    from corral.handlers.aws import schedule

    batch = _batch(event)
    return _settle(schedule.handler(batch, event.context), len(batch["Records"]))


# As in SAM: a 1 s batching window, and at most 5 concurrent batches (EC2 throttles
# RunInstances per account).
@app.on_sqs_message(
    queue_arn=SCALE_UP_QUEUE_ARN,
    batch_size=10,
    maximum_batching_window_in_seconds=1,
    maximum_concurrency=5,
)
def scale_up_queue(event: SQSEvent) -> dict[str, Any]:
    from corral.handlers.aws import scale_up

    batch = _batch(event)
    return _settle(scale_up.handler(batch, event.context), len(batch["Records"]))


@app.on_sqs_message(queue_arn=INTERRUPTIONS_QUEUE_ARN, batch_size=10)
def interruptions_queue(event: SQSEvent) -> dict[str, Any]:
    from corral.handlers.aws import spot_reconcile

    batch = _batch(event)
    return _settle(spot_reconcile.handler(batch, event.context), len(batch["Records"]))


# ---- timers (EventBridge scheduled event -> the SAM handlers) ---------------------------
@app.schedule(Rate(1, unit=Rate.MINUTES), description="Corral schedule safety net")
def schedule_timer(event: CloudWatchEvent) -> dict[str, Any]:
    from corral.handlers.aws import schedule

    return dict(schedule.handler(event.to_dict(), event.context))


@app.schedule(Rate(1, unit=Rate.MINUTES), description="Corral idle reaper")
def idle_reap_timer(event: CloudWatchEvent) -> dict[str, Any]:
    from corral.handlers.aws import idle_reap

    return dict(idle_reap.handler(event.to_dict(), event.context))


@app.schedule(Rate(2, unit=Rate.MINUTES), description="Corral reconcile pass")
def spot_reconcile_timer(event: CloudWatchEvent) -> dict[str, Any]:
    from corral.handlers.aws import spot_reconcile

    return dict(spot_reconcile.handler(event.to_dict(), event.context))
