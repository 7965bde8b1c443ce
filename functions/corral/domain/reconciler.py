"""The reconciler: compare cloud truth with stored truth and decide repairs both ways.

Inputs are one snapshot. The service must list the cloud *before* reading the records: then
every listed instance was launched after its record's REQUESTED intent was written, so a
tagged instance whose record reads QUEUED really is a leftover of an earlier attempt. The
opposite lag (a record that just learned its cloud id, missing from a listing) is covered by
``listing_grace_s``.

Rules, each emitting one decision type with a reason (see ``reconcile_decisions``):
1. A record holding a cloud id the listing lacks or lists as gone -> MarkTerminated (its
   trials requeued), unless it learned that id less than ``listing_grace_s`` ago.
2. REQUESTED without a cloud id, and a live owned instance tagged with its id -> Adopt.
3. An owned instance whose record is terminal or TERMINATING -> TerminateCloud at once; with
   no record id, an unknown one, or a record that holds another instance (a stray of an
   earlier attempt) -> TerminateCloud once ``orphan_grace_s`` has passed since its launch.
4. ALLOCATED and not registered within the pool's ``starting_deadline_s`` ->
   Terminate(boot_failure=True).
5. REQUESTED with nothing to show for ``request_timeout_s`` -> Requeue while
   ``backoff.can_retry`` allows, else FailAllocation.
6. A record's open spot request refused (capacity, price, constraints) or open longer than
   ``spot_open_timeout_s`` -> CancelSpotRequest (offering marked unavailable) + Requeue, not
   counted as a failure. A closed/failed request that left nothing -> Requeue. Any other open
   request (record gone, terminal, or an earlier attempt's) -> CancelSpotRequest.
7. IDLE/BUSY/DRAINING silent for ``heartbeat_timeout_s`` -> MarkLost (``agent_liveness``;
   the service terminates it in the same pass); LOST -> Terminate (a LOST instance is fenced
   and never comes back: only a pass that died between the two writes leaves one).
8. An owned instance the cloud reports stopped or stopping -> TerminateCloud, unless its
   record keeps it in the warm pool (rule 10).
9. TERMINATING and still listed -> TerminateCloud again (idempotent); gone -> rule 1.
10. The warm pool: STOPPING and listed stopped -> MarkStopped, listed up -> StopCloud again,
   still up after ``request_timeout_s`` -> Terminate;
   STOPPED and listed up (started behind Corral's back) -> StopCloud. A warm start (QUEUED
   or REQUESTED holding its stopped instance) is never terminated for being stopped:
   REQUESTED and listed up -> Adopt; still stopped after ``request_timeout_s`` -> Terminate.

Defensive limits: instances, spot requests and records of pools not in ``pools`` are
ignored (the service adds the pools its records name that left the config,
``corral.domain.retired_pools``); every cloud id in a decision was in the owned listing;
each record gets at most one record decision per pass. ``heartbeats`` is keyed by instance
record id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.domain.agent_liveness import lost_agent
from corral.domain.backoff import can_retry
from corral.domain.cloud_view import CloudInstance, CloudState, SpotRequest, SpotRequestState
from corral.domain.instance import Instance, InstanceState
from corral.domain.policy import PoolPolicy
from corral.domain.reconcile_decisions import (
    Adopt,
    CancelSpotRequest,
    Decision,
    FailAllocation,
    MarkStopped,
    MarkTerminated,
    ReconcilePlan,
    ReconcileSettings,
    Requeue,
    StopCloud,
    Terminate,
    TerminateCloud,
)
from corral.domain.records import Heartbeat

IS = InstanceState

# Spot status codes (EC2's names) that mean the request cannot fill as asked: waiting longer
# is pointless, another offering may fill.
UNFILLABLE_SPOT_CODES = frozenset(
    {
        "capacity-not-available",
        "capacity-oversubscribed",
        "price-too-low",
        "constraint-not-fulfillable",
        "launch-group-constraint",
        "az-group-constraint",
        "placement-group-constraint",
    }
)
_STOPPED = frozenset({CloudState.STOPPED, CloudState.STOPPING})
_UP = frozenset({CloudState.PENDING, CloudState.RUNNING})
_CLOSED = frozenset({SpotRequestState.CLOSED, SpotRequestState.CANCELLED, SpotRequestState.FAILED})


@dataclass
class _Pass:
    pools: Mapping[str, PoolPolicy]
    heartbeats: Mapping[str, Heartbeat]
    now: float
    settings: ReconcileSettings
    records: dict[str, Instance] = field(default_factory=dict)
    listed: dict[str, CloudInstance] = field(default_factory=dict)
    spot: dict[str, SpotRequest] = field(default_factory=dict)
    up_by_record: dict[str, list[CloudInstance]] = field(default_factory=dict)
    open_by_record: dict[str, list[SpotRequest]] = field(default_factory=dict)
    request_by_instance: dict[str, SpotRequest] = field(default_factory=dict)
    accounted: set[str] = field(default_factory=set)  # cloud ids a record pass dealt with
    claimed: set[str] = field(default_factory=set)  # spot request ids a record dealt with
    out: dict[tuple[str, str], Decision] = field(default_factory=dict)

    def emit(self, decision: Decision) -> None:
        if isinstance(decision, TerminateCloud | StopCloud):
            key = ("cloud", decision.cloud_id)
        elif isinstance(decision, CancelSpotRequest):
            key = ("spot", decision.request_id)
        else:
            key = ("record", decision.record.id)
        self.out.setdefault(key, decision)

    def record_of(self, ci: CloudInstance) -> str | None:
        """The record id on the instance, or on its spot request (spot instances are tagged
        only after fulfilment, so the request may know it first)."""
        if ci.record_id is not None:
            return ci.record_id
        request = self.spot.get(ci.spot_request_id or "") or self.request_by_instance.get(
            ci.cloud_id
        )
        return request.record_id if request is not None else None


def reconcile(
    pools: Mapping[str, PoolPolicy],
    records: Sequence[Instance],
    cloud: Sequence[CloudInstance],
    spot_requests: Sequence[SpotRequest],
    heartbeats: Mapping[str, Heartbeat],
    now: float,
    settings: ReconcileSettings,
) -> ReconcilePlan:
    p = _Pass(pools, heartbeats, now, settings)
    p.spot = {s.request_id: s for s in spot_requests if s.pool in pools}
    p.request_by_instance = {s.instance_id: s for s in p.spot.values() if s.instance_id}
    p.listed = {c.cloud_id: c for c in cloud if c.pool in pools}
    p.records = {r.id: r for r in records}
    for ci in p.listed.values():
        rid = p.record_of(ci)
        if rid is not None and ci.state in _UP:
            p.up_by_record.setdefault(rid, []).append(ci)
    for sr in p.spot.values():
        if sr.record_id is not None and sr.state is SpotRequestState.OPEN:
            p.open_by_record.setdefault(sr.record_id, []).append(sr)

    for record in p.records.values():
        pool = pools.get(record.pool)
        if pool is not None and record.is_live:
            for decision in _for_record(p, record, pool):
                p.emit(decision)
    for ci in p.listed.values():
        if ci.cloud_id not in p.accounted:
            _for_unaccounted_instance(p, ci)
    for sr in p.spot.values():
        if sr.request_id not in p.claimed and sr.state is SpotRequestState.OPEN:
            _for_unclaimed_request(p, sr)
    return ReconcilePlan(tuple(p.out.values()))


def _for_record(p: _Pass, r: Instance, pool: PoolPolicy) -> list[Decision]:
    if r.state is IS.QUEUED and r.cloud_id is None:
        return []
    if r.state is IS.REQUESTED and r.cloud_id is None:
        return _requested(p, r, pool)
    if r.cloud_id is None:
        # A state that should hold an instance but names none: nothing the cloud can tell.
        if r.state is IS.TERMINATING:
            return [MarkTerminated(r, "terminating with no cloud instance to wait for")]
        return []
    p.accounted.add(r.cloud_id)
    ci = p.listed.get(r.cloud_id)
    if ci is None or ci.state.is_gone:
        if ci is None and _learned_recently(p, r):
            return []  # listing lag (rule 1)
        seen = "not in the owned listing" if ci is None else f"reported {ci.state.value}"
        reason = f"instance {r.cloud_id} is {seen}"
        return [MarkTerminated(r, reason)]
    if r.is_parked or r.is_warm_start:
        return _warm(p, r, ci)
    if ci.state in _STOPPED:
        return [TerminateCloud(ci.cloud_id, r.pool, r.id, f"the cloud reports it {ci.state}")]
    if r.state is IS.TERMINATING:
        return [TerminateCloud(ci.cloud_id, r.pool, r.id, "still listed: terminating again")]
    if r.state is IS.REQUESTED:
        return [Adopt(r, f"the cloud lists {ci.cloud_id} for this record", cloud=ci)]
    if r.state is IS.ALLOCATED:
        return _starting(p, r, pool)
    if r.state is IS.LOST:
        return _lost(p, r)
    return _heartbeat(p, r)


def _warm(p: _Pass, r: Instance, ci: CloudInstance) -> list[Decision]:
    """Rule 10: a warm-pool record (STOPPING, STOPPED) or a warm start of one."""
    up = ci.state in _UP
    if r.state is IS.STOPPING:
        if ci.state is CloudState.STOPPED:
            return [MarkStopped(r, "the cloud lists it stopped")]
        since = r.stopped_at if r.stopped_at is not None else r.created_at
        if p.now - since > p.settings.request_timeout_s:
            # A stop the cloud never carries out (e.g. an instance of a one-time spot request
            # launched before the pool had a warm pool): it still runs, and bills.
            why = f"asked to stop {p.now - since:.0f}s ago, still {ci.state}: terminated"
            return [Terminate(r, why)]
        why = f"stopping, still {ci.state}: stop again"
        return [StopCloud(ci.cloud_id, r.pool, r.id, why)]
    if r.state is IS.STOPPED:
        if up:
            why = f"in the warm pool but {ci.state} (started behind Corral's back)"
            return [StopCloud(ci.cloud_id, r.pool, r.id, why)]
        return []
    if r.state is IS.REQUESTED:
        if up:
            return [Adopt(r, f"the cloud lists {ci.cloud_id} started again", cloud=ci)]
        since = r.requested_at if r.requested_at is not None else r.created_at
        if p.now - since > p.settings.request_timeout_s:
            # Given up, not asked again: a start that never takes (a spot request EC2 keeps
            # marked for stop) would hold the demand it was planned for for ever. The
            # planner launches for that demand once this record is gone.
            why = f"warm start asked {p.now - since:.0f}s ago, instance still {ci.state}"
            return [Terminate(r, why)]
    return []  # QUEUED: its launch message (or the schedule pass's redrive) starts it


def _learned_recently(p: _Pass, r: Instance) -> bool:
    if r.state is IS.ALLOCATED:
        since = r.entered_at(IS.ALLOCATED)
    elif r.state is IS.REQUESTED:
        since = r.requested_at or r.entered_at(IS.REQUESTED)
    else:
        return False
    since = r.created_at if since is None else since
    return p.now - since < p.settings.listing_grace_s


def _requested(p: _Pass, r: Instance, pool: PoolPolicy) -> list[Decision]:
    found = sorted(p.up_by_record.get(r.id, []), key=lambda c: (c.launched_at, c.cloud_id))
    if found:
        # Any others are strays and go through rule 3 with its grace.
        p.accounted.add(found[0].cloud_id)
        reason = f"adopted {found[0].cloud_id}, launched for this record (record write lost)"
        return [Adopt(r, reason, cloud=found[0])]
    request = _own_request(p, r)
    if request is not None:
        p.claimed.add(request.request_id)
        decisions = _spot_rules(p, r, request)
        if decisions is not None:
            return decisions
    since = r.requested_at or r.entered_at(IS.REQUESTED) or r.created_at
    waited = p.now - since
    if waited <= p.settings.request_timeout_s:
        return []
    return [_requeue_or_fail(r, pool, f"nothing launched after {waited:.0f}s")]


def _own_request(p: _Pass, r: Instance) -> SpotRequest | None:
    """The record's spot request; the newest open one tagged with its id if the write of
    ``spot_request_id`` was lost (older ones are earlier attempts and get cancelled)."""
    if r.spot_request_id is not None:
        return p.spot.get(r.spot_request_id)
    tagged = p.open_by_record.get(r.id, [])
    return max(tagged, key=lambda s: (s.created_at, s.request_id)) if tagged else None


def _spot_rules(p: _Pass, r: Instance, sr: SpotRequest) -> list[Decision] | None:
    """Rule 6 for a REQUESTED record's own request; None defers to the request timeout."""
    key = r.offering.key
    if sr.state is SpotRequestState.OPEN:
        age = p.now - sr.created_at
        if sr.status_code in UNFILLABLE_SPOT_CODES:
            reason = f"spot request {sr.request_id}: {sr.status_code}"
        elif age > p.settings.spot_open_timeout_s:
            reason = f"spot request {sr.request_id} still open after {age:.0f}s"
        else:
            return []
        cancel = CancelSpotRequest(sr.request_id, r.pool, r.id, reason, mark_unavailable=key)
        return [cancel, Requeue(r, f"{reason}: try another offering", counts_as_failure=False)]
    if sr.state in _CLOSED:
        refused = sr.status_code in UNFILLABLE_SPOT_CODES
        reason = f"spot request {sr.request_id} {sr.state.value}: {sr.status_code}"
        if refused:
            return [Requeue(r, reason, counts_as_failure=False, mark_unavailable=key)]
        return [_requeue_or_fail(r, p.pools[r.pool], reason)]
    return None  # ACTIVE: the instance should show up; the request timeout still applies


