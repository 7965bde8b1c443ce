"""The commands functions send each other over the queues: one typed dataclass per kind.

This is the one module that knows the message kinds and their bodies. Services build a
command and ``send`` it (each command knows its queue and its dedupe id); handlers, the local
stack and the simulator get one back with ``parse`` (through ``services.dispatch``).

- ``schedule``: ``Schedule(reason)`` on the schedule queue, body ``{"reason": str}``
  (``{}`` from the GCP timer);
- ``launch_instance``: ``LaunchInstance(instance_id, attempt)`` on the scale-up queue, body
  ``{"instance_id": str, "attempt": int}``, dedupe id ``<instance_id>-<attempt>``;
- ``reconcile`` and ``idle_reap``: ``Reconcile()`` and ``IdleReap()``, body ``{}``, the ticks
  GCP's Cloud Scheduler publishes (``infra/gcp/deploy.sh``); nothing in Corral sends them.

Wire format: the queue adapters encode a ``Message`` as ``{"kind": ..., "body": ...}``; these
kinds and body keys are the ones Corral has always written, so messages already on a queue
during an upgrade parse. Unknown body keys are ignored (a newer sender may add one).

``parse`` raises ``MalformedCommand`` (``UnknownCommand`` for an unknown kind) for a message
that can never be handled: a poison message. Consumers never retry one forever: the Cloud
Functions log and acknowledge it; the scale-up Lambda reports it failed, so SQS moves it to
the dead-letter queue after ``maxReceiveCount`` receives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar

from corral.ports.queue import Message, Queue, QueueName

if TYPE_CHECKING:
    from corral.domain.instance import Instance


class CommandKind(StrEnum):
    SCHEDULE = "schedule"
    LAUNCH_INSTANCE = "launch_instance"
    RECONCILE = "reconcile"  # published by GCP's Cloud Scheduler (infra/gcp/deploy.sh)
    IDLE_REAP = "idle_reap"  # published by GCP's Cloud Scheduler (infra/gcp/deploy.sh)


class MalformedCommand(ValueError):
    """A message no consumer can ever handle: an unknown kind or a bad body."""


class UnknownCommand(MalformedCommand):
    """A message of a kind no consumer knows."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """Something changed: run a schedule pass. ``reason`` is for the logs only."""

    reason: str = ""
    # Not in the body: the queue carries it (a FIFO queue drops a repeat within 5 minutes).
    dedupe_id: str | None = None

    kind: ClassVar[CommandKind] = CommandKind.SCHEDULE
    queue: ClassVar[QueueName | None] = QueueName.SCHEDULE

    @classmethod
    def for_submit(cls, experiment_id: str) -> Schedule:
        """The wake-up of a submission: a retried submit of the same experiment is dropped."""
        return cls("submit", dedupe_id=f"submit-{experiment_id}")

    def to_message(self) -> Message:
        return Message(self.kind.value, {"reason": self.reason}, dedupe_id=self.dedupe_id)


@dataclass(frozen=True, slots=True)
class LaunchInstance:
    """Launch the QUEUED instance record ``instance_id`` for its attempt ``attempt``."""

    instance_id: str
    attempt: int

    kind: ClassVar[CommandKind] = CommandKind.LAUNCH_INSTANCE
    queue: ClassVar[QueueName | None] = QueueName.SCALE_UP

    @classmethod
    def of(cls, instance: Instance) -> LaunchInstance:
        return cls(instance.id, instance.attempt)

    @property
    def dedupe_id(self) -> str:
        return f"{self.instance_id}-{self.attempt}"

    def to_message(self) -> Message:
        return Message(
            self.kind.value,
            {"instance_id": self.instance_id, "attempt": self.attempt},
            dedupe_id=self.dedupe_id,
        )


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Run a reconcile pass (GCP: the Cloud Scheduler tick on the interruptions topic)."""

    kind: ClassVar[CommandKind] = CommandKind.RECONCILE
    queue: ClassVar[QueueName | None] = QueueName.INTERRUPTIONS

    def to_message(self) -> Message:
        return Message(self.kind.value, {})


@dataclass(frozen=True, slots=True)
class IdleReap:
    """Run an idle-reap pass (GCP: the Cloud Scheduler tick on the idle-reap topic, which is
    not a queue of the port: nothing in Corral sends one)."""

    kind: ClassVar[CommandKind] = CommandKind.IDLE_REAP
    queue: ClassVar[QueueName | None] = None

    def to_message(self) -> Message:
        return Message(self.kind.value, {})


Command: TypeAlias = Schedule | LaunchInstance | Reconcile | IdleReap


def send(
    queue: Queue, commands: Sequence[Command], *, delay_s: float = 0.0, dedupe: bool = True
) -> None:
    """Send commands to their queues (one ``send`` per queue, in order). ``delay_s`` delays
    them; ``dedupe=False`` drops their dedupe ids (a deliberate repeat of a command)."""
    by_queue: dict[QueueName, list[Message]] = {}
    for command in commands:
        if command.queue is None:
            raise ValueError(f"{command.kind}: no queue carries this command")
        message = command.to_message()
        if delay_s or not dedupe:
            message = replace(
                message, delay_s=delay_s, dedupe_id=message.dedupe_id if dedupe else None
            )
        by_queue.setdefault(command.queue, []).append(message)
    for name, messages in by_queue.items():
        queue.send(name, messages)


def parse(message: Message) -> Command:
    """The command a received message carries; ``MalformedCommand`` if it carries none."""
    try:
        kind = CommandKind(message.kind)
    except ValueError:
        raise UnknownCommand(f"unknown command kind {message.kind!r}") from None
    body: Any = message.body
    if not isinstance(body, Mapping):
        raise MalformedCommand(f"{kind}: the body must be an object, not {type(body).__name__}")
    if kind is CommandKind.SCHEDULE:
        return Schedule(_field(kind, body, "reason", str, ""), dedupe_id=message.dedupe_id)
    if kind is CommandKind.LAUNCH_INSTANCE:
        instance_id = _field(kind, body, "instance_id", str)
        if not instance_id:
            raise MalformedCommand(f"{kind}: 'instance_id' is empty")
        attempt = _field(kind, body, "attempt", int)
        if attempt < 0:
            raise MalformedCommand(f"{kind}: 'attempt' is negative ({attempt})")
        return LaunchInstance(instance_id, attempt)
    if kind is CommandKind.RECONCILE:
        return Reconcile()
    return IdleReap()


_MISSING: Any = object()
_T = TypeVar("_T")


def _field(
    kind: CommandKind, body: Mapping[str, Any], key: str, type_: type[_T], default: _T = _MISSING
) -> _T:
    value = body.get(key, default)
    if value is _MISSING:
        raise MalformedCommand(f"{kind}: the body has no {key!r}")
    # bool is an int subclass; a JSON true is not an attempt number.
    if not isinstance(value, type_) or (type_ is int and isinstance(value, bool)):
        raise MalformedCommand(
            f"{kind}: {key!r} must be {type_.__name__}, not {type(value).__name__} ({value!r})"
        )
    return value


__all__ = [
    "Command",
    "CommandKind",
    "IdleReap",
    "LaunchInstance",
    "MalformedCommand",
    "Reconcile",
    "Schedule",
    "UnknownCommand",
    "parse",
    "send",
]
