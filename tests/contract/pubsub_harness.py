"""PubSubQueue against Google's Pub/Sub emulator, for the queue contract suite.

One emulator per test session (``gcloud beta emulators pubsub start`` on a free loopback
port, ready in 1-2 s), started in the background when the session has pubsub cases
(``prestart``), stopped at the end by the Java process's own PID (google_emulator.py). Each
harness gets a fresh emulator project with one topic per QueueName and one pull subscription
per topic. Skips, with the reason, when ``gcloud``, Java,
the emulator component or ``google-cloud-pubsub`` is missing.

The consumer side plays the push subscription and the handler, with a virtual clock:
- a delivery is parsed with ``parse_delivery`` (the handlers' parser) from the envelope a push
  subscription would post;
- a delayed message that is not due yet is failed as the handler fails it (``NotDue``) and
  comes back once due (the real retry policy's backoff is not modelled: it only adds delay);
- the ack deadline is virtual: the subscription's real one is 600 s, and when the virtual
  deadline of an unacknowledged delivery passes, the harness nacks it (ack deadline 0), so
  the emulator redelivers it as it would after a real expiry. Nothing sleeps.
"""

from __future__ import annotations

import base64
import itertools
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from corral.adapters.memory import FakeClock
from corral.ports.queue import QueueName
from tests.contract.google_emulator import EmulatorSession, GoogleEmulator, missing_prerequisite
from tests.contract.queue_harness import Got, QueueHarness

_projects = itertools.count(1)


class PubSubEmulator(GoogleEmulator):
    def __init__(self) -> None:
        super().__init__("Pub/Sub", ["beta", "emulators", "pubsub", "start"])


_clients: list[tuple[Any, Any]] = []


def _missing_prerequisite() -> str | None:
    return missing_prerequisite(
        "Pub/Sub", "google.cloud.pubsub_v1", "google-cloud-pubsub", component="pubsub-emulator"
    )


_session = EmulatorSession("Pub/Sub", PubSubEmulator, _missing_prerequisite, on_stop=_clients.clear)
prestart = _session.prestart
emulator = _session.emulator
stop_emulator = _session.stop


def clients() -> tuple[Any, Any]:
    """(publisher, subscriber) on the emulator, shared by the session."""
    running = emulator()
    if not _clients:
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        # The clients read the variable when built: scoped so nothing else is redirected.
        with mock.patch.dict(os.environ, {"PUBSUB_EMULATOR_HOST": running.host}):
            _clients.append((pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()))
    return _clients[0]


@contextmanager
def pubsub_on_emulator() -> Iterator[QueueHarness]:
    from corral.adapters.gcp.pubsub_queue import (
        DEFAULT_TOPICS,
        MAX_MESSAGE_BYTES,
        PubSubQueue,
        parse_delivery,
    )

    publisher, subscriber = clients()
    project = f"corral-contract-{next(_projects)}"
    subscriptions: dict[QueueName, str] = {}
    for name, topic_id in DEFAULT_TOPICS.items():
        topic = publisher.create_topic(name=f"projects/{project}/topics/{topic_id}").name
        subscriptions[name] = subscriber.create_subscription(
            request={
                "name": f"projects/{project}/subscriptions/{topic_id}-contract",
                "topic": topic,
                "ack_deadline_seconds": 600,
            }
        ).name
    clock = FakeClock()
    # ack id -> virtual time at which the delivery is failed (nacked) for redelivery
    outstanding: dict[QueueName, dict[str, float]] = {name: {} for name in QueueName}

    def expire(name: QueueName) -> None:
        now = clock.now()
        due = [ack for ack, at in outstanding[name].items() if at <= now]
        if due:
            subscriber.modify_ack_deadline(
                request={
                    "subscription": subscriptions[name],
                    "ack_ids": due,
                    "ack_deadline_seconds": 0,
                }
            )
            for ack in due:
                del outstanding[name][ack]

    def receive(name: QueueName, max_messages: int, visibility_timeout_s: float) -> list[Got]:
        expire(name)
        with warnings.catch_warnings():  # deprecated, but the way not to wait on empty
            warnings.simplefilter("ignore", DeprecationWarning)
            reply = subscriber.pull(
                request={
                    "subscription": subscriptions[name],
                    "max_messages": min(max_messages, 10),
                    "return_immediately": True,  # the emulator answers at once
                }
            )
        now = clock.now()
        got = []
        for received in reply.received_messages:
            envelope = {
                "message": {
                    "data": base64.b64encode(received.message.data).decode(),
                    "attributes": dict(received.message.attributes),
                    "messageId": received.message.message_id,
                }
            }
            delivery = parse_delivery(envelope)
            if delivery.not_before > now:  # the handler raises NotDue: failed, comes back
                outstanding[name][received.ack_id] = delivery.not_before
                continue
            outstanding[name][received.ack_id] = now + visibility_timeout_s
            got.append(Got(received.ack_id, delivery.message, None))
        return got

    def delete(name: QueueName, receipt: str) -> None:
        subscriber.acknowledge(request={"subscription": subscriptions[name], "ack_ids": [receipt]})
        outstanding[name].pop(receipt, None)

    yield QueueHarness(
        queue=PubSubQueue(project, publisher=publisher, clock=clock.now),
        fifo=frozenset(),  # no Pub/Sub topic deduplicates
        receive=receive,
        delete=delete,
        advance=clock.advance,
        max_message_bytes=MAX_MESSAGE_BYTES,
        max_delay_s=None,  # not_before carries any delay
    )
