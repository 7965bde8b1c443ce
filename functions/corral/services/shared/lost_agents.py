"""Declaring a silent agent lost: its trials requeued, its instance terminated, in one pass.

Run by the reconciler (rule 7, every two minutes) and by the idle reaper (every minute), so a
dead agent's trials wait at most ``heartbeat_timeout_s`` plus one reap period
(docs/reliability.md, "Agent death to requeue"). Both write conditionally on the version
they read: the second to act on the same record loses the race and does nothing.

Terminated at once, not after a grace: a LOST instance is fenced (``domain.agent_fence``):
its agent's writes are refused (it stops and shuts its instance down when it hears so) and
it can never register back, so waiting for it only bills an instance that cannot work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral.domain.agent_liveness import lost_agents
from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState
from corral.domain.reconcile_decisions import MarkLost
from corral.domain.records import EventKind, Heartbeat
from corral.services.shared.instance_events import log_instance_event
from corral.services.shared.instance_removal import take_away, terminate
from corral.services.shared.service_context import Context


def declare_lost(ctx: Context, decision: MarkLost) -> None:
    """-> LOST with its trials requeued (one commit, conditional on the version the decision
    read: ``ConflictError`` if the record moved on), then -> TERMINATING and the cloud call.
    A crash between the two leaves it LOST; the reconciler terminates it on its next pass."""
    now = ctx.clock.now()
    take_away(ctx, decision.apply(now), decision.reason)
    log_instance_event(ctx, decision.record, EventKind.AGENT_LOST, decision.reason, now)
    lost = ctx.store.get_instance(decision.record.id)
    if lost is not None and lost.state is InstanceState.LOST:
        reason = f"lost ({decision.reason}): its agent is fenced"
        going = lost.transition(InstanceState.TERMINATING, ctx.clock.now(), reason)
        terminate(ctx, going, EventKind.INSTANCE_TERMINATING)


def declare_silent_agents(
    ctx: Context, live: Sequence[Instance], heartbeats: Mapping[str, Heartbeat]
) -> list[str]:
    """Declare lost every agent of ``live`` silent past the heartbeat timeout; their ids."""
    declared = []
    timeout = ctx.settings.reconcile.heartbeat_timeout_s
    for decision in lost_agents(live, heartbeats, ctx.clock.now(), timeout):
        try:
            declare_lost(ctx, decision)
        except ConflictError:
            continue  # it heartbeated, or another pass declared it, meanwhile
        declared.append(decision.record.id)
    return declared
