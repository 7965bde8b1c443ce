"""What the functions report as metrics, from what the services return.

One mapping for both clouds: the AWS handlers hand the figures to Powertools' EMF
``Metrics`` (``publish``), the Cloud Functions print them as one structured log line each
(``log_line``) for Cloud Logging's log-based metrics. Nothing here imports Powertools, so
the GCP functions import this module as it is.

The figures (docs/aws.md, "Metrics and alarms", lists them with the alarms built on them):

- counts of what a pass or a message did: launches, terminations, capacity errors, ...;
- gauges of the fleet as the schedule pass left it (``PassReport.gauges``, from what the
  pass read: ``corral.services.fleet_gauges``): pending trials, idle instances, and how
  many pools have their circuit breaker open or their budget reached. Counts of pools
  rather than one metric per pool, so the template's alarms need no pool
  names; which pools it is, is in the same log line and in ``corral pool list``;
- ``DecisionLatency``: how long the schedule pass took (place, plan, write), in ms.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.ports.cloud import (
    CloudInstance,
    CloudProvider,
    LaunchRequest,
    LaunchResult,
    SpotRequest,
)
from corral.services.scale_up import LaunchOutcome

if TYPE_CHECKING:  # annotations only: each handler imports just the service it runs
    from corral.services.idle_reap import ReapReport
    from corral.services.reconcile import ReconcileReport
    from corral.services.schedule_pass import PassReport

COUNT = "Count"
MILLISECONDS = "Milliseconds"


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str = COUNT  # a CloudWatch unit name


def schedule_figures(report: PassReport, latency_ms: float, messages: int) -> list[Figure]:
    gauges = report.gauges
    return [
        Figure("ScheduleMessages", messages),
        Figure("TrialsAssigned", len(report.assigned)),
        Figure("LaunchesPlanned", len(report.launched)),
        Figure("LaunchesCancelled", len(report.cancelled)),
        Figure("Conflicts", report.conflicts),
        Figure("PendingTrials", gauges.pending_trials),
        Figure("IdleInstances", gauges.idle_instances),
        Figure("PoolsBreakerOpen", len(gauges.breaker_open)),
        Figure("PoolsBudgetReached", len(gauges.budget_reached)),
        Figure("DecisionLatency", round(latency_ms, 3), MILLISECONDS),
    ]


def reap_figures(report: ReapReport) -> list[Figure]:
    return [
        Figure("AgentsDrained", len(report.drained)),
        Figure("AgentsUndrained", len(report.undrained)),
        Figure("Terminations", len(report.terminated)),
        Figure("AgentsStopped", len(report.stopped)),
    ]


def reconcile_figures(report: ReconcileReport) -> list[Figure]:
    return [
        Figure("ReconcileActions", len(report.applied)),
        Figure("Terminations", report.terminations),
        Figure("Conflicts", report.conflicts),
    ]


# dispatch() returns the LaunchOutcome's value for launch commands.
_OUTCOME_METRIC: dict[str, str] = {
    LaunchOutcome.LAUNCHED: "Launches",
    LaunchOutcome.SPOT_REQUEST_OPEN: "Launches",
    LaunchOutcome.FAILED: "LaunchesFailed",
    LaunchOutcome.RETRYING: "LaunchesDeferred",
    LaunchOutcome.WAITING: "LaunchesDeferred",
    LaunchOutcome.REPLANNED: "LaunchesDeferred",
    LaunchOutcome.SKIPPED: "LaunchesSkipped",
}


def launch_figures(outcome: str, errors: Counter[LaunchErrorClass]) -> list[Figure]:
    """One scale-up message: its outcome, and the cloud's refusals by class (a capacity
    error shows as a deferred launch that will try another offering)."""
    return [
        Figure(_OUTCOME_METRIC.get(outcome, "OtherCommands"), 1),
        Figure("CapacityErrors", errors[LaunchErrorClass.CAPACITY]),
        Figure("LaunchErrors", sum(errors.values())),
    ]


@dataclass
class LaunchErrorTap:
    """A CloudProvider that passes everything through and counts the LaunchErrors its
    ``launch`` raises, by class: the services keep the class to themselves (it becomes a
    pool-state change and an event), the metrics want it too."""

    cloud: CloudProvider
    errors: Counter[LaunchErrorClass] = field(default_factory=Counter)

    def launch(self, request: LaunchRequest) -> LaunchResult:
        try:
            return self.cloud.launch(request)
        except LaunchError as error:
            self.errors[error.error_class] += 1
            raise

    def list_owned(self) -> list[CloudInstance]:
        return self.cloud.list_owned()

    def list_spot_requests(self) -> list[SpotRequest]:
        return self.cloud.list_spot_requests()

    def terminate(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        return self.cloud.terminate(cloud_ids)

    def cancel_spot_requests(self, request_ids: Sequence[str]) -> None:
        self.cloud.cancel_spot_requests(request_ids)

    def stop(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        return self.cloud.stop(cloud_ids)

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        try:
            return self.cloud.start(cloud_id, token)
        except LaunchError as error:
            self.errors[error.error_class] += 1
            raise


class Stopwatch:
    """Milliseconds since it was made (a monotonic clock, injectable for tests)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = clock()

    def elapsed_ms(self) -> float:
        return (self._clock() - self._start) * 1000.0


class MetricSink(Protocol):
    """What ``publish`` needs of Powertools' ``Metrics``."""

    def add_metric(self, name: str, unit: Any, value: float) -> None: ...


def publish(metrics: MetricSink, figures: Iterable[Figure]) -> None:
    """Add the figures to the invocation's EMF blob, zeros included: a dashboard then shows
    0, not a gap."""
    for f in figures:
        metrics.add_metric(name=f.name, unit=f.unit, value=f.value)


def log_line(
    service: str,
    figures: Sequence[Figure],
    stream: IO[str] | None = None,
    **details: object,
) -> None:
    """One JSON line on stdout, which Cloud Functions (2nd gen) turn into a structured
    entry: ``jsonPayload.metrics.<Name>`` for log-based metrics, ``jsonPayload.service`` to
    tell the functions apart."""
    entry = {
        "severity": "INFO",
        "message": f"corral metrics: {service}",
        "service": service,
        "metrics": {f.name: f.value for f in figures},
        **details,
    }
    print(json.dumps(entry, sort_keys=True, default=str), file=stream or sys.stdout, flush=True)
