"""The ``schedule`` function: the schedule queue and the one-minute EventBridge timer.

Every schedule message means the same thing ("something changed: run a pass"), and one pass
sees everything, so a batch of any size, or a timer tick, runs exactly one pass: a burst of
ten submits costs one pass, not ten. There is no per-message outcome to report: if the pass
fails the handler raises and SQS redelivers the whole batch (the timer would cover it too).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from corral.adapters.aws.sqs_queue import parse_sqs_body
from corral.handlers.aws import composition
from corral.handlers.aws.cold_start import settles_after
from corral.handlers.aws.metrics import Stopwatch, publish, schedule_figures
from corral.handlers.aws.observability import is_sqs_batch, make_logger, make_metrics
from corral.ports.commands import Schedule, parse
from corral.services.schedule_pass import run_schedule_pass

logger = make_logger("schedule")
metrics = make_metrics("schedule")


@settles_after  # outermost: after the logs and metrics of the first event
@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    records: list[dict[str, Any]] = event["Records"] if is_sqs_batch(event) else []
    if records:
        # The first message stands for the batch; every id is logged for tracing back.
        logger.set_correlation_id(records[0].get("messageId"))
        logger.info(
            "schedule messages",
            extra={"message_ids": [r["messageId"] for r in records], "reasons": _reasons(records)},
        )
    else:
        logger.set_correlation_id(event.get("id"))
    ctx = composition.build_context()
    stopwatch = Stopwatch()
    report = run_schedule_pass(ctx)
    latency_ms = stopwatch.elapsed_ms()
    gauges = report.gauges
    publish(metrics, schedule_figures(report, latency_ms, len(records)))
    logger.info(
        "schedule pass",
        extra={
            "trigger": f"{len(records)} message(s)" if records else "timer",
            "assigned": report.assigned,
            "launched": report.launched,
            "cancelled": report.cancelled,
            "conflicts": report.conflicts,
            "pending_trials": gauges.pending_trials,
            "breaker_open": gauges.breaker_open,
            "budget_reached": gauges.budget_reached,
        },
    )
    # Read only when the event source mapping reports batch item failures: none here.
    return {"batchItemFailures": []}


def _reasons(records: list[dict[str, Any]]) -> list[str]:
    """What the messages say woke the pass, for the log. One that is not a schedule command
    is logged and otherwise ignored: the pass runs anyway, so it is not retried."""
    reasons: list[str] = []
    for record in records:
        try:
            command = parse(parse_sqs_body(str(record.get("body", ""))))
        except ValueError as error:  # MalformedCommand included
            logger.warning(
                "schedule message not understood",
                extra={"message_id": record.get("messageId"), "reason": str(error)},
            )
            continue
        reasons.append(command.reason if isinstance(command, Schedule) else command.kind.value)
    return reasons
