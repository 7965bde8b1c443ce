"""Launch backoff and the boot circuit breaker: what a failed launch does to its pool.

Every rule acts on the error *class* (``corral.domain.errors``), never on a cloud's own codes,
so EC2 and Compute Engine behave alike. All state lives on ``PoolState`` (stored), never in a
function's memory: a cold start cannot reset a backoff (Determined's retry-every-5-seconds
loop ran for days on one quota error).

Numbers, and why:
- Pool backoff after QUOTA / PERMISSION errors: exponential with *full jitter* (AWS
  architecture blog): the n-th consecutive failure waits ``uniform(0, min(cap, base*2**(n-1)))``
  with base 30 s, factor 2, cap 30 min. Jitter spreads the pools of one account that hit the
  same vCPU limit; the cap keeps a fixed quota noticed within half an hour.
- INVALID_CONFIG: the record fails and the pool waits the full cap (no jitter): a wrong AMI
  fails every launch, so launching again at once only burns API calls and event-log lines.
- THROTTLED: the same attempt (same token) again after ``uniform(1, 10)`` s; the pool is fine.
- UNKNOWN: a new attempt after the same short jittered delay, counted against the record's
  attempts (``can_retry``).
- Circuit breaker: ``breaker_threshold`` consecutive instances that never registered open it
  (ReconcileSettings.breaker_threshold = 5, like Ray). It stays open until an operator resets
  it or ``BREAKER_COOLDOWN_S`` (1 hour) passes; then it is *half-open*: the pool may launch,
  but the failure count is kept, so one more boot failure reopens it at once and only a
  registration closes it. One probe an hour costs little next to a looping broken image.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

from corral.domain.errors import LaunchErrorClass
from corral.domain.offerings import Offering
from corral.domain.policy import PoolPolicy
from corral.domain.records import PoolState

BACKOFF_BASE_S = 30.0
BACKOFF_FACTOR = 2.0
BACKOFF_CAP_S = 30 * 60.0
THROTTLE_DELAY_S = (1.0, 10.0)
BREAKER_COOLDOWN_S = 60 * 60.0


def can_retry(failures: int, pool: PoolPolicy) -> bool:
    """Whether a record whose launch just failed for the ``failures``-th time before
    (0 = its first failure) may try again.

    ``failures`` is ``Instance.launch_failures``: only failures that are the record's fault
    or unexplained count; capacity refusals move to another offering without using it up
    (``Instance.attempt``, the token counter, grows with every new token regardless).
    ``launch_error_retries`` is, as in Determined, the number of retries *after* the first
    failure: with 3, four failing attempts are made, then the record fails.
    """
    return failures < pool.launch_error_retries


class LaunchVerdict(StrEnum):
    # REQUESTED -> QUEUED, new attempt; the planner picks an offering again at once.
    TRY_OTHER_OFFERING = "try_other_offering"
    # REQUESTED -> QUEUED, new attempt; nothing launches until the pool backoff lapses.
    WAIT_FOR_POOL = "wait_for_pool"
    # Stay REQUESTED and call the cloud again with the same token after ``delay_s``.
    RETRY_SAME_ATTEMPT = "retry_same_attempt"
    # REQUESTED -> QUEUED, new attempt after ``delay_s``; counted against the attempts.
    RETRY_NEW_ATTEMPT = "retry_new_attempt"
    # REQUESTED -> ALLOCATION_FAILED, with the reason on the record.
    FAIL_RECORD = "fail_record"


@dataclass(frozen=True, slots=True)
class LaunchErrorAction:
    verdict: LaunchVerdict
    delay_s: float
    reason: str
    counts_against_attempts: bool = False


def _full_jitter(failures: int, rng: random.Random) -> float:
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * BACKOFF_FACTOR ** max(failures - 1, 0))
    return rng.uniform(0.0, ceiling)


def _backed_off(state: PoolState, now: float, delay_s: float, reason: str) -> PoolState:
    return replace(
        state,
        backoff_until=max(state.backoff_until, now + delay_s),
        backoff_failures=state.backoff_failures + 1,
        backoff_reason=reason,
    )


def on_launch_error(
    state: PoolState,
    error_class: LaunchErrorClass,
    code: str,
    now: float,
    pool: PoolPolicy,
    rng: random.Random,
    *,
    offering: Offering,
    failures: int = 0,
    where: str | None = None,
) -> tuple[PoolState, LaunchErrorAction]:
    """Decide what a launch error means for the pool and for the record that failed.

    ``offering`` is what the failed launch asked for, ``failures`` the record's counted
    launch failures so far (``Instance.launch_failures``) and ``where`` a region name for
    messages (the offering's location when not given).
    """
    place = where or offering.location
    if error_class.marks_offering_unavailable:
        # Copy: PoolState is frozen but CapacityMemory is not; never mutate the caller's.
        memory = state.capacity.marked_unavailable(offering.key, now, pool.capacity_memory_s)
        reason = f"{code}: {offering.key} unavailable for {pool.capacity_memory_s:.0f}s"
        action = LaunchErrorAction(LaunchVerdict.TRY_OTHER_OFFERING, 0.0, reason)
        return replace(state, capacity=memory), action
    if error_class.backs_off_pool:
        delay = _full_jitter(state.backoff_failures + 1, rng)
        new = _backed_off(state, now, delay, f"{code} in {place}")
        wait = new.backoff_until - now
        action = LaunchErrorAction(LaunchVerdict.WAIT_FOR_POOL, wait, new.backoff_reason or code)
        return new, action
    if error_class.fails_record:
        reason = f"invalid launch config: {code} in {place}"
        new = _backed_off(state, now, BACKOFF_CAP_S, reason)
        return new, LaunchErrorAction(LaunchVerdict.FAIL_RECORD, 0.0, reason)
    delay = rng.uniform(*THROTTLE_DELAY_S)
    if error_class.retries_same_attempt:
        return state, LaunchErrorAction(LaunchVerdict.RETRY_SAME_ATTEMPT, delay, code)
    # UNKNOWN: the record's own retry budget.
    if can_retry(failures, pool):
        retry = LaunchErrorAction(LaunchVerdict.RETRY_NEW_ATTEMPT, delay, code, True)
        return state, retry
    reason = f"{code}: gave up after {failures + 1} failed attempt(s)"
    return state, LaunchErrorAction(LaunchVerdict.FAIL_RECORD, 0.0, reason, True)


def on_launch_success(state: PoolState) -> PoolState:
    """A launch went through: the account and config are fine again. The breaker is about
    registration, not launching, so it is left alone."""
    if state.backoff_failures == 0 and state.backoff_until == 0.0:
        return state
    return replace(state, backoff_until=0.0, backoff_failures=0, backoff_reason=None)


def is_backed_off(state: PoolState, now: float) -> bool:
    return now < state.backoff_until


def is_breaker_open(state: PoolState, now: float, cooldown_s: float = BREAKER_COOLDOWN_S) -> bool:
    """Open (no launches) from the moment it tripped until the cool-down passes."""
    return state.breaker_open_since is not None and now < state.breaker_open_since + cooldown_s


def pending_reason(
    state: PoolState, now: float, cooldown_s: float = BREAKER_COOLDOWN_S
) -> str | None:
    """Why the pool launches nothing now (shown on pending trials), or None if it may."""
    if is_breaker_open(state, now, cooldown_s):
        return f"waiting: launches stopped: {state.breaker_reason or 'boot failures'}"
    if is_backed_off(state, now):
        # An absolute time, not a countdown: the reason stays the same from one pass to the
        # next, so it is written to the pending trials once, not on every pass.
        until = datetime.fromtimestamp(state.backoff_until, tz=UTC).strftime("%H:%M:%S UTC")
        return f"waiting: {state.backoff_reason or 'launch errors'} (pool backed off until {until})"
    return None


# The planner's name for the same question.
blocked_reason = pending_reason


def on_boot_failure(state: PoolState, now: float, threshold: int) -> tuple[PoolState, str | None]:
    """Count one more instance that never registered. Returns the new state and, when this
    failure (re)opens the breaker, the message to raise as a BREAKER_OPEN event."""
    failures = state.boot_failures + 1
    if failures < threshold:
        return replace(state, boot_failures=failures), None
    reason = (
        f"{failures} instances in a row never registered; fix the image or startup script, "
        f"then reset the breaker (or it retries one launch after {BREAKER_COOLDOWN_S:.0f}s)"
    )
    already_open = is_breaker_open(state, now)
    new = replace(
        state,
        boot_failures=failures,
        breaker_open_since=state.breaker_open_since if already_open else now,
        breaker_reason=reason,
    )
    return new, None if already_open else reason


def on_registration(state: PoolState) -> PoolState:
    """An instance registered: boots work, so the count restarts and the breaker closes."""
    if state.boot_failures == 0 and state.breaker_open_since is None:
        return state
    return replace(state, boot_failures=0, breaker_open_since=None, breaker_reason=None)


def reset_breaker(state: PoolState) -> PoolState:
    """An operator says the cause is fixed."""
    return on_registration(state)
