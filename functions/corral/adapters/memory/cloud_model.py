"""The simulated cloud's configuration and its per-instance / per-request bookkeeping.

Every time that matters (running, interruption notice, termination) is fixed when it becomes
known (at launch, fill, terminate or interrupt) and states are computed from those times and
the clock on read. Nothing runs in the background, and a run is reproducible however often it
is observed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.domain.offerings import Offering
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.ports.cloud import CloudInstance, CloudState, SpotRequest, SpotRequestState


@dataclass(frozen=True)
class SimulatedCloudConfig:
    """Knobs of the simulated cloud. Defaults: on-demand-like behaviour, no faults."""

    ownership: tuple[str, str] = ("managed-by", "corral")
    pool_tag_key: str = POOL_TAG
    record_tag_key: str = RECORD_TAG
    seed: int = 0
    # Launch to running, drawn uniformly in [mean - jitter, mean + jitter] (floored at 0).
    boot_s_mean: float = 60.0
    boot_s_jitter: float = 0.0
    # terminate() -> TERMINATING for this long, then TERMINATED (0: at once).
    terminate_s: float = 0.0
    # EC2 keeps terminated instances describable for about an hour, closed spot requests
    # for about four; then they vanish. Reconcile must treat both cases alike.
    terminated_visible_s: float = 3600.0
    spot_request_visible_s: float = 4 * 3600.0
    # Probability that a launch is refused for capacity, by offering key or instance type
    # (the offering key wins when both are given).
    capacity_error_rate: Mapping[str, float] = field(default_factory=dict)
    # Account quota over every live instance, ours and foreign, plus open spot requests.
    max_instances: int | None = None
    max_gpus: int | None = None
    # Spot: 0 fills a request at once; > 0 keeps it open that long before it fills.
    spot_open_s: float = 0.0
    # Interruptions per running spot instance-hour (exponential; drawn at launch).
    spot_hazard_per_hour: float = 0.0
    notice_s: float = 120.0  # AWS: two minutes' warning (GCP: about 30 s)
    # Billing: per second from the pending -> running transition until termination starts
    # (or the interruption, or a stop), with EC2's 60-second minimum for Linux per run.
    min_billed_s: float = 60.0
    # A stopped instance's start to running (the start call's pending phase), uniform.
    start_s_mean: float = 15.0
    start_s_jitter: float = 0.0
    # stop() -> STOPPING for this long, then STOPPED (0: at once).
    stop_s: float = 0.0
    # What a stopped instance costs an hour (its disks), by pool tag; 0 when not given.
    stopped_usd_per_hour: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InterruptionNotice:
    cloud_id: str
    pool: str | None
    record_id: str | None
    notice_at: float
    interrupt_at: float


@dataclass(slots=True)
class SimInstance:
    cloud_id: str
    tags: dict[str, str]
    offering: Offering
    launched_at: float
    running_at: float
    private_ip: str
    spot_request_id: str | None = None
    notice_at: float | None = None
    interrupt_at: float | None = None
    stop_at: float | None = None  # terminate() was called (billing stops)
    halted_at: float | None = None  # stop() was called: billing stops, STOPPING
    parked_at: float | None = None  # ... and STOPPED from here: disks only
    billed_s_before: float = 0.0  # runs before the last start (each with its minimum)
    past_runs: list[tuple[float, float]] = field(default_factory=list)  # (running, billed end)
    parked_s_before: float = 0.0  # stopped spans before the last start
    gone_at: float | None = None  # ... and the instance is fully terminated
    settled: bool = False  # moved out of the live set (its end has passed)
    notice_delivered: bool = False

    @property
    def end_at(self) -> float | None:
        """When it reaches TERMINATED: the earlier of termination and interruption."""
        ends = [t for t in (self.gone_at, self.interrupt_at) if t is not None]
        return min(ends) if ends else None

    @property
    def billing_stop(self) -> float | None:
        stops = [t for t in (self.stop_at, self.interrupt_at, self.halted_at) if t is not None]
        return min(stops) if stops else None

    @property
    def interrupted(self) -> bool:
        """Whether the cloud, not us, ends it (or ended it)."""
        return self.interrupt_at is not None and (
            self.stop_at is None or self.interrupt_at < self.stop_at
        )

    def state(self, now: float) -> CloudState:
        end = self.end_at
        if end is not None and now >= end:
            return CloudState.TERMINATED
        if self.stop_at is not None and now >= self.stop_at:
            return CloudState.TERMINATING
        if self.parked_at is not None and now >= self.parked_at:
            return CloudState.STOPPED
        if self.halted_at is not None and now >= self.halted_at:
            return CloudState.STOPPING
        return CloudState.RUNNING if now >= self.running_at else CloudState.PENDING

    def halt(self, now: float, stop_s: float) -> None:
        """stop(): compute billing ends now; an interruption not announced yet is off (a
        stopped instance is not interrupted; a start draws a new one)."""
        self.halted_at = now
        self.parked_at = now + stop_s
        if self.interrupt_at is not None and (self.notice_at is None or self.notice_at > now):
            self.interrupt_at = self.notice_at = None

    def resume(self, now: float, start_s: float, min_billed_s: float) -> None:
        """start(): the last run's billing and the stopped span are closed; a new run."""
        self.past_runs = self.runs(now, min_billed_s)
        self.billed_s_before = self.billed_seconds(now, min_billed_s)
        self.parked_s_before = self.parked_seconds(now)
        self.halted_at = self.parked_at = None
        self.launched_at = now
        self.running_at = now + start_s
        self.notice_delivered = False

    def runs(self, until: float, min_billed_s: float) -> list[tuple[float, float]]:
        """Every billed run up to ``until``: (running from, billed until), minimum included."""
        current = self.billed_seconds(until, min_billed_s) - self.billed_s_before
        if current <= 0:
            return list(self.past_runs)
        return [*self.past_runs, (self.running_at, self.running_at + current)]

    def parked_seconds(self, until: float) -> float:
        """Seconds spent stopped (disks billed, compute not) up to ``until``."""
        if self.parked_at is None or until <= self.parked_at:
            return self.parked_s_before
        ends = [t for t in (self.stop_at, self.end_at) if t is not None]
        end = min([until, *ends])
        return self.parked_s_before + max(0.0, end - self.parked_at)

    def notice(self, now: float, pool_tag: str, record_tag: str) -> InterruptionNotice | None:
        """The interruption notice, once issued (and unless we terminated it first)."""
        if self.notice_at is None or self.interrupt_at is None or self.notice_at > now:
            return None
        if self.stop_at is not None and self.stop_at < self.notice_at:
            return None
        return InterruptionNotice(
            self.cloud_id,
            self.tags.get(pool_tag),
            self.tags.get(record_tag),
            self.notice_at,
            self.interrupt_at,
        )

    def billed_seconds(self, until: float, min_billed_s: float) -> float:
        """Compute seconds billed up to ``until``: earlier runs plus the current one."""
        stop = self.billing_stop
        end = until if stop is None else min(stop, until)
        seconds = max(0.0, end - self.running_at)
        if seconds > 0 and stop is not None and stop <= until:
            seconds = max(seconds, min_billed_s)  # a finished run pays the minimum
        return self.billed_s_before + seconds

    def billed_usd(
        self, until: float, min_billed_s: float, stopped_usd_per_hour: float = 0.0
    ) -> float:
        compute = self.billed_seconds(until, min_billed_s) / 3600.0 * self.offering.hourly_price
        return compute + self.parked_seconds(until) / 3600.0 * stopped_usd_per_hour

    def snapshot(self, now: float, pool_tag: str, record_tag: str) -> CloudInstance:
        return CloudInstance(
            cloud_id=self.cloud_id,
            pool=self.tags.get(pool_tag, ""),
            record_id=self.tags.get(record_tag),
            instance_type=self.offering.instance_type,
            location=self.offering.location,
            is_spot=self.offering.is_spot,
            state=self.state(now),
            launched_at=self.launched_at,
            spot_request_id=self.spot_request_id,
            private_ip=self.private_ip,
        )


@dataclass(slots=True)
class SimSpotRequest:
    request_id: str
    tags: dict[str, str]
    offering: Offering
    created_at: float
    fill_at: float
    boot_s: float  # drawn at request time so the run does not depend on when it is read
    interrupt_after_s: float | None
    state: SpotRequestState = SpotRequestState.OPEN
    status_code: str = "pending-fulfillment"
    instance_id: str | None = None
    closed_at: float | None = None

    def snapshot(self, pool_tag: str, record_tag: str) -> SpotRequest:
        return SpotRequest(
            request_id=self.request_id,
            pool=self.tags.get(pool_tag, ""),
            record_id=self.tags.get(record_tag),
            state=self.state,
            status_code=self.status_code,
            created_at=self.created_at,
            instance_id=self.instance_id,
        )


def interruption_delay(rate_per_hour: float, u: float) -> float | None:
    """Seconds of running until an interruption, by inverse transform of ``u`` in [0, 1)."""
    if rate_per_hour <= 0:
        return None
    return -math.log(1.0 - u) * 3600.0 / rate_per_hour
