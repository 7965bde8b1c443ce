"""Powertools setup the AWS handlers share: a Logger and EMF Metrics per function.

No Tracer anywhere: each function spends its time in a few DynamoDB, EC2 and SQS calls that
the logs and metrics already account for, and creating ``Tracer()`` imports the X-Ray SDK
(~0.25 s of every cold start) even with tracing off. If a trace is ever needed, turning on
``Tracing: Active`` on the function gives the service map without the SDK.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

NAMESPACE = "Corral"  # unless the environment names one (the template's MetricsNamespace)
NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"


def make_logger(service: str) -> Logger:
    return Logger(service=f"corral-{service}")


def make_metrics(service: str) -> Metrics:
    # The service becomes the one dimension of every metric (Powertools' default).
    return Metrics(namespace=os.environ.get(NAMESPACE_ENV) or NAMESPACE, service=service)


def count(metrics: Metrics, counts: Mapping[str, int]) -> None:
    """Add counters, zeros included: a dashboard then shows 0, not a gap."""
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def is_sqs_batch(event: Mapping[str, Any]) -> bool:
    """An SQS event source batch, as opposed to an EventBridge timer event."""
    records = event.get("Records")
    return isinstance(records, list) and all(
        isinstance(r, Mapping) and r.get("eventSource") == "aws:sqs" for r in records
    )
