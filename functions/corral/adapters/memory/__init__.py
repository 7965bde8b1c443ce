"""In-memory adapters: a store, a queue, a clock and a simulated cloud.

Used by the unit tests, the trace simulator and the local stack. Each one holds the same
contract as its cloud counterpart (checked by tests/contract), so what passes here behaves
the same on AWS and GCP.
"""

from typing import TYPE_CHECKING

from corral.adapters.memory.clock import FakeClock
from corral.adapters.memory.cloud import SimulatedCloud
from corral.adapters.memory.cloud_model import InterruptionNotice, SimulatedCloudConfig
from corral.adapters.memory.queue import InMemoryQueue, Received
from corral.adapters.memory.store import InMemoryStore

__all__ = [
    "FakeClock",
    "InMemoryQueue",
    "InMemoryStore",
    "InterruptionNotice",
    "Received",
    "SimulatedCloud",
    "SimulatedCloudConfig",
]

if TYPE_CHECKING:  # mypy proves that each adapter satisfies its port
    from corral.ports.clock import Clock
    from corral.ports.cloud import CloudProvider
    from corral.ports.queue import Queue
    from corral.ports.store import Store

    def _conforms(clock: FakeClock) -> tuple[Store, Queue, Clock, CloudProvider]:
        return InMemoryStore(), InMemoryQueue(clock), clock, SimulatedCloud(clock)
