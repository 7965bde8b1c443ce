"""Route a queued command to its service, shared by the Lambda handlers, the Cloud Functions,
the local stack's pollers, the simulator and the tests. The kinds and their bodies live in
``corral.ports.commands``; a message that carries no command raises ``MalformedCommand``."""

from __future__ import annotations

from typing import assert_never

from corral.ports import commands as cmd
from corral.ports.queue import Message
from corral.services.idle_reap import run_idle_reap
from corral.services.reconcile import run_reconcile
from corral.services.scale_up import launch_instance
from corral.services.schedule_pass import run_schedule_pass
from corral.services.shared.service_context import Context


def dispatch(ctx: Context, message: Message | cmd.Command) -> str:
    """Run the service a message (or an already parsed command) asks for; returns a short
    outcome for logs (the ``LaunchOutcome`` value for ``LaunchInstance``)."""
    command = cmd.parse(message) if isinstance(message, Message) else message
    match command:
        case cmd.Schedule():
            report = run_schedule_pass(ctx)
            return f"assigned={len(report.assigned)} launched={len(report.launched)}"
        case cmd.LaunchInstance():
            return launch_instance(ctx, command.instance_id, command.attempt).value
        case cmd.Reconcile():
            reconciled = run_reconcile(ctx)
            return f"applied={len(reconciled.applied)} conflicts={reconciled.conflicts}"
        case cmd.IdleReap():
            reaped = run_idle_reap(ctx)
            return f"drained={len(reaped.drained)} terminated={len(reaped.terminated)}"
        case _:
            assert_never(command)


__all__ = ["dispatch"]
