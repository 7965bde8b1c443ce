"""Records as plain JSON, for the upgrade fixtures (tests/fixtures/upgrade/).

``snapshot(store, ...)`` reads everything a scenario stored through the Store port and
turns it into JSON-ready values with no store's encoding in it: the previous version's
capture writes it next to the raw items, and the upgrade tests compare what the new code
reads from those raw items with it. ``plain`` keeps what the domain means (enums as their
value, tuples as lists, mappings as ``[key, value]`` pairs, non-finite floats as text), so
two reads agree exactly when they decode to equal records.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from corral.domain.metrics import MetricKind
from corral.ports.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
BIG = 100_000


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if isinstance(value, Mapping):
        return [[plain(k), plain(v)] for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _sorted(records: Iterable[Any]) -> list[Any]:
    return sorted((plain(r) for r in records), key=lambda d: json.dumps(d, sort_keys=True))


def snapshot(store: Store, pools: Iterable[str]) -> dict[str, list[Any]]:
    """Every record, observation and metric series the store holds, as plain values."""
    instances = store.instances()
    trials = store.trials()
    return {
        "experiments": _sorted(store.experiments(limit=BIG)),
        "trials": _sorted(trials),
        "instances": _sorted(instances),
        "pools": _sorted(store.pool_state(p) for p in sorted(pools)),
        "heartbeats": _sorted(store.heartbeats([i.id for i in instances]).values()),
        "events": _sorted(store.events(limit=BIG)),
        "logs": _sorted(line for t in trials for line in store.logs(t.id, limit=BIG)),
        "metrics": _sorted(
            series
            for t in trials
            for kind in MetricKind
            if (series := store.metric_series(t.id, kind)) is not None
        ),
    }


def load(version: str, name: str) -> Any:
    return json.loads((FIXTURES / version / name).read_text())
