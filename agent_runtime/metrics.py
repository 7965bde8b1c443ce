"""GPU metrics: sampled for every heartbeat and, when the pool names a namespace, pushed to
CloudWatch (at most once per ``cloudwatch_metrics_interval_s``: PutMetricData is billed)."""

from __future__ import annotations

import logging
from typing import Any

from corral.protocol.agent import GpuMetric

log = logging.getLogger(__name__)


class CloudWatchMetrics:
    def __init__(
        self,
        namespace: str,
        dimensions: dict[str, str],
        interval_s: float,
        region: str | None,
        client: Any = None,
    ) -> None:
        if client is None:
            import boto3  # type: ignore[import-untyped,unused-ignore]

            client = boto3.client("cloudwatch", region_name=region)
        self._client = client
        self._namespace = namespace
        self._dimensions = [{"Name": k, "Value": v} for k, v in sorted(dimensions.items())]
        self._interval = interval_s
        self._last: float | None = None

    def maybe_put(self, now: float, metrics: list[GpuMetric]) -> bool:
        if not metrics or (self._last is not None and now - self._last < self._interval):
            return False
        self._last = now
        data = []
        for m in metrics:
            dims = [*self._dimensions, {"Name": "GpuIndex", "Value": str(m.index)}]
            data.append(
                {
                    "MetricName": "GPUUtilization",
                    "Dimensions": dims,
                    "Value": m.utilization_pct,
                    "Unit": "Percent",
                }
            )
            data.append(
                {
                    "MetricName": "GPUMemoryUsed",
                    "Dimensions": dims,
                    "Value": m.memory_used_mib,
                    "Unit": "Megabytes",
                }
            )
        try:
            for start in range(0, len(data), 1000):  # the API's per-call limit
                self._client.put_metric_data(
                    Namespace=self._namespace, MetricData=data[start : start + 1000]
                )
        except Exception as exc:  # metrics are advisory: never let them disturb the agent
            log.warning("CloudWatch PutMetricData failed: %s", exc)
            return False
        return True
