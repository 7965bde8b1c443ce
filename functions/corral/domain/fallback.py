"""On-demand fallback that respects spot: when a spot pool may buy on-demand for a trial.

A spot pool that may fall back (``on_demand_fallback``) buys on-demand for a waiting trial
only once the trial has waited ``on_demand_fallback_after`` for spot (``PoolPolicy.
on_demand_fallback_after_s``; None: never). The user asked for spot: a spot launch refused
for a few minutes is usually filled again soon, while on-demand costs about three times as
much and, once a long trial runs on it, keeps costing that until the trial ends.

The wait counts from the start of the trial's current waiting stretch: submission, or the
moment it was preempted or requeued (``waiting_since``). A launch planned for several trials
(they share an instance) may fall back once its oldest waiting trial may. Capacity bought
for no trial (``min_instances``) waits for spot unless the delay is 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from corral.domain.offerings import Offering
from corral.domain.policy import PoolPolicy
from corral.domain.trial import Trial, TrialState

# The default ``on_demand_fallback_after``: 10 minutes. In the simulator's cloud model (spot
# capacity of one offering out 5 % of the time in outages of 30 minutes on average, boots of
# 3 minutes) most refused launches are filled by another spot offering or by the same one
# within minutes, and a trial that hits a long outage still starts within about one boot
# plus 10-12 minutes (the delay, then the next schedule pass or launch re-drive), far below
# the hour or more that a pool without fallback can wait. See docs/simulator.md.
ON_DEMAND_FALLBACK_AFTER_S = 600.0

# A trial in these states waits for capacity (a PREEMPTED one for its replacement).
WAITING_STATES = frozenset({TrialState.PENDING, TrialState.PREEMPTED})
_WAITING = frozenset(s.value for s in WAITING_STATES)


def is_fallback(pool: PoolPolicy, offering: Offering) -> bool:
    """An on-demand offering of a pool that also launches spot: capacity to fall back to."""
    return not offering.is_spot and any(o.is_spot for o in pool.offerings())


def waiting_since(trial: Trial) -> float:
    """When the trial's current wait began: the first of the PENDING / PREEMPTED entries
    that end its history (a preempted trial waits from its preemption), else submission."""
    since: float | None = None
    for entry in reversed(trial.history):
        if entry.state not in _WAITING:
            break
        since = entry.at
    return trial.submitted_at if since is None else since


def fallback_at(pool: PoolPolicy, trial: Trial) -> float | None:
    """When on-demand may first be bought for ``trial`` (None: never)."""
    delay = pool.on_demand_fallback_after_s
    return None if delay is None else waiting_since(trial) + delay


def may_fall_back(pool: PoolPolicy, trials: Iterable[Trial], now: float) -> bool:
    """Whether on-demand may be bought now for demand made of ``trials``: once the oldest of
    them has waited the pool's delay. With no trial (``min_instances``): only when the
    delay is 0 (today's immediate fallback)."""
    delay = pool.on_demand_fallback_after_s
    if delay is None:
        return False
    found = list(trials)
    if not found:
        return delay <= 0
    return now - min(waiting_since(t) for t in found) >= delay


def allowed_offerings(
    pool: PoolPolicy, offerings: Iterable[Offering], trials: Iterable[Trial], now: float
) -> list[Offering]:
    """``offerings`` without the fallback ones, unless ``trials`` may fall back now."""
    found = list(offerings)
    if may_fall_back(pool, trials, now):
        return found
    return [o for o in found if not is_fallback(pool, o)]


def clock_time(at: float) -> str:
    """An absolute time for a pending reason (it stays the same from one pass to the next,
    so it is written once, not on every pass)."""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%H:%M:%S UTC")


def no_fallback_setting(pool: PoolPolicy) -> str:
    """The setting that keeps a spot pool from falling back, for messages."""
    if not pool.on_demand_fallback:
        return "on_demand_fallback is off"
    return "on_demand_fallback_after is never"


def spot_wait_reason(pool: PoolPolicy, trial: Trial) -> str:
    """Why a trial waits for spot although on-demand could launch, and until when."""
    at = fallback_at(pool, trial)
    why = f"waiting for spot capacity in pool {pool.name} (the cloud refused spot lately)"
    if at is None:
        return f"{why}; {no_fallback_setting(pool)}"
    return (
        f"{why}; on-demand will be bought at {clock_time(at)} if spot is still short "
        "(on_demand_fallback_after)"
    )


def queued_waits_for_spot(
    pool: PoolPolicy, planned: Offering, refused: bool, trial: Trial, now: float
) -> bool:
    """A launch queued for ``trial`` on the spot offering ``planned`` that the cloud already
    refused (``refused``), for a trial that may not fall back to on-demand (yet): it waits
    for spot (scale-up swaps in an on-demand offering only once the trial may)."""
    return planned.is_spot and refused and not may_fall_back(pool, [trial], now)
