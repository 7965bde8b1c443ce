"""SimulatedCloud: the CloudProvider port without a cloud, for tests, the simulator and dev.

It behaves like EC2 where Corral's correctness depends on it: idempotency tokens, ownership
tags, instances that boot for a while, capacity and quota refusals, spot requests that stay
open, interruptions announced ``notice_s`` ahead, and terminated instances that stay listed
for a while and then vanish. Faults can be drawn from seeded distributions or injected.

Cost: a launch is O(log n). Time-driven changes (a spot request filling, an instance ending,
a notice) are entries in one heap, settled in time order up to the clock whenever the cloud
is used, so an instance's fate never depends on how often anyone looks at it.

EC2 facts kept on purpose:
- Billing runs per second from the pending -> running transition until termination starts
  (or the interruption), with a 60-second minimum.
- Cancelling a *filled* spot request leaves its instance running: the reconciler must
  terminate it. A one-time request closes when its instance ends.
- ``terminate`` and ``cancel_spot_requests`` silently skip unknown, foreign and finished ids.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence

from corral.adapters.memory.cloud_ledger import Due, Ledger
from corral.adapters.memory.cloud_model import (
    InterruptionNotice,
    SimInstance,
    SimulatedCloudConfig,
    interruption_delay,
)
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType, Offering
from corral.ports.clock import Clock
from corral.ports.cloud import (
    CloudInstance,
    CloudState,
    LaunchRequest,
    LaunchResult,
    SpotRequest,
    SpotRequestState,
)

NoticeCallback = Callable[[InterruptionNotice], None]


class SimulatedCloud:
    """Implements ``corral.ports.cloud.CloudProvider``; thread-safe."""

    def __init__(self, clock: Clock, config: SimulatedCloudConfig | None = None) -> None:
        self.config = config or SimulatedCloudConfig()
        self.api_calls: Counter[str] = Counter()
        self._clock = clock
        self._lock = threading.RLock()
        seed = self.config.seed
        # One stream per kind of draw: enabling capacity errors does not shift boot times.
        self._boot_rng = random.Random(f"{seed}:boot")
        self._capacity_rng = random.Random(f"{seed}:capacity")
        self._spot_rng = random.Random(f"{seed}:spot")
        self._books = Ledger(self.config)
        self._by_token: dict[str, tuple[tuple[str, str, str], LaunchResult]] = {}
        self._injected: deque[LaunchError] = deque()
        self._callbacks: list[NoticeCallback] = []

    # ---- the port -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> LaunchResult:
        self.deliver_notices()
        offering = request.offering
        with self._lock:
            now = self._clock.now()
            self.api_calls["launch"] += 1
            if self._injected:
                raise self._injected.popleft()
            fingerprint = (request.record_id, request.pool, offering.key)
            prior = self._by_token.get(request.token)
            if prior is not None:
                if prior[0] != fingerprint:
                    raise LaunchError(
                        LaunchErrorClass.INVALID_CONFIG,
                        "IdempotentParameterMismatch",
                        f"token {request.token} was used with other parameters",
                    )
                return self._refreshed(prior[1])
            self._check_capacity(offering)
            self._check_quota(offering)
            boot_s = max(
                0.0,
                self.config.boot_s_mean
                + self._boot_rng.uniform(-self.config.boot_s_jitter, self.config.boot_s_jitter),
            )
            interrupt_after = (
                interruption_delay(self.config.spot_hazard_per_hour, self._spot_rng.random())
                if offering.is_spot
                else None
            )
            tags = self._tags(request.pool, request.record_id)
            if offering.is_spot:
                result = self._books.request_spot(now, offering, tags, boot_s, interrupt_after)
            else:
                instance = self._books.start(now, offering, tags, boot_s)
                result = LaunchResult(instance.cloud_id, None, now)
            self._by_token[request.token] = (fingerprint, result)
            return result

    def list_owned(self) -> list[CloudInstance]:
        """Live instances carrying our ownership pair and pool tag, plus those terminated
        within ``terminated_visible_s``."""
        self.deliver_notices()
        with self._lock:
            now = self._clock.now()
            self.api_calls["list_owned"] += 1
            found = itertools.chain(self._books.live.values(), self._books.recent)
            return [self._books.snapshot(i, now) for i in found if self._books.owns(i.tags)]

    def list_spot_requests(self) -> list[SpotRequest]:
        self.deliver_notices()
        cfg = self.config
        with self._lock:
            self.api_calls["list_spot_requests"] += 1
            found = itertools.chain(self._books.open_or_active.values(), self._books.closed)
            return [
                r.snapshot(cfg.pool_tag_key, cfg.record_tag_key)
                for r in found
                if self._books.owns(r.tags)
            ]

    def terminate(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        self.deliver_notices()
        confirmed: set[str] = set()
        with self._lock:
            now = self._clock.now()
            self.api_calls["terminate"] += 1
            for cloud_id in cloud_ids:
                instance = self._books.instances.get(cloud_id)
                if instance is None or not self._books.owns(instance.tags):
                    continue  # unknown or foreign: silently skipped
                if instance.settled:
                    # Gone; confirmed only while still listed, as EC2 and GCE do.
                    if instance in self._books.recent:
                        confirmed.add(cloud_id)
                    continue
                confirmed.add(cloud_id)
                if instance.stop_at is not None:
                    continue  # already shutting down
                instance.stop_at = now
                instance.gone_at = now + self.config.terminate_s
                self._books.schedule_end(instance)
        self.deliver_notices()  # settles a termination that is immediate
        return frozenset(confirmed)

    def stop(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        """Stop ours that are pending or running (billing ends; STOPPED after ``stop_s``);
        ones already stopping or stopped are confirmed; anything else is skipped."""
        self.deliver_notices()
        confirmed: set[str] = set()
        with self._lock:
            now = self._clock.now()
            self.api_calls["stop"] += 1
            for cloud_id in cloud_ids:
                instance = self._books.live.get(cloud_id)
                if instance is None or not self._books.owns(instance.tags):
                    continue
                interrupted = instance.interrupt_at is not None and instance.interrupt_at <= now
                if instance.stop_at is not None or interrupted:
                    continue  # terminating, or interrupted: gone, not stoppable
                confirmed.add(cloud_id)
                if instance.halted_at is None:
                    instance.halt(now, self.config.stop_s)
                    self._books.release(instance.offering)  # a stopped one holds no quota
        return frozenset(confirmed)

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        """Start a stopped instance of ours again (a new run: new boot, new billing, a new
        interruption draw for spot); a pending or running one is confirmed as it is."""
        self.deliver_notices()
        with self._lock:
            now = self._clock.now()
            self.api_calls["start"] += 1
            instance = self._books.live.get(cloud_id)
            if instance is None or not self._books.owns(instance.tags) or instance.stop_at:
                raise LaunchError.invalid_config(
                    "InvalidInstanceID.NotFound", f"{cloud_id} is not a stopped instance of ours"
                )
            state = instance.state(now)
            if state is CloudState.STOPPING:
                raise LaunchError(LaunchErrorClass.THROTTLED, "IncorrectInstanceState", "stopping")
            if state is not CloudState.STOPPED:
                return LaunchResult(cloud_id, instance.spot_request_id, instance.launched_at)
            self._check_capacity(instance.offering)
            self._check_quota(instance.offering)
            start_s = max(
                0.0,
                self.config.start_s_mean
                + self._boot_rng.uniform(-self.config.start_s_jitter, self.config.start_s_jitter),
            )
            instance.resume(now, start_s, self.config.min_billed_s)
            self._books.reserve(instance.offering)
            if instance.offering.is_spot:
                after = interruption_delay(
                    self.config.spot_hazard_per_hour, self._spot_rng.random()
                )
                if after is not None:
                    self._books.plan_interruption(instance, after)
            if start_s > 0:
                self._books.push(instance.running_at, Due.BOOT, cloud_id)
            return LaunchResult(cloud_id, instance.spot_request_id, now)

    def cancel_spot_requests(self, request_ids: Sequence[str]) -> None:
        """An open request is cancelled; a filled one too, but its instance keeps running
        (as on EC2): whoever cancels must terminate the instance."""
        self.deliver_notices()
        with self._lock:
            now = self._clock.now()
            self.api_calls["cancel_spot_requests"] += 1
            for request_id in request_ids:
                req = self._books.open_or_active.get(request_id)
                if req is None or not self._books.owns(req.tags):
                    continue
                if req.state is SpotRequestState.OPEN:
                    req.status_code = "canceled-before-fulfillment"
                    self._books.release(req.offering)
                else:
                    req.status_code = "request-canceled-and-instance-running"
                req.state = SpotRequestState.CANCELLED
                self._books.close(req, now)

    # ---- fault injection ------------------------------------------------------------
    def set_unavailable(self, offering_key_or_type: str, unavailable: bool = True) -> None:
        """Refuse (or accept again) launches of an offering key or a whole instance type.
        Open spot requests for it stay open (capacity-not-available) meanwhile."""
        with self._lock:
            if unavailable:
                self._books.unavailable.add(offering_key_or_type)
            else:
                self._books.unavailable.discard(offering_key_or_type)

    def inject_error(self, error: LaunchError) -> None:
        """The next launch call raises ``error`` (queued: several calls inject several)."""
        with self._lock:
            self._injected.append(error)

    def interrupt(self, cloud_id: str, notice_s: float | None = None) -> None:
        """Announce an interruption now; the instance terminates ``notice_s`` later."""
        with self._lock:
            now = self._clock.now()
            instance = self._books.live.get(cloud_id)
            if instance is None or instance.stop_at is not None:
                return
            at = now + (self.config.notice_s if notice_s is None else notice_s)
            if instance.interrupt_at is not None and instance.interrupt_at <= at:
                return  # an earlier interruption is already on its way
            instance.interrupt_at = at
            instance.notice_at = now
            instance.notice_delivered = False
            self._books.push(now, Due.NOTICE, cloud_id)
            self._books.schedule_end(instance)
        self.deliver_notices()

    def add_foreign_instance(
        self,
        instance_type: str = "m5.large",
        tags: Mapping[str, str] | None = None,
        *,
        location: str = "us-east-1a",
        gpus: int = 0,
    ) -> str:
        """An instance someone else launched (running now). It counts towards the quota but
        is never listed by ``list_owned`` nor touched by ``terminate``."""
        offering = Offering(instance_type, location, CapacityType.ON_DEMAND, gpus, 0.0)
        with self._lock:
            now = self._clock.now()
            instance = self._books.start(now, offering, dict(tags or {}), 0.0)
            return instance.cloud_id

    def remove_tag(self, cloud_id: str, key: str) -> None:
        """Someone stripped a tag from an instance (e.g. the record tag)."""
        with self._lock:
            self._books.instances[cloud_id].tags.pop(key, None)

    # ---- notices, observation and accounting -----------------------------------------
    def on_interruption_notice(self, callback: NoticeCallback) -> None:
        """Call ``callback`` once per notice, when the cloud is next used at or after its
        time (or on ``deliver_notices``), outside the cloud's lock."""
        with self._lock:
            self._callbacks.append(callback)

    def deliver_notices(self) -> list[InterruptionNotice]:
        """Settle everything due up to the clock and fire callbacks for new notices."""
        with self._lock:
            self._books.settle(self._clock.now())
            due, self._books.due_notices = self._books.due_notices, []
            callbacks = list(self._callbacks)
        for notice in due:
            for callback in callbacks:
                callback(notice)
        return due

    def pending_interruptions(self, now: float | None = None) -> list[InterruptionNotice]:
        """Owned instances that got a notice and are not terminated yet (at ``now``, which
        defaults to the clock and must not be ahead of it)."""
        self.deliver_notices()
        with self._lock:
            at = self._clock.now() if now is None else now
            found = []
            for instance in self._books.live.values():
                notice = self._books.notice(instance, at)
                if (
                    notice is not None
                    and at < notice.interrupt_at
                    and (instance.stop_at is None or at < instance.stop_at)
                    and self._books.owns(instance.tags)
                ):
                    found.append(notice)
            return found

    def interruption_notice(self, cloud_id: str) -> InterruptionNotice | None:
        """The notice an instance got (kept after it terminated, to tell why it ended)."""
        with self._lock:
            instance = self._books.instances.get(cloud_id)
            return None if instance is None else self._books.notice(instance, self._clock.now())

    def next_change_at(self) -> float | None:
        """The earliest future time at which something may change (for event-driven sims).
        May be early (a cancelled change), never late."""
        self.deliver_notices()
        with self._lock:
            return self._books.next_change_at()

    def billed_usd(self, cloud_id: str, until: float | None = None) -> float:
        with self._lock:
            instance = self._books.instances.get(cloud_id)
            end = self._clock.now() if until is None else until
            return 0.0 if instance is None else self._usd(instance, end)

    def billed_runs(self, cloud_id: str, until: float | None = None) -> list[tuple[float, float]]:
        """The instance's billed runs (one per launch or start): (running from, billed until)."""
        with self._lock:
            instance = self._books.instances.get(cloud_id)
            end = self._clock.now() if until is None else until
            return [] if instance is None else instance.runs(end, self.config.min_billed_s)

    def stopped_usd(self, cloud_id: str, until: float | None = None) -> float:
        """What the instance's disks cost while it was stopped."""
        with self._lock:
            instance = self._books.instances.get(cloud_id)
            if instance is None:
                return 0.0
            end = self._clock.now() if until is None else until
            pool = instance.tags.get(self.config.pool_tag_key, "")
            per_hour = self.config.stopped_usd_per_hour.get(pool, 0.0)
            return instance.parked_seconds(end) / 3600.0 * per_hour

    def total_billed_usd(self, until: float | None = None) -> float:
        """What every owned instance has cost so far (foreign ones are not ours to pay)."""
        with self._lock:
            end = self._clock.now() if until is None else until
            return sum(
                self._usd(i, end)
                for i in self._books.instances.values()
                if self._books.owns(i.tags)
            )

    def _usd(self, instance: SimInstance, until: float) -> float:
        """Compute billed, plus the disks of the time it spent stopped."""
        pool = instance.tags.get(self.config.pool_tag_key, "")
        disks = self.config.stopped_usd_per_hour.get(pool, 0.0)
        return instance.billed_usd(until, self.config.min_billed_s, disks)

    def get(self, cloud_id: str) -> CloudInstance | None:
        """Any instance ever created, ours or foreign, even long gone (test helper)."""
        self.deliver_notices()
        with self._lock:
            instance = self._books.instances.get(cloud_id)
            return None if instance is None else self._books.snapshot(instance, self._clock.now())

    def all_instances(self) -> list[CloudInstance]:
        """Every instance ever created, foreign and vanished ones included (test helper)."""
        self.deliver_notices()
        with self._lock:
            now = self._clock.now()
            return [self._books.snapshot(i, now) for i in self._books.instances.values()]

    def tags(self, cloud_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self._books.instances[cloud_id].tags)

    # ---- internals --------------------------------------------------------------------
    def _refreshed(self, result: LaunchResult) -> LaunchResult:
        """A replayed spot launch reports the instance its request got since (as EC2 does)."""
        if result.cloud_id is not None or result.spot_request_id is None:
            return result
        req = self._books.requests[result.spot_request_id]
        if req.instance_id is None:
            return result
        instance = self._books.instances[req.instance_id]
        return LaunchResult(instance.cloud_id, req.request_id, instance.launched_at)

    def _tags(self, pool: str, record_id: str) -> dict[str, str]:
        key, value = self.config.ownership
        return {key: value, self.config.pool_tag_key: pool, self.config.record_tag_key: record_id}

    def _check_capacity(self, offering: Offering) -> None:
        key, itype = offering.key, offering.instance_type
        rates = self.config.capacity_error_rate
        rate = rates.get(key, rates.get(itype, 0.0))
        refused = self._books.is_unavailable(offering)
        if refused or (rate > 0 and self._capacity_rng.random() < rate):
            raise LaunchError(
                LaunchErrorClass.CAPACITY,
                "InsufficientInstanceCapacity",
                f"no {offering.capacity_type.value} capacity for {itype} in {offering.location}",
            )

    def _check_quota(self, offering: Offering) -> None:
        cfg, books = self.config, self._books
        over_count = cfg.max_instances is not None and books.reserved_instances >= cfg.max_instances
        over_gpus = cfg.max_gpus is not None and books.reserved_gpus + offering.slots > cfg.max_gpus
        if over_count or over_gpus:
            raise LaunchError(
                LaunchErrorClass.QUOTA,
                "VcpuLimitExceeded",
                f"limit reached: {books.reserved_instances} instances, "
                f"{books.reserved_gpus} GPUs in use",
            )


__all__ = ["InterruptionNotice", "SimulatedCloud", "SimulatedCloudConfig"]
