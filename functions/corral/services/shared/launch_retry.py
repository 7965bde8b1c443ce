"""Send a deferred launch again for when its wait ends (``next_launch_chance``).

Scale-up and warm starts defer a QUEUED launch while the pool is backed off, its breaker
open, every fitting offering refused lately, or its spot trials not yet allowed on-demand.
Waiting for the schedule pass's redrive of stale records made the launch up to two timer
periods late. The retry is recorded before it is sent: the record's ``redriven_at`` is
set (conditionally) to when the delayed message is due, so a duplicate delivery, another
chain of the same launch, or the pass's redrive does not send one more while it is on its
way; a retry lost with its function is redriven by the pass after ``redrive_after_s``.
"""

from __future__ import annotations

from dataclasses import replace

from corral.domain.errors import ConflictError
from corral.domain.fallback import WAITING_STATES
from corral.domain.instance import Instance
from corral.domain.launch_retry import next_launch_chance
from corral.domain.policy import PoolPolicy
from corral.domain.trial import Trial
from corral.ports.commands import LaunchInstance, send
from corral.services.shared.service_context import Context

# SQS delays a message by at most 15 minutes; a longer wait takes several hops.
MAX_RETRY_DELAY_S = 900.0


def retry_when_it_may_go(ctx: Context, pool: PoolPolicy, record: Instance, now: float) -> None:
    """A second after the wait ends, so it has surely ended on the receiving clock. A
    repeat is harmless anyway: the record's attempt and state decide who launches."""
    if record.redriven_at is not None and record.redriven_at > now:
        return  # a retry is already on its way
    at = next_launch_chance(
        pool, ctx.store.pool_state(record.pool), record.offering, waiting_trials(ctx, record), now
    )
    if at is None:
        return
    due = min(at + 1.0, now + MAX_RETRY_DELAY_S)
    try:
        (stored,) = ctx.store.commit([replace(record, redriven_at=due)])
    except ConflictError:
        return  # another delivery of this launch, or the pass, moved it on first
    assert isinstance(stored, Instance)
    send(ctx.queue, [LaunchInstance.of(stored)], delay_s=due - now, dedupe=False)


def waiting_trials(ctx: Context, record: Instance) -> list[Trial]:
    """The trials the launch is for that still wait for it."""
    found = (ctx.store.get_trial(trial_id) for trial_id, _ in record.planned_for)
    return [t for t in found if t is not None and t.state in WAITING_STATES]
