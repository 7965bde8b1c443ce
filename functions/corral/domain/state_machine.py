"""Transition tables for the stored state machines.

Each machine is written once as a table of allowed edges, one reason per edge. Which states are
terminal is computed from the table (a state with no outgoing edge), never kept as a separate
list, so adding an edge can never leave a stale "terminal" set behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(Exception):
    """A state change the machine does not allow: a bug or a lost race, never user input."""

    def __init__(self, machine: str, source: str, target: str) -> None:
        super().__init__(f"{machine}: {source} -> {target} is not an allowed transition")
        self.machine = machine
        self.source = source
        self.target = target


@dataclass(frozen=True)
class TransitionTable(Generic[S]):
    """Allowed edges of one state machine, each with the reason it exists."""

    name: str
    states: tuple[S, ...]
    edges: Mapping[tuple[S, S], str]

    @classmethod
    def build(
        cls, name: str, states: Iterable[S], edges: Mapping[tuple[S, S], str]
    ) -> TransitionTable[S]:
        all_states = tuple(states)
        for source, target in edges:
            if source not in all_states or target not in all_states:
                raise ValueError(f"{name}: edge {source}->{target} names an unknown state")
        return cls(name=name, states=all_states, edges=dict(edges))

    def allows(self, source: S, target: S) -> bool:
        return (source, target) in self.edges

    def check(self, source: S, target: S) -> None:
        if not self.allows(source, target):
            raise IllegalTransition(self.name, source.value, target.value)

    def targets(self, source: S) -> frozenset[S]:
        return frozenset(t for (s, t) in self.edges if s == source)

    def sources(self, target: S) -> frozenset[S]:
        return frozenset(s for (s, t) in self.edges if t == target)

    def reachable(self, source: S, avoiding: frozenset[S] = frozenset()) -> frozenset[S]:
        """States reachable from ``source`` (itself included) without entering ``avoiding``."""
        seen = {source}
        frontier = [source]
        while frontier:
            for nxt in self.targets(frontier.pop()):
                if nxt not in seen and nxt not in avoiding:
                    seen.add(nxt)
                    frontier.append(nxt)
        return frozenset(seen)

    @property
    def terminal(self) -> frozenset[S]:
        """States with no way out."""
        return frozenset(s for s in self.states if not self.targets(s))

    def is_terminal(self, state: S) -> bool:
        return state in self.terminal


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One transition as it happened: the state entered, when, and why."""

    state: str
    at: float
    reason: str


HISTORY_LIMIT = 20


def append_history(
    history: tuple[HistoryEntry, ...], entry: HistoryEntry
) -> tuple[HistoryEntry, ...]:
    """Keep a short history: the first entry (creation) and the most recent ones."""
    combined = (*history, entry)
    if len(combined) <= HISTORY_LIMIT:
        return combined
    return (combined[0], *combined[-(HISTORY_LIMIT - 1) :])
