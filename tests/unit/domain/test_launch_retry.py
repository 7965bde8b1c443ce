"""When a deferred launch could next go ahead (``next_launch_chance``): the end of the
capacity memory, of a spot trial's wait for fallback, of a backoff or of the breaker."""

from __future__ import annotations

from dataclasses import replace

from corral.domain.backoff import BREAKER_COOLDOWN_S
from corral.domain.launch_retry import next_launch_chance
from corral.domain.records import PoolState

from .fleet import pending, pool
from .test_planner_fallback import DELAY, OD_1, SPOT_1, SPOT_8, SUBMITTED, refused

NOW = SUBMITTED + 60


def test_the_capacity_memory_or_the_fallback_time_whichever_comes_first() -> None:
    trials = [pending("t1", at=SUBMITTED)]
    memory_ends = NOW + 180
    both = next_launch_chance(
        pool(SPOT_1, OD_1, fallback_after_s=DELAY), refused(SPOT_1, at=NOW), SPOT_1, trials, NOW
    )
    assert both == memory_ends  # before the trial's 10 minutes are up
    soon = next_launch_chance(
        pool(SPOT_1, OD_1, fallback_after_s=100), refused(SPOT_1, at=NOW), SPOT_1, trials, NOW
    )
    assert soon == SUBMITTED + 100


def test_no_fallback_time_without_on_demand_or_with_never() -> None:
    trials = [pending("t1", at=SUBMITTED)]
    state = refused(SPOT_1, at=NOW)
    assert next_launch_chance(pool(SPOT_1), state, SPOT_1, trials, NOW) == NOW + 180
    never = pool(SPOT_1, OD_1, fallback_after_s=None)
    assert next_launch_chance(never, state, SPOT_1, trials, NOW) == NOW + 180


def test_only_offerings_big_enough_count() -> None:
    state = refused(SPOT_1, SPOT_8, at=NOW - 100)
    later = replace(state, capacity=state.capacity.marked_unavailable(SPOT_8.key, NOW, 180.0))
    assert next_launch_chance(pool(SPOT_1, SPOT_8), later, SPOT_8, [], NOW) == NOW + 180
    assert next_launch_chance(pool(SPOT_1, SPOT_8), later, SPOT_1, [], NOW) == NOW + 80


def test_a_backoff_or_an_open_breaker_ends_the_wait_at_its_own_time() -> None:
    backed_off = replace(PoolState("gpu"), backoff_until=NOW + 30)
    assert next_launch_chance(pool(SPOT_1), backed_off, SPOT_1, [], NOW) == NOW + 30
    tripped = replace(PoolState("gpu"), breaker_open_since=NOW - 10)
    assert next_launch_chance(pool(SPOT_1), tripped, SPOT_1, [], NOW) == (
        NOW - 10 + BREAKER_COOLDOWN_S
    )


def test_nothing_known_to_end_the_wait() -> None:
    assert next_launch_chance(pool(SPOT_1), PoolState("gpu"), SPOT_1, [], NOW) is None
