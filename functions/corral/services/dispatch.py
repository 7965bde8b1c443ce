"""Route a queued command to its service: the one place that knows the message kinds, shared
by the Lambda handlers, the Cloud Functions, the local stack's pollers and the tests."""

from __future__ import annotations

from corral.ports.queue import Message
from corral.services.context import Context
from corral.services.scale_up import launch_instance
from corral.services.scheduling import run_schedule_pass


class UnknownMessage(ValueError):
    pass


def dispatch(ctx: Context, message: Message) -> str:
    """Run the service a message asks for; returns a short outcome for logs."""
    if message.kind == "schedule":
        report = run_schedule_pass(ctx)
        return f"assigned={len(report.assigned)} launched={len(report.launched)}"
    if message.kind == "launch_instance":
        body = message.body
        return launch_instance(ctx, str(body["instance_id"]), int(body["attempt"])).value
    raise UnknownMessage(f"unknown message kind {message.kind!r}")
