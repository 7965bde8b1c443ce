"""The ``spot_reconcile`` function, two triggers:

- the EventBridge timer: one reconcile pass (cloud truth against stored truth);
- the interruptions queue, fed by EventBridge rules: each record is one EC2 event (spot
  interruption warning, rebalance recommendation, state change), applied on its own and
  reported in ``batchItemFailures`` if it fails. Events about instances that are not ours
  arrive too (the rules cannot filter by tag): the services ignore them.

A record fails (and SQS retries it, then dead-letters it) only when retrying can help: the
store or EC2 failed. A body that can never parse (not JSON, no ``detail.instance-id`` ...) is
dropped at once with an error log carrying the body and an ``EventsUnparseable`` metric, so
it neither waits out the retries nor delays the good records of later batches.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from corral.adapters.aws.events import (
    EventParseError,
    InstanceStateChange,
    RebalanceRecommendation,
    SpotInterruptionWarning,
    UnsupportedEvent,
    parse_event,
)
from corral.handlers.aws import composition
from corral.handlers.aws.cold_start import settles_after
from corral.handlers.aws.metrics import publish, reconcile_figures
from corral.handlers.aws.observability import count, is_sqs_batch, make_logger, make_metrics
from corral.handlers.aws.sqs_batch import SqsRecord, partial_batch_response
from corral.services.interruptions import NoticeKind, on_cloud_state, on_interruption_notice
from corral.services.reconcile import run_reconcile

logger = make_logger("spot_reconcile")
metrics = make_metrics("spot_reconcile")
_LOGGED_BODY_CHARS = 4096  # EC2 events are well under 1 KB; enough to see what came


def record_handler(record: SqsRecord) -> str:
    try:
        return _apply(record)
    except Exception:
        # The batch processor only reports the record as failed; say why before it retries.
        logger.exception("interruption record failed", extra={"message_id": record.message_id})
        raise


def _apply(record: SqsRecord) -> str:
    logger.set_correlation_id(record.message_id)
    try:
        event = parse_event(record.body)
    except UnsupportedEvent as error:
        # Well-formed but not ours to handle (a rule widened by hand): drop, don't retry.
        logger.warning("unsupported event dropped", extra={"reason": str(error)})
        return "unsupported"
    except EventParseError as error:
        # The same body fails the same way on every retry: drop it now, loudly, rather
        # than report it failed until SQS dead-letters it.
        logger.error(
            "unparseable event dropped",
            extra={
                "message_id": record.message_id,
                "reason": str(error),
                "body": record.body[:_LOGGED_BODY_CHARS],
            },
        )
        count(metrics, {"EventsUnparseable": 1})
        return "unparseable"
    # EventBridge's id, as the rule's logs show it (the message id if the event has none).
    logger.set_correlation_id(event.id or record.message_id)
    ctx = composition.build_context()
    if isinstance(event, SpotInterruptionWarning):
        ours = on_interruption_notice(ctx, event.instance_id, NoticeKind.INTERRUPTION)
        metric = "InterruptionNotices"
    elif isinstance(event, RebalanceRecommendation):
        ours = on_interruption_notice(ctx, event.instance_id, NoticeKind.REBALANCE)
        metric = "RebalanceNotices"
    elif isinstance(event, InstanceStateChange):
        ours = on_cloud_state(ctx, event.instance_id, event.detail.state)
        metric = "InstancesGone"
    else:  # a timer event routed to the queue by mistake: the timer trigger covers it
        return "ignored"
    count(metrics, {metric if ours else "EventsIgnored": 1})
    logger.info(
        "cloud event",
        extra={"detail_type": event.detail_type, "instance_id": event.instance_id, "ours": ours},
    )
    return "applied" if ours else "ignored"


def _reconcile(event: dict[str, Any]) -> dict[str, Any]:
    logger.set_correlation_id(event.get("id"))
    report = run_reconcile(composition.build_context())
    publish(metrics, reconcile_figures(report))
    logger.info("reconcile pass", extra={"applied": report.applied, "conflicts": report.conflicts})
    return {"applied": report.applied, "conflicts": report.conflicts}


@settles_after  # outermost: after the logs and metrics of the first event
@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if not is_sqs_batch(event):
        return _reconcile(event)
    # Not raising when every record fails: reporting them all has the same effect (all are
    # redelivered) and keeps a bad batch a counted failure rather than a Lambda error.
    response = partial_batch_response(event, record_handler)
    count(metrics, {"RecordsFailed": len(response.get("batchItemFailures", []))})
    return dict(response)
