"""Records <-> Firestore document data (plain Python values the client library encodes).

Driven by each dataclass's type hints, like the DynamoDB codec, so a field added to a record
is stored without touching this module and every value comes back with its declared type:

- ``int`` is an integerValue (64-bit: a larger one is refused here, not truncated by the
  server); ``float`` a doubleValue (Firestore keeps inf, nan and -0.0), always written as a
  float so ``5.0`` never comes back as ``5``.
- Free-form JSON (``dict[str, Any]``: hyperparameters, experiment config, event data) is one
  JSON string: Firestore map keys must be non-empty and maps nest at most 20 levels deep,
  and nothing ever queries inside them.
- Tuples are arrays. Firestore refuses an array directly inside an array, so an element
  that is itself an array (``allocations``: ``(trial, (gpu, ...))``) is wrapped in a map
  ``{"items": [...]}``; the declared type says when to unwrap.
- Typed mappings (``CapacityMemory``) are arrays of ``{"k": key, "v": value}`` maps (map
  keys would refuse the empty string and dots need escaping in field paths), decoded
  read-only. Nested dataclasses are maps; enums their value.
- ``None`` is stored as null; a missing field decodes as its default, so old documents load.
- Every stored kind carries ``schema_version``; documents of an older version are migrated
  on read, of a newer one refused (``corral.adapters.migrations``, docs/upgrades.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar, get_args, get_origin

from corral.adapters import migrations
from corral.adapters.record_types import hints as _hints
from corral.adapters.record_types import is_json as _is_json
from corral.adapters.record_types import item_types, read_only
from corral.adapters.record_types import optional_inner as _optional_inner

Data = dict[str, Any]
D = TypeVar("D")
_WRAP = "items"  # the map key that carries an array nested in an array
_INT64 = (-(2**63), 2**63 - 1)


def _element(value: Any) -> Any:
    """An array element: arrays inside arrays are wrapped in a map."""
    return {_WRAP: value} if isinstance(value, list) else value


def _unwrap(value: Any) -> Any:
    return value[_WRAP] if isinstance(value, dict) and set(value) == {_WRAP} else value


# ---- encoding --------------------------------------------------------------------------------


def encode_value(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    inner = _optional_inner(tp)
    if inner is not None:
        return encode_value(value, inner)
    if _is_json(tp):
        return json.dumps(value, separators=(",", ":"))
    if tp is bool:
        return bool(value)
    if tp is int:
        number = int(value)
        if not _INT64[0] <= number <= _INT64[1]:
            raise ValueError(f"{number} does not fit Firestore's 64-bit integers")
        return number
    if tp is float:
        return float(value)
    if tp is str:
        return str(value)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return str(tp(value).value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return encode_fields(value)
    origin, args = get_origin(tp), get_args(tp)
    if origin is tuple:
        items = zip(value, item_types(args, len(value)), strict=True)
        return [_element(encode_value(v, t)) for v, t in items]
    if origin in (Mapping, dict, types.MappingProxyType):
        key_tp, value_tp = args
        return [
            {"k": encode_value(k, key_tp), "v": _element(encode_value(v, value_tp))}
            for k, v in value.items()
        ]
    raise TypeError(f"no Firestore encoding for {tp!r}")


def encode_fields(record: Any) -> Data:
    """Every field of a dataclass instance, ``None`` included (as null)."""
    hints = _hints(type(record))
    data = {
        f.name: encode_value(getattr(record, f.name), hints[f.name])
        for f in dataclasses.fields(record)
    }
    kind = migrations.SCHEMA.kind_of(type(record))
    if kind is not None:  # a stored kind: stamped with its schema version
        data = dict(migrations.SCHEMA.stamp(kind, migrations.StoredFields(data, VALUES)).raw)
    return data


# ---- decoding --------------------------------------------------------------------------------


def decode_value(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    inner = _optional_inner(tp)
    if inner is not None:
        return decode_value(value, inner)
    if _is_json(tp):
        return json.loads(value)
    if tp is bool:
        return bool(value)
    if tp is int:
        return int(value)
    if tp is float:
        return float(value)
    if tp is str:
        return str(value)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return decode_fields(tp, value)
    origin, args = get_origin(tp), get_args(tp)
    if origin is tuple:
        values = [_unwrap(v) for v in value]
        return tuple(
            decode_value(v, t) for v, t in zip(values, item_types(args, len(values)), strict=True)
        )
    if origin in (Mapping, dict, types.MappingProxyType):
        key_tp, value_tp = args
        pairs = {
            decode_value(p["k"], key_tp): decode_value(_unwrap(p["v"]), value_tp) for p in value
        }
        return read_only(pairs, origin)
    raise TypeError(f"no Firestore decoding for {tp!r}")


def decode_fields(cls: type[D], data: Mapping[str, Any]) -> D:
    """Build ``cls`` from document data; fields that are not the dataclass's are ignored.
    Data of an older schema version is migrated first; of a newer one refused
    (``migrations.NewerSchemaError``) unless it says this code may read it."""
    return migrations.decode_record(cls, data, VALUES)


# This codec's value functions, for migration steps (``migrations.StoredFields``).
VALUES = migrations.CodecFunctions(encode_value, decode_value)


# ---- keys ------------------------------------------------------------------------------------


def document_id(key: str) -> str:
    """A Firestore document id for a record key.

    Ids may not contain '/', be '.' or '..', match ``__.*__``, or pass 1500 bytes; such a
    key (never produced by Corral itself, but pool names and ids come from outside) is
    hex-encoded behind a prefix no plain key of that shape can have. The record's own key
    is also stored as a field, so nothing is ever decoded from the document id.
    """
    plain = (
        key
        and "/" not in key
        and key not in (".", "..")
        and not (key.startswith("__") and key.endswith("__"))
        and not key.startswith("~")
        and len(key.encode()) <= 1500
    )
    if plain:
        return key
    encoded = key.encode().hex()
    if len(encoded) <= 1400:
        return "~x" + encoded
    return "~h" + hashlib.sha256(key.encode()).hexdigest()
