"""Bin-packing of trials onto GPU slots, shared by the scheduler (real agents) and the planner
(agents on their way and instances it is about to buy), so both place work the same way.

Best fit for a trial that fits on one agent: the agent with the fewest free GPUs that still
holds it, which keeps whole agents free for big trials and lets idle ones be reaped. A trial
larger than any one agent is gang-placed on several *entirely free* agents, all or nothing,
preferring agents of one instance type (torch.distributed wants uniform ranks).

Agents are bucketed by free-GPU count, so a placement costs O(max GPUs per agent) and a tick
over 10,000 pending trials and 1,000 agents stays linear.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Parts = tuple[tuple[str, tuple[int, ...]], ...]

# A bin whose GPU-hour costs more than this times the cheapest one is filled last.
# (On-demand GPUs cost about three times spot; spot shapes of one family differ by < 10 %.)
EXPENSIVE_FACTOR = 1.5


@dataclass(slots=True)
class Bin:
    """One agent's GPUs as the packer sees them (mutable working copy)."""

    id: str
    instance_type: str
    slots: int
    free: list[int]
    hourly_price: float = 0.0
    # Set by the planner for instances that do not exist yet.
    hypothetical: bool = False

    @property
    def fully_free(self) -> bool:
        return len(self.free) == self.slots

    @property
    def price_per_slot(self) -> float:
        return self.hourly_price / max(self.slots, 1)


@dataclass(slots=True)
class BinIndex:
    """Bins bucketed by free-GPU count; placement mutates the bins it uses."""

    _by_free: dict[int, dict[str, Bin]] = field(default_factory=dict)
    _bins: dict[str, Bin] = field(default_factory=dict)
    _cheapest: float = float("inf")  # lowest price per slot of any bin added
    # GPUs on entirely free bins: a gang can never need more, so most unplaceable trials
    # are refused without scanning every bin (10,000 pending trials x 1,000 agents).
    _fully_free_slots: int = 0

    @classmethod
    def of(cls, bins: Iterable[Bin]) -> BinIndex:
        index = cls()
        for b in bins:
            index.add(b)
        return index

    def add(self, b: Bin) -> None:
        if b.id in self._bins:
            raise ValueError(f"bin {b.id} added twice")
        self._bins[b.id] = b
        self._by_free.setdefault(len(b.free), {})[b.id] = b
        self._fully_free_slots += b.slots if b.fully_free else 0
        if b.hourly_price > 0:
            self._cheapest = min(self._cheapest, b.price_per_slot)

    def remove(self, bin_id: str) -> None:
        b = self._bins.pop(bin_id)
        del self._by_free[len(b.free)][bin_id]
        self._fully_free_slots -= b.slots if b.fully_free else 0

    def get(self, bin_id: str) -> Bin | None:
        return self._bins.get(bin_id)

    def __len__(self) -> int:
        return len(self._bins)

    def bins(self) -> list[Bin]:
        return list(self._bins.values())

    def _take(self, b: Bin, count: int) -> tuple[int, ...]:
        if b.fully_free and count > 0:
            self._fully_free_slots -= b.slots
        bucket = self._by_free[len(b.free)]
        del bucket[b.id]
        gpus = tuple(b.free[:count])
        del b.free[:count]
        self._by_free.setdefault(len(b.free), {})[b.id] = b
        return gpus

    def fully_free_slots(self) -> int:
        return self._fully_free_slots

    def fully_free_of(self, instance_type: str) -> list[Bin]:
        """Entirely free bins of one instance type, real agents before hypothetical ones
        (insertion order breaks ties): the candidates of a uniform gang."""
        if self._fully_free_slots == 0:
            return []
        found = [
            b
            for b in self._bins.values()
            if b.fully_free and b.slots > 0 and b.instance_type == instance_type
        ]
        found.sort(key=lambda b: b.hypothetical)
        return found

    def place(self, slots: int) -> Parts | None:
        """Place one trial; return (bin id, GPU indices) per part in rank order, or None.

        A trial larger than any one free agent is a gang on entirely free agents of one
        instance type (the planner buys uniform gangs, so planning again over what it
        bought gives the same answer).
        """
        single = self._best_fit(slots)
        if single is not None:
            return ((single.id, self._take(single, slots)),)
        if slots == 0:
            return None
        gang = self._gang(slots)
        if gang is None:
            return None
        return self.take_whole(gang, slots)

    def take_whole(self, gang: Sequence[Bin], slots: int) -> Parts:
        """Place a gang of ``slots`` GPUs on these bins of the index, filling each in turn."""
        parts: list[tuple[str, tuple[int, ...]]] = []
        remaining = slots
        for b in gang:
            if self._bins.get(b.id) is not b:
                raise ValueError(f"bin {b.id} is not in the index")
            count = min(len(b.free), remaining)
            parts.append((b.id, self._take(b, count)))
            remaining -= count
        if remaining > 0:
            raise ValueError(f"{slots} GPUs do not fit on {', '.join(b.id for b in gang)}")
        return tuple(parts)

    def _best_fit(self, slots: int) -> Bin | None:
        """The tightest fit among *cheap* bins, else the tightest fit of any price.

        Cheap: a GPU-hour within ``EXPENSIVE_FACTOR`` of the cheapest bin added (spot
        agents, when the pool also runs on-demand fallback agents). Filling the spare GPUs
        of an expensive agent would keep it alive for as long as its longest trial; left
        alone, it empties and the reaper lets it go.
        """
        tightest: Bin | None = None
        for free in sorted(f for f, bucket in self._by_free.items() if bucket and f >= slots):
            bucket = self._by_free[free]
            # Among equally tight fits prefer real agents over hypothetical ones, and
            # partly used agents over fully free ones (insertion order breaks ties).
            best = min(
                bucket.values(), key=lambda b: (self._expensive(b), b.hypothetical, b.fully_free)
            )
            if not self._expensive(best):
                return best
            tightest = tightest or best
        return tightest

    def _expensive(self, b: Bin) -> bool:
        return b.price_per_slot > self._cheapest * EXPENSIVE_FACTOR

    def _gang(self, slots: int) -> list[Bin] | None:
        if self._fully_free_slots < slots:
            return None
        by_type: dict[str, list[Bin]] = {}
        for b in self._bins.values():
            if b.fully_free and b.slots > 0:
                by_type.setdefault(b.instance_type, []).append(b)
        # The instance type that needs the fewest agents, then real before hypothetical
        # ones, then the cheapest.
        uniform: list[list[Bin]] = []
        for group in by_type.values():
            group.sort(key=lambda b: b.hypothetical)
            size = group[0].slots
            needed = -(-slots // size)
            if len(group) >= needed:
                uniform.append(group[:needed])
        if not uniform:
            return None
        return min(
            uniform,
            key=lambda g: (
                len(g),
                sum(b.hypothetical for b in g),
                sum(b.hourly_price for b in g),
            ),
        )
