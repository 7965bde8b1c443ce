"""The event-log line about one instance (its pool and id filled in from the record)."""

from __future__ import annotations

from corral.domain.instance import Instance
from corral.domain.records import Event, EventKind
from corral.services.shared.service_context import Context


def log_instance_event(
    ctx: Context, record: Instance, kind: EventKind, message: str, at: float
) -> None:
    ctx.store.append_events([Event(at, kind, message, pool=record.pool, instance_id=record.id)])