def _requeue_or_fail(r: Instance, pool: PoolPolicy, reason: str) -> Decision:
    if can_retry(r.launch_failures, pool):
        return Requeue(r, f"{reason}; attempt {r.attempt + 2} next")
    return FailAllocation(r, f"{reason}; gave up after {r.launch_failures + 1} failed attempt(s)")


def _starting(p: _Pass, r: Instance, pool: PoolPolicy) -> list[Decision]:
    if r.registered_at is not None:
        return []
    since = r.entered_at(IS.ALLOCATED) or r.launched_at or r.created_at
    waited = p.now - since
    if waited <= pool.starting_deadline_s:
        return []
    reason = (
        f"not registered {waited:.0f}s after launch "
        f"(max_agent_starting_period {pool.starting_deadline_s:.0f}s)"
    )
    return [Terminate(r, reason, boot_failure=True)]


def _heartbeat(p: _Pass, r: Instance) -> list[Decision]:
    lost = lost_agent(r, p.heartbeats.get(r.id), p.now, p.settings.heartbeat_timeout_s)
    return [] if lost is None else [lost]


def _lost(p: _Pass, r: Instance) -> list[Decision]:
    lost_at = r.entered_at(IS.LOST) or r.created_at
    return [Terminate(r, f"lost {p.now - lost_at:.0f}s ago: its agent is fenced")]


