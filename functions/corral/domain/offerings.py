"""Offerings: the unit the planner buys, and the memory of offerings the cloud refused.

An *offering* is one (instance type, location, capacity type) a pool may launch. The location
is an AWS subnet (which pins an availability zone) or a GCP zone. Capacity errors are about
offerings, not pools: when ``p4d.24xlarge`` spot in ``us-east-1a`` has no capacity, on-demand
in the same zone, or spot in another zone, may still launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


@dataclass(frozen=True, slots=True)
class Offering:
    """One thing a pool can launch, with the figures the planner ranks it by."""

    instance_type: str
    location: str  # AWS subnet id (or AZ when no subnet is set); GCP zone
    capacity_type: CapacityType
    slots: int  # GPUs per instance (slots a trial can use)
    hourly_price: float  # USD per instance-hour, for planning and cost accounting

    @property
    def key(self) -> str:
        """Stable identifier used in records, events and the capacity memory."""
        return f"{self.instance_type}|{self.location}|{self.capacity_type.value}"

    @property
    def price_per_slot_hour(self) -> float:
        return self.hourly_price / max(self.slots, 1)

    @property
    def is_spot(self) -> bool:
        return self.capacity_type is CapacityType.SPOT


@dataclass(frozen=True, slots=True)
class CapacityMemory:
    """Offerings the cloud recently refused, remembered until a deadline (clock seconds).

    Karpenter keeps such a memory for 3 minutes; we default to the same. Immutable (it lives
    inside the frozen PoolState): marking returns a new memory, so a record read from a
    store can never be changed behind the store's back.
    """

    unavailable_until: Mapping[str, float] = field(default_factory=dict)

    def marked_unavailable(self, offering_key: str, now: float, ttl_s: float) -> CapacityMemory:
        """A new memory with one more refused offering; expired entries are dropped."""
        kept = {k: t for k, t in self.unavailable_until.items() if t > now}
        kept[offering_key] = max(kept.get(offering_key, 0.0), now + ttl_s)
        return CapacityMemory(MappingProxyType(kept))

    def is_available(self, offering_key: str, now: float) -> bool:
        return self.unavailable_until.get(offering_key, 0.0) <= now
