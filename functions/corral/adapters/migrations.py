"""Schema versions of stored records, and the steps that bring old records up to date.

Every record kind a store writes (instances, trials, experiments, pool state, heartbeats,
events, log lines, metric series and their summaries) carries ``schema_version``: the
version of its kind's stored shape, one number per kind, so a change to one kind never
makes every other kind's records "old". The codecs (DynamoDB, Firestore) stamp it on every
write and call ``SCHEMA.upgrade`` on every read, so the rest of the code only ever sees
current records:

- no ``schema_version`` attribute: written before versions existed (Corral up to the
  release that introduced them), which is version 1;
- older than this code: each step from that version on runs, in order (pure functions on
  the stored attributes, ``Step``); the record is rewritten at the current version the
  next time anything writes it (a read never writes);
- newer than this code: refused with ``NewerSchemaError`` naming the record, unless the
  writer said that readers of this code's version may read it (``schema_min_reader``): it
  does so when every step since was *additive* (only added attributes whose absence means
  their default), and then the unknown attributes are ignored like any other.

``schema_version`` is not the ``version`` counter of optimistic concurrency: a migration
never changes ``version``, so a migrated record commits with the same condition as any.

How to add a step, and the test to write with it: docs/upgrades.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from corral.adapters.record_types import hints
from corral.domain.instance import Instance
from corral.domain.metrics import MetricSeries, MetricSummary
from corral.domain.records import Event, Experiment, Heartbeat, LogLine, PoolState
from corral.domain.trial import Trial

SCHEMA_VERSION = "schema_version"  # the attribute every stored record carries
MIN_READER = "schema_min_reader"  # written only when older readers may read the record
UNVERSIONED = 1  # the version of a record written before versions existed
_ABSENT = object()


class NewerSchemaError(RuntimeError):
    """A record written by a newer Corral in a shape this code would misread."""


class ValueCodec(Protocol):
    """How one store encodes a single value of a declared type (its codec's functions)."""

    def encode(self, value: Any, tp: Any) -> Any: ...

    def decode(self, raw: Any, tp: Any) -> Any: ...


@dataclass(frozen=True)
class CodecFunctions:
    """A store's :class:`ValueCodec`: its codec module's two value functions."""

    encode_value: Callable[[Any, Any], Any]
    decode_value: Callable[[Any, Any], Any]

    def encode(self, value: Any, tp: Any) -> Any:
        return self.encode_value(value, tp)

    def decode(self, raw: Any, tp: Any) -> Any:
        return self.decode_value(raw, tp)


@dataclass(frozen=True)
class StoredFields:
    """A stored record's top-level attributes, still in its store's encoding.

    Steps see records through this, so one step serves every store: ``get`` decodes an
    attribute with the type the step names (the type it had at that version), ``with_value``
    encodes one. Immutable: every change returns a new ``StoredFields``, so steps are pure.
    """

    raw: Mapping[str, Any]
    codec: ValueCodec

    def has(self, name: str) -> bool:
        return name in self.raw

    def get(self, name: str, tp: Any, default: Any = _ABSENT) -> Any:
        if name not in self.raw:
            if default is _ABSENT:
                raise KeyError(name)
            return default
        return self.codec.decode(self.raw[name], tp)

    def with_value(self, name: str, value: Any, tp: Any) -> StoredFields:
        return StoredFields({**self.raw, name: self.codec.encode(value, tp)}, self.codec)

    def without(self, name: str) -> StoredFields:
        return StoredFields({k: v for k, v in self.raw.items() if k != name}, self.codec)

    def renamed(self, old: str, new: str) -> StoredFields:
        if old not in self.raw:
            return self
        moved = {(new if k == old else k): v for k, v in self.raw.items()}
        return StoredFields(moved, self.codec)


@dataclass(frozen=True)
class Step:
    """Brings a record of ``kind`` from ``from_version`` to ``from_version + 1``.

    ``additive``: the step only adds attributes whose absence reads as their default, so
    code of ``from_version`` may still read records of the new version (ignoring them)."""

    from_version: int
    apply: Callable[[StoredFields], StoredFields]
    why: str
    additive: bool = False


@dataclass(frozen=True)
class Kind:
    name: str  # for messages: "instance", "trial", ...
    cls: type
    key: tuple[str, ...]  # the fields that name one record, for messages
    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        numbers = [s.from_version for s in self.steps]
        if numbers != list(range(UNVERSIONED, UNVERSIONED + len(numbers))):
            raise ValueError(f"{self.name}: steps must migrate 1->2, 2->3, ... in order")

    @property
    def version(self) -> int:
        """The version this code writes."""
        return UNVERSIONED + len(self.steps)

    @property
    def min_reader(self) -> int:
        """The oldest code version that reads records of ``version`` correctly: steps since
        it only added attributes (a non-additive step raises the floor)."""
        floor = self.version
        for step in reversed(self.steps):
            if not step.additive:
                break
            floor = step.from_version
        return floor


@dataclass(frozen=True)
class Schema:
    kinds: tuple[Kind, ...]
    _by_class: dict[type, Kind] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_class", {k.cls: k for k in self.kinds})

    def kind_of(self, cls: type) -> Kind | None:
        return self._by_class.get(cls)

    def stamp(self, kind: Kind, fields: StoredFields) -> StoredFields:
        """The attributes to write: the record's own, plus its kind's version."""
        stamped = fields.with_value(SCHEMA_VERSION, kind.version, int)
        if kind.min_reader < kind.version:
            stamped = stamped.with_value(MIN_READER, kind.min_reader, int)
        return stamped

    def upgrade(self, kind: Kind, fields: StoredFields) -> StoredFields:
        """A stored record as the current version stores it (see the module docstring)."""
        stored = int(fields.get(SCHEMA_VERSION, int, UNVERSIONED))
        if stored > kind.version:
            readable_from = int(fields.get(MIN_READER, int, stored))
            if readable_from > kind.version:
                raise NewerSchemaError(
                    f"{kind.name} {_name(kind, fields)} has schema version {stored}; this "
                    f"Corral reads {kind.name} records up to version {kind.version}. A newer "
                    "Corral wrote it: deploy that version again (docs/upgrades.md)"
                )
            return fields  # newer, but only by added attributes: they are ignored
        for step in kind.steps[stored - UNVERSIONED :]:
            fields = step.apply(fields)
        return fields


def _name(kind: Kind, fields: StoredFields) -> str:
    """The record's key for a message, read without trusting its newer shape."""
    parts = []
    for name in kind.key:
        try:
            parts.append(str(fields.get(name, hints(kind.cls)[name])))
        except Exception:  # a newer shape may encode it differently: say so, do not fail
            parts.append("?")
    return "/".join(parts)


# The stored kinds of this version. Nested records without an entry (an instance's offering
# and history, a heartbeat's trial reports, a series' points) are part of their parent's
# shape: a change to them is a step of the parent. A metric summary has its own entry: it is
# also read on its own (list views read only the summaries).
SCHEMA = Schema(
    (
        Kind("instance", Instance, ("id",)),
        Kind("trial", Trial, ("id",)),
        Kind("experiment", Experiment, ("id",)),
        Kind("pool state", PoolState, ("pool",)),
        Kind("heartbeat", Heartbeat, ("instance_id",)),
        Kind("event", Event, ("at",)),
        Kind("log line", LogLine, ("trial_id", "seq")),
        Kind("metric series", MetricSeries, ("trial_id", "kind")),
        Kind("metric summary", MetricSummary, ("trial_id", "kind")),
    )
)


D = TypeVar("D")


def decode_record(cls: type[D], stored: Mapping[str, Any], codec: ValueCodec) -> D:
    """Build ``cls`` from a store's attributes (``codec`` decodes one value); attributes that
    are not fields (keys, TTL) are ignored. Attributes of an older schema version are migrated
    first; of a newer one refused (``NewerSchemaError``) unless they say this code may read
    them. A field left out takes its default (None for an optional field without one)."""
    kind = SCHEMA.kind_of(cls)
    if kind is not None:
        stored = SCHEMA.upgrade(kind, StoredFields(stored, codec)).raw
    field_types = hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in stored:
            kwargs[f.name] = codec.decode(stored[f.name], field_types[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = None  # an optional field without a default, stored as None
    return cls(**kwargs)
