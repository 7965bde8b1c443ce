"""When a silent agent is declared lost (rule 7 of the reconciler, also run by the idle
reaper every minute so a death is acted on within one reap period, not one reconcile
period; docs/reliability.md, "Agent death to requeue").

An agent is timed from its latest heartbeat, or from its registration if it never
heartbeated. Silent for longer than ``heartbeat_timeout_s``, and in a state that can be LOST
(IDLE, BUSY, DRAINING), it is: its trials are requeued at once, which is safe because the
agent stopped them itself by then (its fence, ``ServiceSettings.fence_after_s``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.domain.instance import INSTANCE_MACHINE, Instance, InstanceState
from corral.domain.reconcile_decisions import MarkLost
from corral.domain.records import Heartbeat


def lost_agent(
    record: Instance, beat: Heartbeat | None, now: float, heartbeat_timeout_s: float
) -> MarkLost | None:
    """``MarkLost`` for ``record`` if its agent has been silent too long, else None."""
    if not INSTANCE_MACHINE.allows(record.state, InstanceState.LOST):
        return None
    seen = [t for t in (beat.at if beat else None, record.registered_at) if t is not None]
    last = max(seen) if seen else (record.entered_at(record.state) or record.created_at)
    silent = now - last
    if silent <= heartbeat_timeout_s:
        return None
    return MarkLost(record, f"no heartbeat for {silent:.0f}s")


def lost_agents(
    records: Iterable[Instance],
    heartbeats: Mapping[str, Heartbeat],
    now: float,
    heartbeat_timeout_s: float,
) -> list[MarkLost]:
    """Every record in ``records`` whose agent is to be declared lost now."""
    found = (lost_agent(r, heartbeats.get(r.id), now, heartbeat_timeout_s) for r in records)
    return [d for d in found if d is not None]
