"""The ``scale_up`` function (scale-up queue): one ``launch_instance`` per message.

Records are independent launches, so each succeeds or fails alone: a failed record is
reported in ``batchItemFailures`` and only it is redelivered (then dead-lettered after the
queue's maxReceiveCount). Duplicates are harmless: ``launch_instance`` moves the record
QUEUED -> REQUESTED with a conditional write before calling EC2, so a second copy of the
same message, in this batch or a later one, finds it taken and skips.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from corral.adapters.aws.sqs_queue import parse_sqs_body
from corral.handlers.aws import composition
from corral.handlers.aws.cold_start import settles_after
from corral.handlers.aws.metrics import LaunchErrorTap, launch_figures, publish
from corral.handlers.aws.observability import count, make_logger, make_metrics
from corral.handlers.aws.sqs_batch import SqsRecord, partial_batch_response
from corral.ports.commands import MalformedCommand, parse
from corral.services.dispatch import dispatch

logger = make_logger("scale_up")
metrics = make_metrics("scale_up")


def record_handler(record: SqsRecord) -> str:
    logger.set_correlation_id(record.message_id)
    try:
        command = parse(parse_sqs_body(record.body))
    except (MalformedCommand, ValueError):
        # A poison message: reported failed like any other, so SQS dead-letters it after
        # maxReceiveCount receives (kept for a look) instead of retrying it forever.
        logger.exception("malformed scale-up message", extra={"body": record.body})
        count(metrics, {"CommandsMalformed": 1})
        raise
    # The cloud behind a tap that counts its refusals by class (CapacityErrors).
    ctx = composition.build_context()
    tap = LaunchErrorTap(ctx.cloud)
    try:
        outcome = dispatch(replace(ctx, cloud=tap), command)
    except Exception:
        logger.exception("scale-up message failed", extra={"body": record.body})
        raise
    publish(metrics, launch_figures(outcome, tap.errors))
    logger.info("scale-up message", extra={"outcome": outcome})
    return outcome


@settles_after  # outermost: after the logs and metrics of the first event
@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Not raising when every record fails: reporting them all has the same effect (all are
    # redelivered) and keeps a bad batch a counted failure rather than a Lambda error.
    response = partial_batch_response(event, record_handler)
    count(metrics, {"RecordsFailed": len(response.get("batchItemFailures", []))})
    return dict(response)
