"""Launch backoff and the boot circuit breaker, one rule per test."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from corral.domain.backoff import (
    BACKOFF_BASE_S,
    BACKOFF_CAP_S,
    BREAKER_COOLDOWN_S,
    THROTTLE_DELAY_S,
    LaunchErrorAction,
    LaunchVerdict,
    blocked_reason,
    can_retry,
    is_backed_off,
    is_breaker_open,
    on_boot_failure,
    on_launch_error,
    on_launch_success,
    on_registration,
    pending_reason,
    reset_breaker,
)
from corral.domain.errors import LaunchErrorClass as E
from corral.domain.records import PoolState

from .factories import NOW, make_offering, make_pool, make_pool_state

POOL = make_pool(capacity_memory_s=180.0, launch_error_retries=2)
OFFER = make_offering("p4d.24xlarge", location="us-east-1a")


class Ceiling(random.Random):
    """Jitter always at the top of its window, so waits are exact."""

    def uniform(self, a: float, b: float) -> float:
        return b


def fail(
    state: PoolState,
    cls: E,
    code: str = "Code",
    failures: int = 0,
    rng: random.Random | None = None,
) -> tuple[PoolState, LaunchErrorAction]:
    return on_launch_error(
        state,
        cls,
        code,
        NOW,
        POOL,
        rng or Ceiling(),
        offering=OFFER,
        failures=failures,
        where="us-east-1",
    )


def test_capacity_error_marks_the_offering_unavailable_and_tries_another_at_once() -> None:
    before = make_pool_state()
    after, action = fail(before, E.CAPACITY, "InsufficientInstanceCapacity")
    assert action.verdict is LaunchVerdict.TRY_OTHER_OFFERING
    assert action.delay_s == 0.0 and not action.counts_against_attempts
    assert not after.capacity.is_available(OFFER.key, NOW + 179)
    assert after.capacity.is_available(OFFER.key, NOW + 180)
    assert before.capacity.unavailable_until == {}  # the caller's state is untouched
    assert not is_backed_off(after, NOW)


def test_price_error_is_treated_like_capacity() -> None:
    after, action = fail(make_pool_state(), E.PRICE, "SpotMaxPriceTooLow")
    assert action.verdict is LaunchVerdict.TRY_OTHER_OFFERING
    assert not after.capacity.is_available(OFFER.key, NOW)


def test_quota_error_backs_the_pool_off_exponentially_up_to_the_cap() -> None:
    state = make_pool_state()
    waits = []
    for _ in range(9):
        state, action = fail(state, E.QUOTA, "VcpuLimitExceeded")
        assert action.verdict is LaunchVerdict.WAIT_FOR_POOL
        waits.append(state.backoff_until - NOW)
    assert waits[:4] == [BACKOFF_BASE_S, 60.0, 120.0, 240.0]
    assert max(waits) == BACKOFF_CAP_S


@given(st.integers(0, 2**32), st.integers(1, 12))
def test_quota_backoff_uses_full_jitter_within_its_window(seed: int, failures: int) -> None:
    state = make_pool_state(backoff_failures=failures - 1)
    after, _ = fail(state, E.QUOTA, rng=random.Random(seed))
    window = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (failures - 1))
    assert 0.0 <= after.backoff_until - NOW <= window


def test_quota_backoff_reason_is_shown_on_pending_trials() -> None:
    state, _ = fail(make_pool_state(), E.QUOTA, "VcpuLimitExceeded")
    reason = pending_reason(state, NOW)
    assert reason is not None and "VcpuLimitExceeded in us-east-1" in reason
    assert blocked_reason(state, NOW) == reason
    assert pending_reason(state, state.backoff_until) is None


def test_permission_error_backs_the_pool_off() -> None:
    state, action = fail(make_pool_state(), E.PERMISSION, "UnauthorizedOperation")
    assert action.verdict is LaunchVerdict.WAIT_FOR_POOL
    assert is_backed_off(state, NOW)


def test_invalid_config_fails_the_record_and_backs_the_pool_off_at_the_cap() -> None:
    state, action = fail(make_pool_state(), E.INVALID_CONFIG, "InvalidAMIID.NotFound")
    assert action.verdict is LaunchVerdict.FAIL_RECORD
    assert "InvalidAMIID.NotFound" in action.reason
    assert state.backoff_until == NOW + BACKOFF_CAP_S


def test_throttling_retries_the_same_attempt_soon_without_pool_backoff() -> None:
    state, action = fail(make_pool_state(), E.THROTTLED, "RequestLimitExceeded")
    assert action.verdict is LaunchVerdict.RETRY_SAME_ATTEMPT
    assert THROTTLE_DELAY_S[0] <= action.delay_s <= THROTTLE_DELAY_S[1]
    assert state == make_pool_state()


def test_unknown_error_counts_against_the_records_attempts() -> None:
    _, retry = fail(make_pool_state(), E.UNKNOWN, "InternalError", failures=1)
    assert retry.verdict is LaunchVerdict.RETRY_NEW_ATTEMPT
    assert retry.counts_against_attempts
    _, give_up = fail(make_pool_state(), E.UNKNOWN, "InternalError", failures=2)
    assert give_up.verdict is LaunchVerdict.FAIL_RECORD


def test_failures_allowed_are_the_first_plus_launch_error_retries() -> None:
    assert [can_retry(a, POOL) for a in range(4)] == [True, True, False, False]
    assert not can_retry(0, make_pool(launch_error_retries=0))


def test_launch_success_resets_the_pool_backoff_but_not_the_breaker() -> None:
    state, _ = fail(make_pool_state(boot_failures=3), E.QUOTA, "VcpuLimitExceeded")
    after = on_launch_success(state)
    assert not is_backed_off(after, NOW)
    assert (after.backoff_failures, after.backoff_reason) == (0, None)
    assert after.boot_failures == 3


def test_breaker_opens_at_the_threshold_and_says_so_once() -> None:
    state = make_pool_state()
    messages = []
    for _ in range(6):
        state, message = on_boot_failure(state, NOW, threshold=5)
        messages.append(message)
    assert messages[:4] == [None] * 4 and messages[5] is None
    assert messages[4] is not None and "5 instances in a row never registered" in messages[4]
    assert is_breaker_open(state, NOW)
    reason = pending_reason(state, NOW)
    assert reason is not None and "launches stopped" in reason


def test_breaker_half_opens_after_the_cooldown_and_reopens_on_one_more_failure() -> None:
    state = make_pool_state()
    for _ in range(5):
        state, _ = on_boot_failure(state, NOW, threshold=5)
    later = NOW + BREAKER_COOLDOWN_S
    assert not is_breaker_open(state, later)  # a probe launch may go
    state, message = on_boot_failure(state, later, threshold=5)
    assert message is not None and is_breaker_open(state, later)


def test_registration_resets_the_count_and_closes_the_breaker() -> None:
    state = make_pool_state()
    for _ in range(5):
        state, _ = on_boot_failure(state, NOW, threshold=5)
    assert on_registration(state) == make_pool_state()
    assert reset_breaker(state) == make_pool_state()
    two, _ = on_boot_failure(on_registration(state), NOW, threshold=5)
    assert two.boot_failures == 1
