"""Secondary indexes for the in-memory store.

Insertion-ordered dicts serve as ordered sets: query results come out in a deterministic
order (the order records entered the indexed value) whatever the hash seed, so simulator runs
are reproducible without sorting every result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

IdSet = dict[str, None]


class Index:
    """Record ids by the value of one attribute (pool, state, experiment)."""

    def __init__(self) -> None:
        self._ids: dict[str, IdSet] = {}

    def move(self, record_id: str, old: str | None, new: str) -> None:
        if old == new:
            return  # unchanged: keep the record's place in the order
        if old is not None:
            ids = self._ids.get(old)
            if ids is not None:
                ids.pop(record_id, None)
                if not ids:
                    del self._ids[old]
        self._ids.setdefault(new, {})[record_id] = None

    def hits(self, values: Iterable[str] | None) -> list[IdSet] | None:
        """The id sets of ``values`` (a union), or None when there is no filter."""
        if values is None:
            return None
        # Sorted so a union over a set of states has a deterministic order.
        return [self._ids[v] for v in sorted(set(values)) if v in self._ids]


def select(filters: Sequence[list[IdSet] | None]) -> list[str] | None:
    """Ids matching every filter (each a union of id sets); None when no filter is given.

    Iterates the smallest filter and checks membership in the others: a query costs about
    the size of its most selective filter, never a scan of the whole table.
    """
    active = [f for f in filters if f is not None]
    if not active:
        return None
    active.sort(key=lambda union: sum(len(ids) for ids in union))
    first, rest = active[0], active[1:]
    if not rest:
        return [record_id for ids in first for record_id in ids]
    if len(rest) == 1 and len(rest[0]) == 1:  # the common case: pool and state(s)
        other = rest[0][0]
        return [record_id for ids in first for record_id in ids if record_id in other]
    return [
        record_id
        for ids in first
        for record_id in ids
        if all(any(record_id in other for other in union) for union in rest)
    ]
