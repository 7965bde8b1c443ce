"""Append-only observations for the in-memory store: the event log and trial log lines.

Both are kept sorted so a page is a binary search plus a slice, not a scan: the simulator
appends hundreds of thousands of events and the API pages through them.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict

from corral.domain.records import Event, LogLine


class _SortedEvents:
    """Events sorted by ``(at, arrival)``; arrival breaks ties in append order."""

    def __init__(self) -> None:
        self.keys: list[tuple[float, int]] = []
        self.events: list[Event] = []

    def insert(self, key: tuple[float, int], event: Event) -> None:
        # Appends are almost always in time order (one clock), so this is usually an append;
        # an event stamped a little in the past (another function's clock) is slotted in.
        if not self.keys or key >= self.keys[-1]:
            self.keys.append(key)
            self.events.append(event)
            return
        index = bisect.bisect_right(self.keys, key)
        self.keys.insert(index, key)
        self.events.insert(index, event)

    def after(self, since: float, limit: int) -> list[Event]:
        # Every key at exactly ``since`` sorts below (since, +inf): strictly-after semantics.
        start = bisect.bisect_right(self.keys, (since, float("inf")))
        return self.events[start : start + max(limit, 0)]


class EventLog:
    """All events, plus one sorted copy per pool so a pool filter never scans other pools."""

    def __init__(self) -> None:
        self._arrival = itertools.count()
        self._all = _SortedEvents()
        self._by_pool: dict[str, _SortedEvents] = defaultdict(_SortedEvents)

    def append(self, event: Event) -> None:
        key = (event.at, next(self._arrival))
        self._all.insert(key, event)
        if event.pool is not None:
            self._by_pool[event.pool].insert(key, event)

    def after(self, since: float, limit: int, pool: str | None) -> list[Event]:
        if pool is None:
            return self._all.after(since, limit)
        found = self._by_pool.get(pool)
        return [] if found is None else found.after(since, limit)


class LogBook:
    """Log lines per trial, keyed by ``seq``. Agents resend a batch when a reply is lost, so
    a second line with the same ``(trial_id, seq)`` is dropped (the first one is kept)."""

    def __init__(self) -> None:
        self._seqs: dict[str, list[int]] = defaultdict(list)
        self._lines: dict[str, dict[int, LogLine]] = defaultdict(dict)

    def add(self, line: LogLine) -> None:
        lines = self._lines[line.trial_id]
        if line.seq in lines:
            return
        lines[line.seq] = line
        seqs = self._seqs[line.trial_id]
        if not seqs or line.seq > seqs[-1]:
            seqs.append(line.seq)
        else:
            bisect.insort(seqs, line.seq)

    def page(self, trial_id: str, after_seq: int, limit: int) -> list[LogLine]:
        seqs = self._seqs.get(trial_id)
        if not seqs:
            return []
        start = bisect.bisect_right(seqs, after_seq)
        lines = self._lines[trial_id]
        return [lines[s] for s in seqs[start : start + max(limit, 0)]]