def _for_unaccounted_instance(p: _Pass, ci: CloudInstance) -> None:
    """Rules 3 and 8 for an owned instance no live record holds."""
    if ci.state.is_gone:
        return
    rid = p.record_of(ci)
    r = p.records.get(rid) if rid is not None else None
    if r is not None and (not r.is_live or r.state is IS.TERMINATING):
        p.emit(TerminateCloud(ci.cloud_id, ci.pool, rid, f"its record {rid} is {r.state}"))
        return
    if ci.state in _STOPPED:
        p.emit(TerminateCloud(ci.cloud_id, ci.pool, rid, f"the cloud reports it {ci.state}"))
        return
    age = p.now - ci.launched_at
    if age < p.settings.orphan_grace_s:
        return  # its record may still be being written
    if rid is None:
        why = "carries no record id"
    elif r is None:
        why = f"names unknown record {rid}"
    else:
        why = f"is a stray: record {rid} is {r.state} holding {r.cloud_id or 'no instance'}"
    p.emit(TerminateCloud(ci.cloud_id, ci.pool, rid, f"owned instance {why} ({age:.0f}s old)"))


def _for_unclaimed_request(p: _Pass, sr: SpotRequest) -> None:
    """Open spot requests no REQUESTED record is waiting on: the demand is gone."""
    r = p.records.get(sr.record_id) if sr.record_id is not None else None
    if r is None:
        if p.now - sr.created_at < p.settings.orphan_grace_s:
            return
        reason = f"open spot request for unknown record {sr.record_id or '(none)'}"
    elif r.pool not in p.pools:
        return  # a record of a pool this pass does not manage
    else:
        reason = f"open spot request no longer wanted: record {r.id} is {r.state}"
    p.emit(CancelSpotRequest(sr.request_id, sr.pool, sr.record_id, reason))
