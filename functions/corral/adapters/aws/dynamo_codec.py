"""Records <-> DynamoDB items (the low-level AttributeValue format), driven by type hints.

The codec walks each dataclass's annotated fields, so a field added to a record is stored
without touching this module, and every value comes back with the type it was declared with:

- ``int`` and finite ``float`` become ``N``. DynamoDB normalises numbers (``5.0`` comes back
  as ``5``), so the *declared* type decides what is decoded, never the text. ``repr(float)``
  is the shortest exact decimal (<= 17 digits; DynamoDB keeps 38), so floats are lossless.
- Floats DynamoDB cannot hold as ``N`` (inf, nan, -0.0, beyond 1e125 or below 1e-130) are
  kept as their ``repr`` in an ``S``; the declared type turns them back into floats.
- Free-form JSON (``dict[str, Any]``: hyperparameters, experiment config, event data) is one
  JSON string: it keeps ``1`` and ``1.0`` apart, and it never meets the 32-level map nesting
  limit or the number-precision limit of DynamoDB maps.
- Tuples are lists (``L``; string sets would lose order and cannot be empty); nested
  dataclasses are maps; enums their value; typed mappings (``CapacityMemory``) a list of
  ``[key, value]`` pairs (map keys would refuse the empty string), decoded read-only.
- ``None`` at the top level or in a nested record omits the attribute (sparse indexes rely on
  it: an instance without ``cloud_id`` is not in the cloud-id index); inside a list it is
  ``NULL``. A missing attribute decodes as the field's default, so old items still load.
- Every stored kind carries ``schema_version``; items of an older version are migrated on
  read, items of a newer one refused (``corral.adapters.migrations``, docs/upgrades.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from collections.abc import Mapping
from decimal import Decimal
from enum import Enum
from typing import Any, TypeVar, get_args, get_origin

from corral.adapters import migrations
from corral.adapters.record_types import hints as _hints
from corral.adapters.record_types import is_json as _is_json
from corral.adapters.record_types import item_types, read_only
from corral.adapters.record_types import optional_inner as _optional_inner

AttributeValue = dict[str, Any]
Item = dict[str, AttributeValue]
D = TypeVar("D")

# DynamoDB's number range (positive side); outside it a float is stored as text.
_N_MIN, _N_MAX = 1e-130, 1e125


# ---- encoding --------------------------------------------------------------------------------


def encode_float(value: float) -> AttributeValue:
    x = float(value)
    if (x == 0.0 and math.copysign(1.0, x) > 0) or (math.isfinite(x) and _N_MIN <= abs(x) < _N_MAX):
        return {"N": repr(x)}
    return {"S": repr(x)}


def encode_value(value: Any, tp: Any) -> AttributeValue:
    inner = _optional_inner(tp)
    if inner is not None:
        return {"NULL": True} if value is None else encode_value(value, inner)
    if _is_json(tp):
        return {"S": json.dumps(value, separators=(",", ":"))}
    if tp is bool:
        return {"BOOL": bool(value)}
    if tp is int:
        return {"N": str(int(value))}
    if tp is float:
        return encode_float(value)
    if tp is str:
        return {"S": str(value)}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return {"S": str(tp(value).value)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return {"M": encode_fields(value)}
    origin, args = get_origin(tp), get_args(tp)
    if origin is tuple:
        items = zip(value, item_types(args, len(value)), strict=True)
        return {"L": [encode_value(v, t) for v, t in items]}
    if origin in (Mapping, dict, types.MappingProxyType):
        key_tp, value_tp = args
        return {
            "L": [
                {"L": [encode_value(k, key_tp), encode_value(v, value_tp)]}
                for k, v in value.items()
            ]
        }
    raise TypeError(f"no DynamoDB encoding for {tp!r}")


def encode_fields(record: Any) -> Item:
    """Every field of a dataclass instance; ``None`` fields are left out (they decode as
    their default), unless the default is something else: then ``None`` is stored as NULL.
    A stored kind (``migrations.SCHEMA``) also gets its ``schema_version``."""
    hints = _hints(type(record))
    item: Item = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is not None:
            item[f.name] = encode_value(value, hints[f.name])
        elif f.default not in (None, dataclasses.MISSING) or (
            f.default_factory is not dataclasses.MISSING
        ):
            item[f.name] = {"NULL": True}
    kind = migrations.SCHEMA.kind_of(type(record))
    if kind is not None:
        item = dict(migrations.SCHEMA.stamp(kind, migrations.StoredFields(item, VALUES)).raw)
    return item


# ---- decoding --------------------------------------------------------------------------------


def _number(av: AttributeValue) -> str:
    if "N" in av:
        return str(av["N"])
    if "S" in av:  # a float kept as text (inf, nan, -0.0, out of DynamoDB's range)
        return str(av["S"])
    raise ValueError(f"expected a number, got {av!r}")


def decode_value(av: AttributeValue, tp: Any) -> Any:
    if av.get("NULL"):
        return None
    inner = _optional_inner(tp)
    if inner is not None:
        return decode_value(av, inner)
    if _is_json(tp):
        return json.loads(av["S"])
    if tp is bool:
        return bool(av["BOOL"])
    if tp is int:
        return int(Decimal(_number(av)))  # Decimal: accepts "1E+3" should DynamoDB send it
    if tp is float:
        return float(_number(av))
    if tp is str:
        return str(av["S"])
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(av["S"])
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return decode_fields(tp, av["M"])
    origin, args = get_origin(tp), get_args(tp)
    if origin is tuple:
        values = av["L"]
        return tuple(
            decode_value(v, t) for v, t in zip(values, item_types(args, len(values)), strict=True)
        )
    if origin in (Mapping, dict, types.MappingProxyType):
        key_tp, value_tp = args
        pairs = {
            decode_value(p["L"][0], key_tp): decode_value(p["L"][1], value_tp) for p in av["L"]
        }
        return read_only(pairs, origin)
    raise TypeError(f"no DynamoDB decoding for {tp!r}")


def decode_fields(cls: type[D], item: Mapping[str, AttributeValue]) -> D:
    """Build ``cls`` from an item; attributes that are not fields (keys, TTL) are ignored.
    An item of an older schema version is migrated first; one of a newer version is refused
    (``migrations.NewerSchemaError``) unless it says this code may read it."""
    return migrations.decode_record(cls, item, VALUES)


# This codec's value functions, for migration steps (``migrations.StoredFields``).
VALUES = migrations.CodecFunctions(encode_value, decode_value)
