"""The Context's ports, wrapped so a function can die between any two of its steps.

A crash is a ``SimulatedCrash`` raised just before a store write, cloud call or queue send
(the call never happens) or just after it (its effect landed, the function never learns).
It derives from ``BaseException``, so no ``except Exception`` in Corral or in Powertools'
batch processor can swallow it: it ends the invocation as a dead Lambda would. Crashes are
only armed while the soak runs a handler (``Crashes.invocation``).

``ChaosQueue`` also tells the mailbox about each send's delay: moto's SQS delays count in
real seconds, so the soak strips ``delay_s`` before SQS sees it and holds the message back
itself, on the soak's clock.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from corral.ports.queue import Message, QueueName
from corral.services.shared.service_context import Context

T = TypeVar("T")

STORE_WRITES = ("commit", "put_heartbeat", "append_events", "append_logs")
CLOUD_CALLS = ("launch", "terminate", "cancel_spot_requests")


class SimulatedCrash(BaseException):
    """The function died here."""


class Crashes:
    def __init__(self, rate: float, rng: random.Random) -> None:
        self.rate = rate
        self.rng = rng
        self.armed: str | None = None  # the function now running, if any
        self.injected: Counter[str] = Counter()  # "function: before store.commit" -> n

    @contextlib.contextmanager
    def invocation(self, function: str) -> Iterator[None]:
        before, self.armed = self.armed, function
        try:
            yield
        finally:
            self.armed = before

    def around(self, port: str, name: str, call: Callable[[], T]) -> T:
        if self.armed is None or not self.rate or self.rng.random() >= self.rate:
            return call()
        where = "before" if self.rng.random() < 0.5 else "after"
        label = f"{self.armed}: {where} {port}.{name}"
        if where == "before":
            self.injected[label] += 1
            raise SimulatedCrash(label)
        call()  # it happens; the function never learns
        self.injected[label] += 1
        raise SimulatedCrash(label)


class _Wrapped:
    """Delegates everything to ``inner``; the named methods go through ``Crashes.around``."""

    def __init__(self, inner: Any, port: str, names: Sequence[str], crashes: Crashes) -> None:
        self._inner, self._port, self._names, self._crashes = inner, port, names, crashes

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._names or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._crashes.around(self._port, name, lambda: attr(*args, **kwargs))

        return call


class ChaosQueue:
    def __init__(
        self, inner: Any, crashes: Crashes, on_send: Callable[[QueueName, Message], None]
    ) -> None:
        self._inner, self._crashes, self._on_send = inner, crashes, on_send

    def send(self, queue: QueueName, messages: Sequence[Message]) -> None:
        def send() -> None:
            if queue is QueueName.SCHEDULE:  # FIFO: SqsQueue refuses a delay, as on AWS
                self._inner.send(queue, messages)
                return
            for m in messages:
                self._on_send(queue, m)
            self._inner.send(queue, [replace(m, delay_s=0.0) for m in messages])

        self._crashes.around("queue", "send", send)


def wrap(ctx: Context, crashes: Crashes, on_send: Callable[[QueueName, Message], None]) -> None:
    ctx.store = _Wrapped(ctx.store, "store", STORE_WRITES, crashes)
    ctx.cloud = _Wrapped(ctx.cloud, "cloud", CLOUD_CALLS, crashes)
    ctx.queue = ChaosQueue(ctx.queue, crashes, on_send)
