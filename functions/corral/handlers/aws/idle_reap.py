"""The ``idle_reap`` function (EventBridge timer): drain and terminate agents idle past
their pool's ``max_idle_agent_period``; the rules live in ``services.idle_reap``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from corral.handlers.aws import composition
from corral.handlers.aws.cold_start import settles_after
from corral.handlers.aws.metrics import publish, reap_figures
from corral.handlers.aws.observability import make_logger, make_metrics
from corral.services.idle_reap import run_idle_reap

logger = make_logger("idle_reap")
metrics = make_metrics("idle_reap")


@settles_after  # outermost: after the logs and metrics of the first event
@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = run_idle_reap(composition.build_context())
    publish(metrics, reap_figures(report))
    summary = {
        "drained": report.drained,
        "undrained": report.undrained,
        "terminated": report.terminated,
        "stopped": report.stopped,
        "lost": report.lost,
    }
    logger.info("idle reap pass", extra=summary)
    return summary
