"""Reading a record dataclass's field types: what the type-hint driven codecs of every store
(DynamoDB, Firestore) share, so a field added to a record is stored everywhere unchanged."""

from __future__ import annotations

import struct
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, get_args, get_origin, get_type_hints


@cache
def _cached_hints(cls: Any) -> dict[str, Any]:
    return get_type_hints(cls)


def hints(cls: type) -> dict[str, Any]:
    """Field name -> resolved type, computed once per class."""
    return _cached_hints(cls)


def optional_inner(tp: Any) -> Any | None:
    """``X`` for ``X | None`` (or ``Optional[X]``), else None."""
    if get_origin(tp) in (types.UnionType, typing.Union):
        inner = [a for a in get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {tp!r}: only X | None is stored")
        return inner[0]
    return None


def is_json(tp: Any) -> bool:
    """Free-form JSON fields (``Any``, ``dict[str, Any]``): stored whole, never queried."""
    return tp is Any or (get_origin(tp) is dict and get_args(tp)[1:] == (Any,))


def item_types(args: tuple[Any, ...], count: int) -> tuple[Any, ...]:
    """The declared type of each of ``count`` items of a ``tuple[...]`` with type arguments
    ``args``: ``tuple[X, ...]`` holds any number of ``X``, ``tuple[X, Y]`` exactly those."""
    if len(args) == 2 and args[1] is Ellipsis:
        return (args[0],) * count
    return args


def read_only(pairs: dict[Any, Any], origin: Any) -> Mapping[Any, Any]:
    """A decoded mapping field: read-only unless declared ``dict``, so a record read from the
    store can never be changed behind its back."""
    return pairs if origin is dict else types.MappingProxyType(pairs)


def sortable_float(x: float) -> str:
    """16 hex digits whose string order is the numeric order of ``x`` (exact, any sign).

    Sort keys are strings so a timestamp can be joined with a tie-breaker; the IEEE 754 bits,
    sign-flipped, sort like the numbers they encode.
    """
    (bits,) = struct.unpack(">Q", struct.pack(">d", float(x) + 0.0))  # + 0.0: -0.0 -> 0.0
    bits = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits >> 63 else bits | (1 << 63)
    return f"{bits:016x}"
