"""When a launch that must wait could next go ahead.

Scale-up defers a QUEUED launch while the pool is backed off or its breaker is open, while
the cloud refused every offering that fits lately (the capacity memory), or while a spot
launch's trials have not yet waited ``on_demand_fallback_after``. Each of these ends at a
known time. Without a retry at that time the launch waited for the schedule pass's redrive
of stale records, up to two timer periods later (3.5 minutes after capacity came back in
the local stack), while the pending reason kept promising a time already past.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral.domain.backoff import BREAKER_COOLDOWN_S
from corral.domain.fallback import fallback_at, is_fallback
from corral.domain.offerings import Offering
from corral.domain.policy import PoolPolicy
from corral.domain.records import PoolState
from corral.domain.trial import Trial


def next_launch_chance(
    pool: PoolPolicy,
    state: PoolState,
    planned: Offering,
    waiting: Iterable[Trial],
    now: float,
) -> float | None:
    """The first moment after ``now`` when a deferred launch of ``planned`` (for the
    ``waiting`` trials) may find something changed, or None if no known time ends the wait
    (a refusal the next pass must discover, say)."""
    times: list[float] = [state.backoff_until]
    if state.breaker_open_since is not None:
        times.append(state.breaker_open_since + BREAKER_COOLDOWN_S)
    fitting = [o for o in pool.offerings() if o.slots >= planned.slots]
    # An offering the cloud refused lately becomes a candidate again when the memory ends.
    times.extend(state.capacity.unavailable_until.get(o.key, 0.0) for o in fitting)
    if planned.is_spot and any(is_fallback(pool, o) for o in fitting):
        times.extend(t for t in (fallback_at(pool, trial) for trial in waiting) if t is not None)
    later = [t for t in times if t > now]
    return min(later, default=None)
