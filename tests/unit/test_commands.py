"""The queue commands (corral.ports.commands): build and parse round trips, today's literal
wire bodies, malformed messages, and sending each command to its queue."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.aws.sqs_queue import encode_body, parse_sqs_body
from corral.adapters.memory import FakeClock, InMemoryQueue
from corral.ports.commands import (
    Command,
    CommandKind,
    IdleReap,
    LaunchInstance,
    MalformedCommand,
    Reconcile,
    Schedule,
    UnknownCommand,
    parse,
    send,
)
from corral.ports.queue import Message, QueueName

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "command",
    [
        Schedule("agent inst-1 registered"),
        Schedule(""),
        Schedule.for_submit("exp-1"),
        LaunchInstance("inst-1", 0),
        LaunchInstance("inst-abc", 7),
        Reconcile(),
        IdleReap(),
    ],
)
def test_a_command_survives_the_wire(command: Command) -> None:
    message = command.to_message()
    assert message.kind == command.kind.value and type(message.kind) is str
    assert parse(message) == command
    # Through the SQS encoding (which does not carry the dedupe id) as the handlers see it.
    assert parse(parse_sqs_body(encode_body(message))) == parse(Message(message.kind, message.body))


def test_every_kind_has_a_command() -> None:
    kinds = {parse(Message(kind.value, _minimal_body(kind))).kind for kind in CommandKind}
    assert kinds == set(CommandKind)


def _minimal_body(kind: CommandKind) -> dict[str, Any]:
    return {"instance_id": "i", "attempt": 0} if kind is CommandKind.LAUNCH_INSTANCE else {}


# The bodies as Corral wrote them before the commands module (services/submit.py,
# services/shared/instance_removal.py, services/schedule_pass.py, infra/gcp/deploy.sh):
# messages already on a queue during an upgrade must still parse, and new ones must be
# written the same way.
TODAY = [
    ('{"kind":"schedule","body":{"reason":"submit"}}', Schedule("submit")),
    ('{"kind":"schedule","body":{"reason":"inst-1 registered"}}', Schedule("inst-1 registered")),
    ('{"kind":"schedule","body":{}}', Schedule("")),  # the GCP Cloud Scheduler tick
    (
        '{"kind":"launch_instance","body":{"instance_id":"inst-9f2","attempt":3}}',
        LaunchInstance("inst-9f2", 3),
    ),
    ('{"kind":"reconcile","body":{}}', Reconcile()),
    ('{"kind":"idle_reap","body":{}}', IdleReap()),
]


@pytest.mark.parametrize(("body", "command"), TODAY)
def test_todays_literal_bodies_parse_and_are_written_the_same(body: str, command: Command) -> None:
    assert parse(parse_sqs_body(body)) == command
    if not isinstance(command, Schedule) or command.reason:  # {} is only the timer's
        assert json.loads(encode_body(command.to_message())) == json.loads(body)


def test_todays_dedupe_ids_are_kept() -> None:
    assert Schedule.for_submit("e1").to_message().dedupe_id == "submit-e1"
    assert Schedule("x").to_message().dedupe_id is None
    assert LaunchInstance("inst-1", 2).to_message().dedupe_id == "inst-1-2"
    # Pub/Sub carries the dedupe id back as an attribute: it survives the round trip.
    assert parse(Schedule.for_submit("e1").to_message()) == Schedule.for_submit("e1")


def test_the_gcp_timer_payloads_are_commands() -> None:
    deploy = (ROOT / "infra" / "gcp" / "deploy.sh").read_text()
    ticks = re.findall(r"^tick \S+ \"[^\"]+\" \S+ (\S+)$", deploy, re.MULTILINE)
    assert ticks, "deploy.sh should publish its timers as commands"
    for kind in ticks:
        parse(Message(kind, {}))  # the body deploy.sh sends is {}


def test_unknown_body_keys_are_ignored() -> None:
    body = {"instance_id": "inst-1", "attempt": 1, "added_later": True}
    assert parse(Message("launch_instance", body)) == LaunchInstance("inst-1", 1)


@pytest.mark.parametrize(
    ("message", "says"),
    [
        (Message("mystery", {}), "unknown command kind 'mystery'"),
        (Message("", {}), "unknown command kind ''"),
        (Message("SCHEDULE", {}), "unknown command kind"),
        (Message("launch_instance", {}), "no 'instance_id'"),
        (Message("launch_instance", {"instance_id": "inst-1"}), "no 'attempt'"),
        (Message("launch_instance", {"attempt": 0}), "no 'instance_id'"),
        (Message("launch_instance", {"instance_id": "", "attempt": 0}), "'instance_id' is empty"),
        (Message("launch_instance", {"instance_id": 5, "attempt": 0}), "'instance_id' must be str"),
        (Message("launch_instance", {"instance_id": "i", "attempt": "0"}), "'attempt' must be int"),
        (Message("launch_instance", {"instance_id": "i", "attempt": 1.5}), "'attempt' must be int"),
        (Message("launch_instance", {"instance_id": "i", "attempt": True}), "must be int"),
        (Message("launch_instance", {"instance_id": "i", "attempt": -1}), "negative"),
        (Message("launch_instance", {"instance_id": "i", "attempt": None}), "must be int"),
        (Message("schedule", {"reason": 3}), "'reason' must be str"),
        (Message("schedule", [1, 2]), "body must be an object"),  # type: ignore[arg-type]
    ],
)
def test_malformed_messages_are_refused_clearly(message: Message, says: str) -> None:
    with pytest.raises(MalformedCommand, match=re.escape(says)) as refused:
        parse(message)
    assert isinstance(refused.value, ValueError)  # handlers that catch ValueError drop it
    assert isinstance(refused.value, UnknownCommand) == says.startswith("unknown")


class Recording:
    def __init__(self) -> None:
        self.sends: list[tuple[QueueName, list[Message]]] = []

    def send(self, queue: QueueName, messages: Sequence[Message]) -> None:
        self.sends.append((queue, list(messages)))


def test_send_puts_each_command_on_its_queue_in_order() -> None:
    queue = Recording()
    send(queue, [LaunchInstance("a", 0), Schedule("why"), LaunchInstance("b", 1)])
    assert queue.sends == [
        (
            QueueName.SCALE_UP,
            [LaunchInstance("a", 0).to_message(), LaunchInstance("b", 1).to_message()],
        ),
        (QueueName.SCHEDULE, [Schedule("why").to_message()]),
    ]
    send(queue, [Reconcile()])
    assert queue.sends[-1] == (QueueName.INTERRUPTIONS, [Reconcile().to_message()])
    with pytest.raises(ValueError, match="no queue carries"):
        send(queue, [IdleReap()])


def test_send_delays_and_drops_the_dedupe_id_when_asked() -> None:
    queue = Recording()
    send(queue, [LaunchInstance("a", 2)], delay_s=12.5)
    send(queue, [LaunchInstance("a", 2)], delay_s=3.0, dedupe=False)
    (_, [delayed]), (_, [repeat]) = queue.sends
    assert (delayed.delay_s, delayed.dedupe_id) == (12.5, "a-2")
    assert (repeat.delay_s, repeat.dedupe_id) == (3.0, None)
    assert parse(delayed) == parse(repeat) == LaunchInstance("a", 2)


def test_sent_commands_come_back_from_the_in_memory_queue() -> None:
    queue = InMemoryQueue(FakeClock(0.0))
    send(queue, [Schedule.for_submit("e1"), LaunchInstance("inst-1", 0)])
    got = [
        parse(r.message)
        for name in (QueueName.SCHEDULE, QueueName.SCALE_UP)
        for r in queue.receive(name, 10)
    ]
    assert got == [Schedule("submit", dedupe_id="submit-e1"), LaunchInstance("inst-1", 0)]
