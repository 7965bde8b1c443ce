"""The simulated cloud's books: every instance and spot request, and the time-driven changes.

A change that happens at a known time (a spot request filling, a notice being issued, an
instance reaching TERMINATED) is an entry in one heap. ``settle(now)`` applies every entry
due by ``now`` in time order, so a launch stays O(log n) and an instance's fate never depends
on how often anyone looks. Not thread-safe on its own: ``SimulatedCloud`` holds the lock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Mapping
from enum import Enum

from corral.adapters.memory.cloud_model import (
    InterruptionNotice,
    SimInstance,
    SimSpotRequest,
    SimulatedCloudConfig,
)
from corral.domain.offerings import Offering
from corral.ports.cloud import CloudInstance, LaunchResult, SpotRequestState


class Due(Enum):
    FILL = 0  # an open spot request fills (or is found unfillable and retried later)
    NOTICE = 1  # an interruption notice is issued
    BOOT = 2  # an instance becomes running (only reported by next_change_at)
    END = 3  # an instance reaches TERMINATED


class Ledger:
    def __init__(self, config: SimulatedCloudConfig) -> None:
        self.config = config
        self.instances: dict[str, SimInstance] = {}  # everything, forever (billing, tests)
        self.live: dict[str, SimInstance] = {}  # not terminated yet
        self.recent: deque[SimInstance] = deque()  # terminated, by end time, still listed
        self.requests: dict[str, SimSpotRequest] = {}
        self.open_or_active: dict[str, SimSpotRequest] = {}
        self.closed: deque[SimSpotRequest] = deque()  # by close time, still listed
        self.unavailable: set[str] = set()  # offering keys or instance types refused
        self.due_notices: list[InterruptionNotice] = []
        # Quota usage: live instances (ours and foreign) plus open spot requests.
        self.reserved_instances = 0
        self.reserved_gpus = 0
        self._heap: list[tuple[float, int, int, str]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)

    # ---- ownership and views ----------------------------------------------------------
    def owns(self, tags: Mapping[str, str]) -> bool:
        key, value = self.config.ownership
        return tags.get(key) == value and self.config.pool_tag_key in tags

    def is_unavailable(self, offering: Offering) -> bool:
        return offering.key in self.unavailable or offering.instance_type in self.unavailable

    def snapshot(self, instance: SimInstance, now: float) -> CloudInstance:
        return instance.snapshot(now, self.config.pool_tag_key, self.config.record_tag_key)

    def notice(self, instance: SimInstance, at: float) -> InterruptionNotice | None:
        return instance.notice(at, self.config.pool_tag_key, self.config.record_tag_key)

    def next_change_at(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    # ---- creating things ------------------------------------------------------------
    def start(
        self,
        at: float,
        offering: Offering,
        tags: dict[str, str],
        boot_s: float,
        *,
        interrupt_after: float | None = None,
        request_id: str | None = None,
        reserved: bool = False,
    ) -> SimInstance:
        cloud_id = f"i-{next(self._ids):017x}"
        n = len(self.instances) + 1
        instance = SimInstance(
            cloud_id=cloud_id,
            tags=tags,
            offering=offering,
            launched_at=at,
            running_at=at + boot_s,
            private_ip=f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}",
            spot_request_id=request_id,
        )
        if interrupt_after is not None:
            self.plan_interruption(instance, interrupt_after)
        self.instances[cloud_id] = instance
        self.live[cloud_id] = instance
        if not reserved:  # a filled spot request's reservation moves to its instance
            self.reserve(offering)
        if boot_s > 0:
            self.push(instance.running_at, Due.BOOT, cloud_id)
        return instance

    def plan_interruption(self, instance: SimInstance, after_running_s: float) -> None:
        """The spot interruption drawn for this run: ``after_running_s`` after it runs."""
        instance.interrupt_at = instance.running_at + after_running_s
        instance.notice_at = max(instance.launched_at, instance.interrupt_at - self.config.notice_s)
        self.push(instance.notice_at, Due.NOTICE, instance.cloud_id)
        self.schedule_end(instance)

    def request_spot(
        self,
        now: float,
        offering: Offering,
        tags: dict[str, str],
        boot_s: float,
        interrupt_after: float | None,
    ) -> LaunchResult:
        req = SimSpotRequest(
            request_id=f"sir-{next(self._ids):08x}",
            tags=dict(tags),
            offering=offering,
            created_at=now,
            fill_at=now + self.config.spot_open_s,
            boot_s=boot_s,
            interrupt_after_s=interrupt_after,
        )
        self.requests[req.request_id] = req
        self.open_or_active[req.request_id] = req
        self.reserve(offering)
        if self.config.spot_open_s <= 0:
            instance = self._fill(req, now)
            return LaunchResult(instance.cloud_id, req.request_id, now)
        self.push(req.fill_at, Due.FILL, req.request_id)
        return LaunchResult(None, req.request_id, None)

    def _fill(self, req: SimSpotRequest, at: float) -> SimInstance:
        instance = self.start(
            at,
            req.offering,
            dict(req.tags),
            req.boot_s,
            interrupt_after=req.interrupt_after_s,
            request_id=req.request_id,
            reserved=True,
        )
        req.state = SpotRequestState.ACTIVE
        req.status_code = "fulfilled"
        req.instance_id = instance.cloud_id
        return instance

    # ---- bookkeeping ------------------------------------------------------------------
    def reserve(self, offering: Offering) -> None:
        self.reserved_instances += 1
        self.reserved_gpus += offering.slots

    def release(self, offering: Offering) -> None:
        self.reserved_instances -= 1
        self.reserved_gpus -= offering.slots

    def close(self, req: SimSpotRequest, at: float) -> None:
        req.closed_at = at
        self.open_or_active.pop(req.request_id, None)
        self.closed.append(req)

    def push(self, at: float, kind: Due, ident: str) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), kind.value, ident))

    def schedule_end(self, instance: SimInstance) -> None:
        end = instance.end_at
        if end is not None:
            self.push(end, Due.END, instance.cloud_id)

    # ---- time -------------------------------------------------------------------------
    def settle(self, now: float) -> None:
        """Apply, in time order, every change due at or before ``now``."""
        while self._heap and self._heap[0][0] <= now:
            at, _, kind, ident = heapq.heappop(self._heap)
            if kind == Due.FILL.value:
                self._settle_fill(self.requests[ident], at)
            elif kind == Due.NOTICE.value:
                self._settle_notice(self.instances[ident], at)
            elif kind == Due.END.value:
                self._settle_end(self.instances[ident], at)
        self._prune(now)

    def _settle_fill(self, req: SimSpotRequest, at: float) -> None:
        if req.state is not SpotRequestState.OPEN or req.fill_at != at:
            return  # cancelled, or a stale entry
        if self.is_unavailable(req.offering):
            req.status_code = "capacity-not-available"
            req.fill_at = at + max(self.config.spot_open_s, 60.0)  # EC2 keeps trying
            self.push(req.fill_at, Due.FILL, req.request_id)
            return
        self._fill(req, at)

    def _settle_notice(self, instance: SimInstance, at: float) -> None:
        if instance.notice_delivered or instance.notice_at != at or instance.settled:
            return  # delivered already, superseded by an earlier notice, or gone
        if instance.stop_at is not None and instance.stop_at <= at:
            return  # we terminated it first: no notice
        instance.notice_delivered = True
        notice = self.notice(instance, at)
        if notice is not None and self.owns(instance.tags):
            self.due_notices.append(notice)

    def _settle_end(self, instance: SimInstance, at: float) -> None:
        if instance.settled or instance.end_at != at:
            return  # a stale entry: the end moved earlier
        instance.settled = True
        del self.live[instance.cloud_id]
        self.recent.append(instance)
        if instance.halted_at is None:  # a stopped instance gave its quota back already
            self.release(instance.offering)
        req = self.requests.get(instance.spot_request_id or "")
        if req is not None and req.state is SpotRequestState.ACTIVE:
            # A one-time request closes with its instance.
            req.state = SpotRequestState.CLOSED
            req.status_code = (
                "instance-terminated-no-capacity"
                if instance.interrupted
                else "instance-terminated-by-user"
            )
            self.close(req, at)

    def _prune(self, now: float) -> None:
        visible_s = self.config.terminated_visible_s
        while self.recent and (self.recent[0].end_at or 0.0) + visible_s <= now:
            self.recent.popleft()
        request_s = self.config.spot_request_visible_s
        while self.closed and (self.closed[0].closed_at or 0.0) + request_s <= now:
            self.closed.popleft()
