"""What an admin may do to a pool: reset its boot circuit breaker.

The breaker (``corral.domain.backoff``) stops a pool's launches after instances in a row
never registered; it closes by itself an hour later or when an agent registers. An admin who
has fixed the cause (the image, the startup script) closes it at once here, and the event log
says who did.
"""

from __future__ import annotations

from corral.domain import backoff
from corral.domain.access import admin_refusal
from corral.domain.errors import Forbidden, NotFoundError
from corral.domain.records import Event, EventKind, PoolState
from corral.ports.store import commit_one, retry_on_conflict
from corral.services.shared.service_context import Context


def reset_breaker(ctx: Context, pool_name: str, *, by: str) -> PoolState:
    """Close the pool's breaker and forget its boot failures. Only admins may (``Forbidden``,
    checked before the pool is looked up); an unknown pool is ``NotFoundError``. Every reset
    is logged, one of a breaker that was already closed too (an admin action is audited)."""
    refusal = admin_refusal(by, ctx.admins, action=f"reset the breaker of pool {pool_name}")
    if refusal is not None:
        raise Forbidden(refusal)
    if ctx.pool(pool_name) is None:
        raise NotFoundError(f"no pool {pool_name}")
    before: list[PoolState] = []

    def step() -> PoolState:
        state = ctx.store.pool_state(pool_name)
        before[:] = [state]
        reset = backoff.reset_breaker(state)
        return state if reset is state else commit_one(ctx.store, reset)

    after = retry_on_conflict(step)
    (state,) = before
    now = ctx.clock.now()
    was = "open" if backoff.is_breaker_open(state, now) else "closed"
    message = f"breaker reset by {by} (it was {was}, {state.boot_failures} boot failure(s))"
    event = Event(now, EventKind.BREAKER_RESET, message, pool=pool_name, data={"by": by})
    ctx.store.append_events([event])
    return after
