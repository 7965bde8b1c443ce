"""PubSubQueue against Google's Pub/Sub emulator, for the queue contract suite.

One emulator per test session (``gcloud beta emulators pubsub start`` on a free loopback
port, ready in 1-2 s), started in the background when the session has pubsub cases
(``prestart``), stopped at the end by the Java process's own PID (as for Firestore; see
firestore_harness.py). Each harness gets a fresh emulator project with one topic per
QueueName and one pull subscription per topic. Skips, with the reason, when ``gcloud``, Java,
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

import atexit
import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from corral.adapters.memory import FakeClock
from corral.ports.queue import QueueName
from tests.contract.firestore_harness import _descendants, _free_port, _is_java
from tests.contract.queue_harness import Got, QueueHarness

READY_TIMEOUT_S = 30.0
_projects = itertools.count(1)


class PubSubEmulator:
    def __init__(self) -> None:
        self.host = f"127.0.0.1:{_free_port()}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._wrapper = subprocess.Popen(
            ["gcloud", "beta", "emulators", "pubsub", "start", f"--host-port={self.host}", "-q"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.java_pids: list[int] = []

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._wrapper.poll() is not None:
                raise RuntimeError(f"the Pub/Sub emulator exited early:\n{self._output()}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/", timeout=1) as reply:
                    if reply.status == 200:
                        self.java_pids = [p for p in _descendants(self._wrapper.pid) if _is_java(p)]
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)  # waiting for a subprocess to boot, not for test time
        self.stop()
        raise RuntimeError(f"the Pub/Sub emulator was not ready in time:\n{self._output()}")

    def _output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        pids = self.java_pids or [p for p in _descendants(self._wrapper.pid) if _is_java(p)]
        for pid in pids:  # Java by its own PID: killing the wrapper would leave it running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            self._wrapper.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._wrapper.kill()
            self._wrapper.wait(timeout=5)
        self._log.close()


_running: list[PubSubEmulator] = []
_starting: list[PubSubEmulator] = []
_clients: list[tuple[Any, Any]] = []


def _missing_prerequisite() -> str | None:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        return "gcloud is not installed (Google's Pub/Sub emulator comes with it)"
    if shutil.which("java") is None:
        return "Java is not installed (the Pub/Sub emulator needs a JRE)"
    sdk = Path(os.path.realpath(gcloud)).parents[1]
    if not (sdk / "platform" / "pubsub-emulator").is_dir():
        return f"the gcloud component pubsub-emulator is not installed under {sdk}"
    try:
        import google.cloud.pubsub_v1  # noqa: F401
    except ImportError:
        return "google-cloud-pubsub is not installed (pip install 'corral[gcp]')"
    return None


def prestart() -> None:
    if not _running and not _starting and _missing_prerequisite() is None:
        started = PubSubEmulator()
        atexit.register(started.stop)
        _starting.append(started)


def emulator() -> PubSubEmulator:
    if not _running:
        reason = _missing_prerequisite()
        if reason is not None:
            pytest.skip(reason)
        started = _starting.pop() if _starting else PubSubEmulator()
        atexit.unregister(started.stop)
        atexit.register(started.stop)
        try:
            started.wait_ready()
        except RuntimeError as error:
            pytest.skip(f"the Pub/Sub emulator did not start: {error}")
        _running.append(started)
    return _running[0]


def stop_emulator() -> None:
    while _running or _starting:
        running = (_running or _starting).pop()
        atexit.unregister(running.stop)
        running.stop()
    _clients.clear()


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
