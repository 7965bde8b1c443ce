"""Cloud Functions (2nd gen) entry points: ``api`` (HTTP) and four CloudEvent functions fed by
Pub/Sub through Eventarc (commands, Cloud Scheduler ticks and preemption log entries).

Each function parses its trigger, calls one service, and maps the result; the rules live in
the services, exactly as behind the Lambda handlers.

Failure semantics: a CloudEvent function that raises fails the delivery, and Pub/Sub
redelivers it under the subscription's retry policy (deploy.sh deploys with ``--retry``
and a backoff). So: transient failures raise (retried); a payload that can never succeed
(malformed, unknown kind) is logged and acknowledged, never retried forever; a delayed
command that arrived early raises ``NotDue`` (see ``pubsub_queue``) to come back later.

Metrics: each run also prints one JSON line (``corral.handlers.aws.metrics.log_line``), the
same figures the Lambda functions publish as EMF; Cloud Logging stores it as a structured entry
for the log-based metrics of docs/gcp.md.

Cold start: functions-framework and Flask are already loaded by the runtime; Powertools'
resolver loads with the first API request, the Google clients with the first call that
needs them (``composition``), so ``/healthz`` never waits for Firestore. Garbage collection is
deferred until a function's first event, then the start is frozen (``corral.handlers.aws.
cold_start``, the same as the Lambda functions).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
from dataclasses import replace
from typing import Any

import flask
import functions_framework

from corral.handlers.aws.cold_start import settles_after
from corral.handlers.gcp import composition
from corral.services.shared.service_context import Context

log = logging.getLogger("corral.handlers.gcp")


def _ctx() -> Context:
    # Looked up on the module at call time, so tests can monkeypatch build_context.
    return composition.build_context()


@functools.cache
def resolver() -> Any:
    """The same HTTP API resolver as on AWS, built once per instance."""
    from corral.api.app import build_resolver
    from corral.api.auth import authenticator_from_env
    from corral.api.auth_gcp import gcp_authenticator_from_env

    if os.environ.get("CORRAL_API_AUTH", "gcp") == "gcp":
        auth: Any = gcp_authenticator_from_env(os.environ)
    else:  # "token": a deployment for tests or a private network (see api/auth.py)
        auth = authenticator_from_env(os.environ)
    return build_resolver(_ctx, auth)


@functions_framework.http
@settles_after
def api(request: flask.Request) -> flask.Response:
    """Flask request -> API Gateway HTTP API v2 event -> the resolver -> Flask response."""
    from corral.api.http_events import http_event, http_reply

    target = request.path + (f"?{request.query_string.decode()}" if request.query_string else "")
    event = http_event(
        request.method,
        target,
        list(request.headers.items()),
        request.get_data(),
        request.headers.get("X-Forwarded-For", request.remote_addr or "").split(",")[0].strip(),
        account=os.environ.get("GOOGLE_CLOUD_PROJECT", "gcp"),
        api_id="cloud-functions",
        host=request.host,
    )
    status, headers, cookies, body = http_reply(resolver().resolve(event, None))
    response = flask.Response(body, status=status)
    for key, value in headers.items():
        if key not in ("content-length", "connection", "transfer-encoding"):
            response.headers[key] = value
    for cookie in cookies:
        response.headers.add("set-cookie", cookie)
    return response


def _payload(cloud_event: Any) -> dict[str, Any]:
    """The JSON a Pub/Sub CloudEvent carries (base64 in ``message.data``); {} if none."""
    message = (cloud_event.data or {}).get("message") or {}
    try:
        decoded = json.loads(base64.b64decode(message.get("data") or b"") or b"{}")
    except (ValueError, TypeError):
        return {}
    return decoded if isinstance(decoded, dict) else {}


@functions_framework.cloud_event
@settles_after
def schedule(cloud_event: Any) -> None:
    """Schedule topic: commands and the one-minute Cloud Scheduler tick. Every message
    means "something changed: run a pass", so any delivery runs exactly one pass."""
    from corral.handlers.aws.metrics import Stopwatch, log_line, schedule_figures
    from corral.services.schedule_pass import run_schedule_pass

    ctx = _ctx()
    stopwatch = Stopwatch()
    report = run_schedule_pass(ctx)
    latency_ms = stopwatch.elapsed_ms()
    log.info(
        "schedule pass: assigned=%d launched=%d cancelled=%d conflicts=%d (event %s)",
        len(report.assigned),
        len(report.launched),
        len(report.cancelled),
        report.conflicts,
        cloud_event["id"],
    )
    log_line(
        "schedule",
        schedule_figures(report, latency_ms, messages=1),
        breaker_open=report.gauges.breaker_open,
        budget_reached=report.gauges.budget_reached,
    )


@functions_framework.cloud_event
@settles_after
def scale_up(cloud_event: Any) -> None:
    """Scale-up topic: one ``launch_instance`` per message (idempotent per record)."""
    from corral.adapters.gcp.pubsub_queue import check_due, parse_delivery
    from corral.handlers.aws.metrics import LaunchErrorTap, launch_figures, log_line
    from corral.ports.commands import parse
    from corral.services.dispatch import dispatch

    try:
        delivery = parse_delivery(cloud_event.data or {})
        command = parse(delivery.message)
    except ValueError as error:  # MalformedCommand too: it can never succeed
        log.error("scale-up message dropped (malformed): %s", error)
        return
    ctx = _ctx()
    check_due(delivery, ctx.clock.now())  # NotDue: fail the delivery, Pub/Sub brings it back
    tap = LaunchErrorTap(ctx.cloud)  # counts the cloud's refusals by class (CapacityErrors)
    try:
        outcome = dispatch(replace(ctx, cloud=tap), command)
    except (KeyError, ValueError) as error:  # the same again would fail the same way
        log.error("scale-up message %s dropped: %s", delivery.message_id, error)
        return
    log.info("scale-up message %s: %s", delivery.message_id, outcome)
    log_line("scale_up", launch_figures(outcome, tap.errors))


@functions_framework.cloud_event
@settles_after
def idle_reap(cloud_event: Any) -> None:
    """Cloud Scheduler tick (through its topic): drain and delete agents idle too long."""
    from corral.handlers.aws.metrics import log_line, reap_figures
    from corral.services.idle_reap import run_idle_reap

    report = run_idle_reap(_ctx())
    log_line("idle_reap", reap_figures(report))
    log.info(
        "idle reap: drained=%s undrained=%s terminated=%s",
        report.drained,
        report.undrained,
        report.terminated,
    )


@functions_framework.cloud_event
@settles_after
def spot_reconcile(cloud_event: Any) -> None:
    """Interruptions topic: a preemption log entry (drain, requeue, replace) or the
    scheduler's tick (one reconcile pass: cloud truth against stored truth)."""
    from corral.adapters.gcp.gce_events import preemption
    from corral.ports.commands import CommandKind

    payload = _payload(cloud_event)
    preempted = preemption(payload)
    if preempted is not None:
        from corral.services.interruptions import NoticeKind, on_interruption_notice

        ours = on_interruption_notice(_ctx(), preempted.instance_name, NoticeKind.INTERRUPTION)
        log.info("preemption of %s (ours: %s)", preempted.instance_name, ours)
        return
    if payload.get("kind") not in (None, CommandKind.RECONCILE):
        log.warning("interruptions topic: %s dropped", payload.get("kind"))
        return
    from corral.handlers.aws.metrics import log_line, reconcile_figures
    from corral.services.reconcile import run_reconcile

    report = run_reconcile(_ctx())
    log.info("reconcile pass: applied=%s conflicts=%d", report.applied, report.conflicts)
    log_line("spot_reconcile", reconcile_figures(report))


__all__ = ["api", "idle_reap", "resolver", "scale_up", "schedule", "spot_reconcile"]
